"""The bottle registry: provisioning and key rotation (`provisioning`), the provisioning body (`spec`), the
registry entries other jobs read, cached per worker (`entries`), and the status view (`status`)."""
