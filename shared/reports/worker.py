"""A report partition's worker (the queue trigger `aggregate_report_partition`): it claims the partition's lease,
reads and aggregates its changes page by page within a time budget, checkpointing after each page (guarded by the
lease), then releases the lease. A tally partition counts its due hours instead (shared/reports/tally.py), and the
archive's partition sweeps its due receive hours (shared/archive/actions.py). Why a run asks again after empty
pages: docs/reports.md (Change streams on Cosmos DB)."""

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from pymongo.database import Database
from pymongo.errors import OperationFailure, PyMongoError

from shared.archive.actions import MERGE_ATTEMPTS, run_actions_sweep
from shared.archive.current import get_archive
from shared.archive.heartbeats import HeartbeatArchiver
from shared.archive.storage import ArchiveUnavailable
from shared.feeds.leases import Lease, checkpoint, claim, new_owner, release
from shared.feeds.partitions import NoPartitionTokens, Partition
from shared.instants import format_instant, to_stored
from shared.reports.aggregation import Stamper, refresh_hourly
from shared.reports.archiving import ArchiveHandOff, run_catch_up
from shared.reports.sources import (
    Page,
    PartitionLayoutChanged,
    PollingSource,
    Source,
    Watch,
    aggregated_before,
    open_source,
)
from shared.reports.tally import rolled_up_before, run_tally
from shared.settings import Settings
from shared.store.partitioning import BUCKET_FIELD
from shared.store.retries import RetryPolicy, StoreUnavailable, is_transient, with_retries
from shared.telemetry import metrics
from shared.telemetry.observability import fields

log = logging.getLogger(__name__)

# Back-off between empty pages after a full one (a throttled stream): doubles from the first to the last.
THROTTLED_BACKOFF_S = (0.1, 2.0)
# At most this many empty pages with the position unmoved are asked again after a full one (about 9 s of waits):
# throttling, or a partition with nothing new whose position stands still; past it the run ends.
THROTTLED_RETRIES = 8


@dataclass
class PartitionRun:
    """What one worker invocation did with its partition: for its log line and the tests."""

    lease_id: str
    claimed: bool = False  # False: a live worker holds the partition (a message delivered twice)
    pages: int = 0
    changes: int = 0
    hourly_written: int = 0
    daily_written: int = 0
    caught_up: bool = False
    empty_retries: int = 0  # empty pages after a full one (a throttled stream), asked again after a back-off
    recovered: bool = False  # rebuilt from a checkpoint time
    lost_lease: bool = False  # taken over after it expired: stopped without saving a position
    layout_changed: bool = False  # Cosmos DB split the partition: the new layout's leases carry on
    gave_way: bool = False  # the archive's sweep gave way to another writer of its chunk's files (logged)
    checkpoint_time: datetime | None = None


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
    """One run of `aggregate_report_partition`: claim the partition's lease, then page by page aggregate and
    checkpoint until caught up or the time budget is spent (checked between pages), then release the lease.

    A tally partition instead counts its due hours (shared/reports/tally.py), and the archive's partition sweeps
    its due receive hours into the archive (shared/archive/actions.py), under the same kind of lease.

    A database or archive error, or a GetChangeStreamTokens reply without tokens, propagates (the invocation fails
    and its message is retried) after the lease is released, so the retry can claim it at once; what was
    checkpointed stays."""
    worker = _Worker(db, partition, settings, now=now, clock=clock, sleep=sleep)
    lease = claim(db, partition, worker.owner, now=now, lease_for=worker.lease_for, policy=worker.policy)
    if lease is None:
        return worker.run
    worker.run.claimed = True
    held = replace(lease, owner=worker.owner)
    try:
        if partition.feed.tally and partition.feed.archive:
            held = worker.catch_up(held)
        elif partition.feed.tally:
            held = worker.tally(held)
        elif partition.feed.archive:
            held = worker.sweep_to_archive(held)
        else:
            held = worker.read_and_aggregate(held, watch)
    except PartitionLayoutChanged as change:
        log.info(
            "reports: %s belongs to an old partition layout (%s); leaving it",
            partition.lease_id,
            change,
            extra=fields(feed=partition.feed.key, partition=partition.lease_id),
        )
        worker.run.layout_changed = True
    except (PyMongoError, StoreUnavailable, NoPartitionTokens, ArchiveUnavailable):
        worker.release_quietly(held)
        raise
    if not worker.run.lost_lease:
        release(db, partition, held, now=worker.wall_clock(), policy=worker.release_policy())
    worker.run.checkpoint_time = held.checkpoint_time
    if held.checkpoint_time is not None and not partition.feed.hourly:
        since = held.checkpoint_time
        since = since if since.tzinfo is not None else since.replace(tzinfo=UTC)
        metrics.partition_lag(partition.feed.key, partition.lease_id, (worker.wall_clock() - since).total_seconds())
    return worker.run


class _Worker:
    """One worker invocation on one partition: its budget, its lease timing and what it did."""

    def __init__(
        self,
        db: Database[Any],
        partition: Partition,
        settings: Settings,
        *,
        now: datetime,
        clock: Callable[[], float],
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.db, self.partition, self.settings = db, partition, settings
        self.policy = RetryPolicy.for_run(settings, settings.reports_time_budget_seconds)
        self.lease_for = timedelta(seconds=settings.reports_lease_seconds)
        self.owner = new_owner()
        self.run = PartitionRun(partition.lease_id)
        self.now, self.clock, self.sleep, self._started = now, clock, sleep, clock()
        self.deadline = self._started + settings.reports_time_budget_seconds  # on `clock`

    def fields(self, **values: object) -> dict[str, object]:
        """The log fields of this run's lines: its feed and partition (lease id), and `values`."""
        return fields(feed=self.partition.feed.key, partition=self.partition.lease_id, **values)

    def wall_clock(self) -> datetime:
        """The server clock as the run goes on (the trigger read `now` once, at the start)."""
        return self.now + timedelta(seconds=self.clock() - self._started)

    def out_of_time(self) -> bool:
        return self.clock() >= self.deadline

    def tally(self, held: Lease) -> Lease:
        """The heartbeat tally's due hours, until done or out of budget; the position reached. With an archive, the
        pass hands the bottle-hours it counts to it (shared/reports/archiving.py), never waiting on it."""
        assert self.partition.buckets is not None, "the tally's partitions are bucket ranges"
        archive = get_archive(self.settings)
        hand_off = None
        if archive is not None:
            hand_off = ArchiveHandOff(
                self.db,
                self.partition,
                HeartbeatArchiver(archive),
                overlap=timedelta(seconds=self.settings.reports_poll_overlap_seconds),
                policy=self.policy,
                wall_clock=self.wall_clock,
            )
        held, tallied = run_tally(
            self.db,
            self.partition.buckets,
            held,
            settings=self.settings,
            policy=self.policy,
            wall_clock=self.wall_clock,
            out_of_time=self.out_of_time,
            save=lambda lease: self.save(lease, "tally"),
            pause=self._pause,
            archive=hand_off,
        )
        self.run.pages += tallied.pages
        self.run.changes += tallied.documents
        self.run.hourly_written += tallied.hourly_written
        self.run.daily_written += tallied.daily_written
        self.run.caught_up = tallied.caught_up
        return held

    def catch_up(self, held: Lease) -> Lease:
        """The archive's heartbeats of the partition: the hours the tally could not hand it, read from the heartbeat
        documents (shared/reports/archiving.py); without an archive (the setting went away since) nothing."""
        archive = get_archive(self.settings)
        if archive is None:
            return held
        held, caught = run_catch_up(
            self.db,
            self.partition,
            held,
            rows=HeartbeatArchiver(archive),
            settings=self.settings,
            policy=self.policy,
            wall_clock=self.wall_clock,
            out_of_time=self.out_of_time,
            save=lambda lease: self.save(lease, "archive"),
            pause=self._pause,
        )
        self.run.pages += caught.pages
        self.run.changes += caught.documents
        self.run.caught_up = caught.caught_up
        return held

    def sweep_to_archive(self, held: Lease) -> Lease:
        """The receive hours due into the archive, until done or out of budget; the position reached. Without an
        archive (the setting went away since the message was sent) it does nothing."""
        archive = get_archive(self.settings)
        if archive is None:
            return held
        held, swept = run_actions_sweep(
            self.db,
            held,
            settings=self.settings,
            archive=archive,
            policy=self.policy,
            wall_clock=self.wall_clock,
            out_of_time=self.out_of_time,
            save=lambda lease: self.save(lease, "archive"),
            pause=self._pause,
        )
        self.run.pages += swept.pages
        self.run.changes += swept.events
        self.run.caught_up = swept.caught_up
        if swept.contended is not None:
            self._gave_way(*swept.contended)
        return held

    def _gave_way(self, name: str, hour: datetime, chunk: int) -> None:
        """The sweep gave way to another writer of a file of its chunk: one warning an operator can act on (two
        workers on one partition for that long is a lease taken over from a live worker, or clocks far apart)."""
        self.run.gave_way = True
        log.warning(
            "archive: %s gave way to another writer: %s (receive hour %s, chunk %d) changed between each of this "
            "run's reads and guarded writes, %d times; the run saved nothing past its last position, and the next "
            "run carries on from it",
            self.partition.lease_id,
            name,
            format_instant(hour),
            chunk,
            MERGE_ATTEMPTS,
            extra=self.fields(file=name, hour=hour, chunk=chunk, gave_way=True),
        )

    def _pause(self, seconds: float) -> bool:
        """Wait `seconds` for a paced tally's next page if the budget leaves time for it; False: it does not."""
        if self.clock() + seconds >= self.deadline:
            return False
        self.sleep(seconds)
        return True

    def read_and_aggregate(self, held: Lease, watch: Watch | None) -> Lease:
        """Pages until caught up or out of budget; the position reached (saved unless the lease was lost)."""
        source, self.run.recovered = open_source(
            self.db, self.partition, held, self.settings, policy=self.policy, watch=watch
        )
        reading = _Reading(self, source, held)
        try:
            if reading.read_pages():
                reading.finish()
        finally:
            source.close()
        return reading.held

    def save(self, held: Lease, source: str) -> bool:
        """Checkpoint the position and renew the lease; False (logged, and the run marked) if the lease was lost."""
        saved = checkpoint(
            self.db,
            self.partition,
            held,
            source=source,
            now=self.wall_clock(),
            lease_for=self.lease_for,
            policy=self.policy,
        )
        if not saved:
            log.warning(
                "reports: lost the lease of %s to another worker; stopping unsaved",
                self.partition.lease_id,
                extra=self.fields(),
            )
            self.run.lost_lease = True
        return saved

    def release_policy(self) -> RetryPolicy:
        """A release has a request's deadline of its own: the run's may be what just ran out."""
        return RetryPolicy.for_request(self.settings)

    def release_quietly(self, held: Lease) -> None:
        try:
            release(self.db, self.partition, held, now=self.wall_clock(), policy=self.release_policy())
        except (PyMongoError, StoreUnavailable) as error:  # the lease then expires on its own
            log.warning(
                "reports: could not release %s: %s",
                self.partition.lease_id,
                type(error).__name__,
                extra=self.fields(error=type(error).__name__),
            )


class _Reading:
    """A worker's pages from one source: each page with changes is aggregated and its position saved; an empty
    page ends the run unless it may be throttling (after a full page), which is asked again with back-off."""

    def __init__(self, worker: _Worker, source: Source, held: Lease) -> None:
        self._worker, self._run, self._source = worker, worker.run, source
        self.held = self._saved = held  # the position reached, and the last one saved
        self._stamper = Stamper(worker.now)
        self._backoff = _Backoff(worker.clock, worker.sleep, worker.deadline)
        # When a polling run began, before its first query (None for a change stream): see `_polled`.
        self._polled_at = worker.wall_clock() if source.name == PollingSource.name else None
        # The last run stopped after a full page (its budget ran out with more waiting): an empty first page is
        # as likely throttling as the end, unless nothing was written after the checkpoint (asked once).
        self._backoff.arm(held.behind)
        self._unchecked = held.behind

    def read_pages(self) -> bool:
        """Read until caught up, out of retries or out of budget, or until the stream refuses the saved position at
        its first read; False if the lease was lost (the run stops there, unsaved)."""
        while not self._worker.out_of_time():
            try:
                page = self._source.next_page()
            except OperationFailure as error:
                if not self._refuses_saved_position(error):
                    raise
                self.held = self._without_refused_position(error)
                return True
            if page is not None:
                self.held = _advanced(self.held, page, self._polled_at)
            if page is None or not page.changes:
                if not self._asks_again_after_no_changes(page):
                    return True
                continue
            if not self._aggregated_and_saved(page):
                return False
        return True

    def finish(self) -> None:
        """The run's end: a back-off ended without an answer is logged, and the position is saved if it moved
        since the last save (a polling run that read to the end also keeps when it began: `_polled`)."""
        if self._backoff.exhausted:
            self._gave_up_asking_again()
        elif self._run.empty_retries and not self._run.caught_up:
            log.warning(
                "reports: %s: the change stream kept answering empty pages after a full one (%d asked again, "
                "throttled?); the run ends with its budget and the next run carries on",
                self._worker.partition.lease_id,
                self._run.empty_retries,
                extra=self._worker.fields(asked_again=self._run.empty_retries),
            )
        self.held = self._polled(self.held)
        if self.held != self._saved:
            self._worker.save(self.held, self._source.name)

    def _refuses_saved_position(self, error: OperationFailure) -> bool:
        """Whether a read's error is the stream refusing the lease's token at its first read: not transient, before
        any page, on a stream resumed from the lease's token (not a recovery). Anything else fails the run."""
        return not (is_transient(error) or self._run.pages or self._run.recovered or self.held.token is None)

    def _without_refused_position(self, refused: OperationFailure) -> Lease:
        """The stream accepted the lease's token when it opened, then refused it at its first read (a store may
        check a token only then: a split parent's, or a child's inherited one it does not take): the position
        without the token, so the next run recovers from the checkpoint time instead of failing on it again."""
        log.warning(
            "reports: %s: the change stream refused its saved position at its first read (code %s: %s); the next "
            "run recovers from the checkpoint time %s minus %ds",
            self._worker.partition.lease_id,
            refused.code,
            refused.details.get("errmsg") if refused.details else refused,
            format_instant(self.held.checkpoint_time) if self.held.checkpoint_time else "(none: from the start)",
            self._worker.settings.reports_poll_overlap_seconds,
            extra=self._worker.fields(code=refused.code),
        )
        return replace(self.held, token=None)

    def _asks_again_after_no_changes(self, page: Page | None) -> bool:
        """After a read with no changes: True once a back-off was waited out (ask again), False when the run ends
        (caught up, or out of retries or budget). Nothing new is caught up unless the last page was full (a
        throttled stream answers empty pages, its position unmoved); the position is saved at the end."""
        if self._is_idle(page):
            self.held = replace(self.held, behind=False)
            self._backoff.arm(False)
        self._unchecked = False
        if not self._backoff.armed or not self._backoff.wait():
            self._run.caught_up = not self._backoff.armed
            return False
        self._run.empty_retries += 1
        return True

    def _is_idle(self, page: Page | None) -> bool:
        """Whether a read with no changes shows the partition idle: an empty page that moved the position was
        answered (asking on would spin until the budget is spent: an empty getMore's token moves with others'
        writes, MongoDB's postBatchResumeToken); and so was a run's first read after a full page when the feed
        holds nothing received after the checkpoint."""
        return page is not None or (self._unchecked and not self._written_after_checkpoint())

    def _aggregated_and_saved(self, page: Page) -> bool:
        """Aggregate a page of changes and save the position after it; False if the lease was lost. A full page
        of a stream arms the back-off: more may be waiting, so an empty page after it is asked again."""
        self._aggregate(page)
        full = page.token is not None and len(page.changes) >= self._worker.settings.reports_page_size
        self._backoff.arm(full)
        self.held, self._unchecked = replace(self.held, behind=full), False
        if not self._worker.save(self.held, self._source.name):
            return False
        self._saved = self.held
        return True

    def _aggregate(self, page: Page) -> None:
        written = self._worker.wall_clock()
        result = refresh_hourly(
            self._worker.db,
            page.changes,
            stamp=self._stamper.next(to_stored(written)),
            policy=self._worker.policy,
            rolled_up_before=rolled_up_before(written),
        )
        self._run.hourly_written += result.written
        self._run.pages += 1
        self._run.changes += len(page.changes)

    def _gave_up_asking_again(self) -> None:
        """Out of retries after a full page (throttled for that long, or idle with a position that stands still):
        the next run does not wait again on its first empty page (`behind` forgotten), and carries on from the
        same position."""
        self.held = replace(self.held, behind=False)
        log.warning(
            "reports: %s: the change stream answered %d empty pages in a row after a full one, its position "
            "unmoved (throttled, or nothing new and a position that stands still); the run ends and the "
            "next run carries on",
            self._worker.partition.lease_id,
            self._run.empty_retries,
            extra=self._worker.fields(asked_again=self._run.empty_retries),
        )

    def _polled(self, held: Lease) -> Lease:
        """After a polling run that read its partition to the end, the position with when it began, if that moves
        where the next run starts; else the position as it was, so the runs of a partition quiet for longer than
        the overlap save nothing (and read nothing)."""
        if self._polled_at is None or not self._run.caught_up:
            return held
        moved = replace(held, polled_at=self._polled_at)
        settings = self._worker.settings
        if aggregated_before(moved, settings) == aggregated_before(held, settings):
            return held
        return moved

    def _written_after_checkpoint(self) -> bool:
        """Whether the feed holds a document received after the position's checkpoint time (within the partition's
        buckets where it has them; on Cosmos DB in any partition: a query cannot name a physical partition)."""
        if self.held.checkpoint_time is None:
            return True
        feed, buckets = self._worker.partition.feed, self._worker.partition.buckets
        query = {feed.time_field: {"$gt": self.held.checkpoint_time}}
        if buckets is not None:
            query.update(buckets.selector(BUCKET_FIELD))
        db = self._worker.db
        found = with_retries(lambda: db[feed.collection].find_one(query, {"_id": 1}), self._worker.policy)
        return found is not None


class _Backoff:
    """Waits between empty pages that follow a full page of a change stream: Cosmos DB's change stream answers
    empty batches while throttled, so more may be waiting. The wait doubles from THROTTLED_BACKOFF_S's first to
    its last, never past the run's deadline, THROTTLED_RETRIES times at most. Armed by a full page, disarmed by
    a short one or an empty one that moved the position (an idle partition ends its run at once)."""

    def __init__(self, clock: Callable[[], float], sleep: Callable[[float], None], deadline: float) -> None:
        self._clock, self._sleep, self._deadline = clock, sleep, deadline
        self.armed = False
        self._delay = THROTTLED_BACKOFF_S[0]
        self._waited = 0

    @property
    def exhausted(self) -> bool:
        """The pages after the last full one were asked again THROTTLED_RETRIES times, all empty."""
        return self.armed and self._waited >= THROTTLED_RETRIES

    def arm(self, full_page: bool) -> None:
        self.armed, self._delay, self._waited = full_page, THROTTLED_BACKOFF_S[0], 0

    def wait(self) -> bool:
        """Wait before asking again; False when the budget leaves no time to, or the retries are used up."""
        left = self._deadline - self._clock()
        if left <= 0 or self._waited >= THROTTLED_RETRIES:
            return False
        self._sleep(min(self._delay, left))
        self._delay = min(self._delay * 2, THROTTLED_BACKOFF_S[1])
        self._waited += 1
        return True


def _advanced(lease: Lease, page: Page, polled_at: datetime | None) -> Lease:
    """The position after a page: its token, the later of the two checkpoint times, and when the polling run
    that read it began (None for a change stream's page: an empty answer proves nothing on Cosmos DB, where a
    throttled stream answers empty pages, so only the checkpoint time less the overlap is known)."""
    times = [t for t in (lease.checkpoint_time, page.checkpoint_time) if t is not None]
    return replace(lease, token=page.token, checkpoint_time=max(times, default=None), polled_at=polled_at)
