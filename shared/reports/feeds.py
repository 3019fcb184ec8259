"""The feeds the reports read: the actions, as changes (shared/reports/aggregation.py), and the heartbeat documents,
swept once an hour by the tally (shared/reports/tally.py). Their keys name their leases and work messages, so they
never change."""

from shared.feeds.partitions import Feed, Shape
from shared.store import schema

ACTIONS_FEED = Feed(schema.BOTTLE_ACTIONS, "received_at", ("bottle_id", "time"))
HEARTBEAT_TALLY = Feed(schema.BOTTLE_HEARTBEATS, "", name="heartbeat_tally", shape=Shape.HOURLY)  # no time: it sweeps
REPORT_FEEDS = (ACTIONS_FEED, HEARTBEAT_TALLY)
