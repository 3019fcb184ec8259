"""The feeds the archive reads, when the app has one (shared/archive/current.py). Their keys name their leases and
work messages, so they never change."""

from shared.feeds.partitions import Feed, Shape
from shared.store import schema

# The actions by receive time, swept an hour at a time into files named by their content: one partition
# (shared/archive/actions.py).
ACTIONS_ARCHIVE = Feed(schema.BOTTLE_ACTIONS, "received_at", name="actions_archive", shape=Shape.HOURLY_WHOLE)
# The heartbeats: a partition per partition of the heartbeat tally (the same bucket ranges), whose lease is the
# archive's own position in the tally's hours; it reads the heartbeat documents only for the passes the tally could
# not hand over (shared/archive/catch_up.py).
HEARTBEATS_ARCHIVE = Feed(schema.BOTTLE_HEARTBEATS, "", name="heartbeats_archive", shape=Shape.TRAILING)
ARCHIVE_FEEDS = (ACTIONS_ARCHIVE, HEARTBEATS_ARCHIVE)
