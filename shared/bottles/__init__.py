"""The bottle registry: provisioning and key rotation (`provisioning`), the provisioning body (`spec`), the
registry entries other jobs read, per request and never cached (`entries`), and the status view (`status`)."""
