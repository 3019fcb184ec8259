"""Notifications: the three checks (`checks/`: indexed sweeps for bottles left open, silent, or late with a
dose), the notification documents (`documents`: one per episode), their delivery to the queue (`delivery`,
through the Storage queue client in `queue`) and reading them (`reading`)."""
