"""The archive's consumers of its feeds (shared/feeds/consumers.py), active when the app has an archive: the actions,
swept by receive hour into files (`ActionsArchiving`), and the heartbeats the tally could not hand over, read again
from the heartbeat documents (`HeartbeatsCatchUp`); and the port the tally hands its bottle-hours through
(`heartbeat_hand_off`). Without an archive (the setting went away since a message was sent) a run does nothing."""

import logging
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from pymongo.database import Database

from shared.archive.actions import MERGE_ATTEMPTS, run_actions_sweep
from shared.archive.catch_up import ArchiveHandOff, run_catch_up, trail
from shared.archive.feeds import ACTIONS_ARCHIVE, HEARTBEATS_ARCHIVE
from shared.archive.heartbeats import HeartbeatArchiver
from shared.archive.storage import Archive, ArchiveUnavailable
from shared.feeds.consumers import Consumer, Trail, Work, budget_of
from shared.feeds.leases import Lease
from shared.feeds.partitions import Feed, Partition
from shared.instants import format_instant
from shared.store.retries import RetryPolicy

log = logging.getLogger(__name__)


class _ArchiveConsumer(Consumer):
    """A consumer whose target is the archive: active when the app has one, its run failed by the archive's store
    not answering (after the lease is released, as a database error does)."""

    failures = (ArchiveUnavailable,)

    def __init__(self, archive: Archive | None) -> None:
        self._archive = archive

    @property
    def active(self) -> bool:
        return self._archive is not None


class ActionsArchiving(_ArchiveConsumer):
    """The receive hours due into the archive (shared/archive/actions.py), until done or out of budget."""

    feed = ACTIONS_ARCHIVE

    def run(self, work: Work, held: Lease) -> Lease:
        if self._archive is None:
            return held
        held, swept = run_actions_sweep(work.db, held, archive=self._archive, **budget_of(work, "archive"))
        work.run.pages += swept.pages
        work.run.changes += swept.events
        work.run.caught_up = swept.caught_up
        if swept.contended is not None:
            _gave_way(work, *swept.contended)
        return held


def _gave_way(work: Work, name: str, hour: datetime, chunk: int) -> None:
    """The sweep gave way to another writer of a file of its chunk: one warning an operator can act on (two
    workers on one partition for that long is a lease taken over from a live worker, or clocks far apart)."""
    work.run.gave_way = True
    log.warning(
        "archive: %s gave way to another writer: %s (receive hour %s, chunk %d) changed between each of this "
        "run's reads and guarded writes, %d times; the run saved nothing past its last position, and the next "
        "run carries on from it",
        work.partition.lease_id,
        name,
        format_instant(hour),
        chunk,
        MERGE_ATTEMPTS,
        extra=work.fields(file=name, hour=hour, chunk=chunk, gave_way=True),
    )


class HeartbeatsCatchUp(_ArchiveConsumer):
    """The archive's heartbeats of a partition: the hours the tally (the feed `follows`) could not hand it, read from
    the heartbeat documents (shared/archive/catch_up.py); its partitions are due when behind the tally's."""

    feed = HEARTBEATS_ARCHIVE

    def __init__(self, archive: Archive | None, *, follows: Feed) -> None:
        super().__init__(archive)
        self._follows = follows

    def run(self, work: Work, held: Lease) -> Lease:
        if self._archive is None:
            return held
        rows = HeartbeatArchiver(self._archive)
        budget = budget_of(work, "archive")
        held, caught = run_catch_up(work.db, work.partition, held, follows=self._follows, rows=rows, **budget)
        work.run.pages += caught.pages
        work.run.changes += caught.documents
        work.run.caught_up = caught.caught_up
        return held

    def trail(self, db: Database[Any], partitions: Sequence[Partition], *, now: datetime, policy: RetryPolicy) -> Trail:
        return trail(db, partitions, follows=self._follows, now=now, policy=policy)


def heartbeat_hand_off(archive: Archive | None, work: Work) -> ArchiveHandOff | None:
    """The port a tally run (`work`, a tally partition's) hands its bottle-hours to the archive through; None
    without an archive."""
    if archive is None:
        return None
    return ArchiveHandOff(
        work.db,
        work.partition,
        HeartbeatArchiver(archive),
        overlap=timedelta(seconds=work.settings.reports_poll_overlap_seconds),
        policy=work.policy,
        wall_clock=work.wall_clock,
    )
