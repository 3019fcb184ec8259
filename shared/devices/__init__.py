"""What a bottle's device owns and sends: its key, how its times are read, and its heartbeat document."""
