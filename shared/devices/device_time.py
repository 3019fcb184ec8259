"""How a device's times are read: its clock against the server's (a rule ingestion enforces and the reports rely
on), and the order of its opened/closed events (one rule for the bottle's status and the reports' readings)."""

from datetime import datetime, timedelta

# The furthest ahead of the server clock an event's device time may be (ingestion rejects later ones), so
# nothing of an hour is received before that hour's start minus this.
MAX_FUTURE_SKEW = timedelta(minutes=5)
# A heartbeat received longer than this after its device time is late: the report consumer cannot find its
# hour from its time alone (shared/devices/heartbeat_document.py lists it).
LATE_AFTER = timedelta(minutes=5)


def action_order(time: datetime, action: str | None) -> tuple[datetime, bool]:
    """The sort key of an opened/closed event ("opened" or "closed") at `time`: by time, and at the same instant a
    close after an open, so an open and a close of one instant leave the bottle closed whichever arrived first."""
    return time, action == "closed"
