"""Notifications: the three checks (`checks`: indexed sweeps for bottles left open, silent, or late with a
dose), the notification documents (`documents`: one per episode), their delivery to the queue (`delivery`)
and reading them (`reading`)."""
