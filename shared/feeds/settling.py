"""When an hour of the feeds is settled: what was received in it, and the prompt heartbeats of it, are all stored,
so a consumer may count it (the heartbeat tally) or file it (the archive's sweep of the events)."""

from datetime import datetime, timedelta

from shared.devices.device_time import LATE_AFTER
from shared.instants import hour_of

# An hour is counted this long after it ends: its prompt heartbeats have arrived by LATE_AFTER, and the rest is
# margin for clock skew between instances and writes that commit late.
CLOCK_MARGIN = timedelta(minutes=5)
SETTLE = LATE_AFTER + CLOCK_MARGIN


def hours_due(now: datetime) -> datetime:
    """The end of the hours a pass may count at `now`: every hour that ended at least SETTLE ago."""
    return hour_of(now - SETTLE)
