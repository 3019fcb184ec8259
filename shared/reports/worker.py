"""A report partition's worker (the queue trigger `aggregate_report_partition`): it claims the partition's lease,
reads and aggregates its changes page by page within a time budget, checkpointing after each page (guarded by the
lease), then releases the lease. A tally partition counts its due hours instead (shared/reports/tally.py), and the
archive's partition sweeps its due receive hours (shared/archive/actions.py). Why a run asks again after empty
pages: docs/reports.md (Change streams on Cosmos DB)."""

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from pymongo.database import Database
from pymongo.errors import OperationFailure, PyMongoError

from shared.archive.actions import run_actions_sweep
from shared.archive.current import get_archive
from shared.archive.heartbeats import HeartbeatArchiver
from shared.archive.storage import ArchiveUnavailable
from shared.instants import format_instant, to_stored
from shared.reports.aggregation import Stamper, refresh_hourly
from shared.reports.leases import Lease, checkpoint, claim, new_owner, release
from shared.reports.partitions import NoPartitionTokens, Partition
from shared.reports.sources import (
    Page,
    PartitionLayoutChanged,
    PollingSource,
    Watch,
    aggregated_before,
    open_source,
)
from shared.reports.tally import rolled_up_before, run_tally
from shared.settings import Settings
from shared.store.partitioning import BUCKET_FIELD
from shared.store.retries import RetryPolicy, StoreUnavailable, is_transient, with_retries

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
        if partition.feed.tally:
            held = worker.tally(held)
        elif partition.feed.archive:
            held = worker.sweep_to_archive(held)
        else:
            held = worker.read_and_aggregate(held, watch)
    except PartitionLayoutChanged as change:
        log.info("reports: %s belongs to an old partition layout (%s); leaving it", partition.lease_id, change)
        worker.run.layout_changed = True
    except (PyMongoError, StoreUnavailable, NoPartitionTokens, ArchiveUnavailable):
        worker.release_quietly(held)
        raise
    if not worker.run.lost_lease:
        release(db, partition, held, now=worker.wall_clock(), policy=worker.release_policy())
    worker.run.checkpoint_time = held.checkpoint_time
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
        self._now, self._clock, self._sleep, self._started = now, clock, sleep, clock()

    def wall_clock(self) -> datetime:
        """The server clock as the run goes on (the trigger read `now` once, at the start)."""
        return self._now + timedelta(seconds=self._clock() - self._started)

    def tally(self, held: Lease) -> Lease:
        """The heartbeat tally's due hours, until done or out of budget; the position reached."""
        assert self.partition.buckets is not None, "the tally's partitions are bucket ranges"
        deadline = self._started + self.settings.reports_time_budget_seconds
        archive = get_archive(self.settings)
        held, tallied = run_tally(
            self.db,
            self.partition.buckets,
            held,
            settings=self.settings,
            policy=self.policy,
            wall_clock=self.wall_clock,
            out_of_time=lambda: self._clock() >= deadline,
            save=lambda lease: self._save(lease, "tally"),
            pause=lambda seconds: self._pause(seconds, deadline),
            archive=None if archive is None else HeartbeatArchiver(archive),
        )
        self.run.pages += tallied.pages
        self.run.changes += tallied.documents
        self.run.hourly_written += tallied.hourly_written
        self.run.daily_written += tallied.daily_written
        self.run.caught_up = tallied.caught_up
        return held

    def sweep_to_archive(self, held: Lease) -> Lease:
        """The receive hours due into the archive, until done or out of budget; the position reached. Without an
        archive (the setting went away since the message was sent) it does nothing."""
        archive = get_archive(self.settings)
        if archive is None:
            return held
        deadline = self._started + self.settings.reports_time_budget_seconds
        held, swept = run_actions_sweep(
            self.db,
            held,
            settings=self.settings,
            archive=archive,
            policy=self.policy,
            wall_clock=self.wall_clock,
            out_of_time=lambda: self._clock() >= deadline,
            save=lambda lease: self._save(lease, "archive"),
            pause=lambda seconds: self._pause(seconds, deadline),
        )
        self.run.pages += swept.pages
        self.run.changes += swept.events
        self.run.caught_up = swept.caught_up
        return held

    def _pause(self, seconds: float, deadline: float) -> bool:
        """Wait `seconds` for a paced tally's next page if the budget leaves time for it; False: it does not."""
        if self._clock() + seconds >= deadline:
            return False
        self._sleep(seconds)
        return True

    def read_and_aggregate(self, held: Lease, watch: Watch | None) -> Lease:
        """Pages until caught up or out of budget; the position reached (saved unless the lease was lost)."""
        deadline = self._started + self.settings.reports_time_budget_seconds
        stamper = Stamper(self._now)
        source, self.run.recovered = open_source(
            self.db, self.partition, held, self.settings, policy=self.policy, watch=watch
        )
        saved, backoff = held, _Backoff(self._clock, self._sleep, deadline)
        polled_at = self.wall_clock() if source.name == PollingSource.name else None  # before its first query
        # The last run stopped after a full page (its budget ran out with more waiting): an empty first page is
        # as likely throttling as the end, unless nothing was written after the checkpoint (asked once).
        backoff.arm(held.behind)
        unchecked = held.behind
        try:
            while self._clock() < deadline:
                try:
                    page = source.next_page()
                except OperationFailure as refused:
                    if is_transient(refused) or self.run.pages or self.run.recovered or held.token is None:
                        raise
                    held = self._position_refused(held, refused)
                    break
                if page is not None:
                    held = _advanced(held, page, polled_at)
                if page is None or not page.changes:
                    # Nothing new: caught up, unless the last page was full (a throttled stream answers empty
                    # pages, its position unmoved). An empty page that moved the position was answered: the
                    # partition is idle, and asking on would spin until the budget is spent (an empty getMore's
                    # token moves with others' writes: MongoDB's postBatchResumeToken). Saved at the end.
                    if page is not None or (unchecked and not self._written_after(held)):
                        held = replace(held, behind=False)
                        backoff.arm(False)
                    unchecked = False
                    if not backoff.armed or not backoff.wait():
                        self.run.caught_up = not backoff.armed
                        break
                    self.run.empty_retries += 1
                    continue
                self._aggregate(page, stamper)
                full = page.token is not None and len(page.changes) >= self.settings.reports_page_size
                backoff.arm(full)
                held, unchecked = replace(held, behind=full), False
                if not self._save(held, source.name):
                    return held
                saved = held
            if backoff.exhausted:
                # Throttled for that long, or idle with a position that stands still: the next run does not wait
                # again on its first empty page (`behind` forgotten), and carries on from the same position.
                held = replace(held, behind=False)
                log.warning(
                    "reports: %s: the change stream answered %d empty pages in a row after a full one, its position "
                    "unmoved (throttled, or nothing new and a position that stands still); the run ends and the "
                    "next run carries on",
                    self.partition.lease_id,
                    self.run.empty_retries,
                )
            elif self.run.empty_retries and not self.run.caught_up:
                log.warning(
                    "reports: %s: the change stream kept answering empty pages after a full one (%d asked again, "
                    "throttled?); the run ends with its budget and the next run carries on",
                    self.partition.lease_id,
                    self.run.empty_retries,
                )
            held = self._polled(held, polled_at)
            if held != saved:
                self._save(held, source.name)
        finally:
            source.close()
        return held

    def _polled(self, held: Lease, polled_at: datetime | None) -> Lease:
        """After a polling run that read its partition to the end (`polled_at`: when it began), the position with
        when it began, if that moves where the next run starts; else the position as it was, so the runs of a
        partition quiet for longer than the overlap save nothing (and read nothing)."""
        if polled_at is None or not self.run.caught_up:
            return held
        moved = replace(held, polled_at=polled_at)
        if aggregated_before(moved, self.settings) == aggregated_before(held, self.settings):
            return held
        return moved

    def _position_refused(self, held: Lease, refused: OperationFailure) -> Lease:
        """The stream accepted the lease's token when it opened, then refused it at its first read (a store may
        check a token only then: a split parent's, or a child's inherited one it does not take): the position
        without the token, so the next run recovers from the checkpoint time instead of failing on it again."""
        log.warning(
            "reports: %s: the change stream refused its saved position at its first read (code %s: %s); the next "
            "run recovers from the checkpoint time %s minus %ds",
            self.partition.lease_id,
            refused.code,
            refused.details.get("errmsg") if refused.details else refused,
            format_instant(held.checkpoint_time) if held.checkpoint_time else "(none: from the start)",
            self.settings.reports_poll_overlap_seconds,
        )
        return replace(held, token=None)

    def _written_after(self, held: Lease) -> bool:
        """Whether the feed holds a document received after the lease's checkpoint time (within the partition's
        buckets where it has them; on Cosmos DB in any partition: a query cannot name a physical partition)."""
        if held.checkpoint_time is None:
            return True
        feed, buckets = self.partition.feed, self.partition.buckets
        query = {feed.time_field: {"$gt": held.checkpoint_time}}
        if buckets is not None:
            query.update(buckets.selector(BUCKET_FIELD))
        found = with_retries(lambda: self.db[feed.collection].find_one(query, {"_id": 1}), self.policy)
        return found is not None

    def _aggregate(self, page: Page, stamper: Stamper) -> None:
        written = self.wall_clock()
        result = refresh_hourly(
            self.db,
            page.changes,
            stamp=stamper.next(to_stored(written)),
            policy=self.policy,
            rolled_up_before=rolled_up_before(written),
        )
        self.run.hourly_written += result.written
        self.run.pages += 1
        self.run.changes += len(page.changes)

    def _save(self, held: Lease, source: str) -> bool:
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
            log.warning("reports: lost the lease of %s to another worker; stopping unsaved", self.partition.lease_id)
            self.run.lost_lease = True
        return saved

    def release_policy(self) -> RetryPolicy:
        """A release has a request's deadline of its own: the run's may be what just ran out."""
        return RetryPolicy.for_request(self.settings)

    def release_quietly(self, held: Lease) -> None:
        try:
            release(self.db, self.partition, held, now=self.wall_clock(), policy=self.release_policy())
        except (PyMongoError, StoreUnavailable) as error:  # the lease then expires on its own
            log.warning("reports: could not release %s: %s", self.partition.lease_id, type(error).__name__)


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
