"""Notifications: the three checks (`checks/`: indexed sweeps for bottles left open, silent, or late with a
dose), the notification documents (`documents`: one per episode), their delivery to the queue (`delivery`,
through the Storage queue client in `queue`), reading them (`reading`), and the two shapes they take outside the
store, the queue message and the API's view (`outside`)."""
