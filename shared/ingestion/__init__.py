"""Ingestion: device requests in, events stored. `receive` (a request end to end), `events` (validation),
`authentication` (device keys), `storing` (the idempotent writes and the status they keep current)."""
