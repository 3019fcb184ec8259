"""The feeds the app keeps and the consumer of each, plugged into the feed machinery (shared/feeds): the dispatcher
and the worker of `aggregate_reports` and `aggregate_report_partition` with every consumer in place. The reports
and the archive never import each other; here the tally is handed the archive's port (`heartbeat_hand_off`), and
the archive's catch-up the tally's feed it trails."""

import time
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from pymongo.database import Database

from shared.archive.consumers import ActionsArchiving, HeartbeatsCatchUp, heartbeat_hand_off
from shared.archive.current import get_archive
from shared.archive.feeds import ARCHIVE_FEEDS
from shared.feeds import dispatcher, worker
from shared.feeds.consumers import Consumer, PartitionRun
from shared.feeds.dispatcher import DispatchRun
from shared.feeds.partitions import Feed, Partition
from shared.feeds.sources import Watch
from shared.reports.consumers import ActionsAggregation, HeartbeatTally
from shared.reports.feeds import HEARTBEAT_TALLY, REPORT_FEEDS
from shared.settings import Settings

# Every feed a work message may name, by key (a message for an archive feed may outlive the archive's setting).
FEEDS: Mapping[str, Feed] = {feed.key: feed for feed in (*REPORT_FEEDS, *ARCHIVE_FEEDS)}


def consumers(settings: Settings, *, watch: Watch | None = None) -> list[Consumer]:
    """A consumer of each feed, for one invocation (a consumer may hold a run's state): the reports', then the
    archive's (inactive without an archive)."""
    archive = get_archive(settings)
    return [
        ActionsAggregation(watch),
        HeartbeatTally(hand_off=lambda work: heartbeat_hand_off(archive, work)),
        ActionsArchiving(archive),
        HeartbeatsCatchUp(archive, follows=HEARTBEAT_TALLY),
    ]


def partition_of(message: Mapping[str, Any]) -> Partition:
    """The partition a work message names; ValueError for anything else."""
    return Partition.from_message(message, FEEDS)


def dispatch(
    db: Database[Any],
    *,
    now: datetime,
    settings: Settings,
    send: Callable[[list[str]], None],
    on_cosmos: bool | None = None,
) -> DispatchRun:
    """One run of `aggregate_reports` over every active consumer's feed (shared/feeds/dispatcher.py)."""
    return dispatcher.dispatch(db, consumers(settings), now=now, settings=settings, send=send, on_cosmos=on_cosmos)


def process_partition(
    db: Database[Any],
    partition: Partition,
    *,
    now: datetime,
    settings: Settings,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    watch: Watch | None = None,
) -> PartitionRun:
    """One run of `aggregate_report_partition` by the consumer of the partition's feed (shared/feeds/worker.py)."""
    [consumer] = [c for c in consumers(settings, watch=watch) if c.feed == partition.feed]
    return worker.process_partition(
        db, partition, consumer=consumer, now=now, settings=settings, clock=clock, sleep=sleep
    )
