"""A feed read as changes (Shape.CHANGES): a consumer's run reads its partition's pages of changes from a source
(shared/feeds/sources.py) and applies each (`ChangesConsumer.apply`), saving the position after it, until caught up
or out of budget. Why a run asks again after empty pages: docs/reports.md (Change streams on Cosmos DB)."""

import logging
from abc import abstractmethod
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime

from pymongo.errors import OperationFailure

from shared.feeds.consumers import Consumer, Work
from shared.feeds.leases import Lease
from shared.feeds.sources import (
    Change,
    Page,
    PollingSource,
    Source,
    Watch,
    aggregated_before,
    open_source,
)
from shared.instants import format_instant
from shared.store.partitioning import BUCKET_FIELD
from shared.store.retries import is_transient, with_retries

log = logging.getLogger(__name__)

# Back-off between empty pages after a full one (a throttled stream): doubles from the first to the last.
THROTTLED_BACKOFF_S = (0.1, 2.0)
# At most this many empty pages with the position unmoved are asked again after a full one (about 9 s of waits):
# throttling, or a partition with nothing new whose position stands still; past it the run ends.
THROTTLED_RETRIES = 8


class ChangesConsumer(Consumer):
    """A consumer of a feed's changes: the machinery reads them, page by page, and hands each page to `apply`."""

    def __init__(self, watch: Watch | None = None) -> None:
        self._watch = watch  # how change streams are opened (None: the database's own; tests give a faithful fake)

    @abstractmethod
    def apply(self, work: Work, changes: list[Change]) -> None:
        """Apply one page of changes (replay-safe: a page may be applied again after a lost checkpoint); what it
        wrote goes into `work.run`."""

    def run(self, work: Work, held: Lease) -> Lease:
        """Pages until caught up or out of budget; the position reached (saved unless the lease was lost)."""
        source, work.run.recovered = open_source(
            work.db, work.partition, held, work.settings, policy=work.policy, watch=self._watch
        )
        reading = _Reading(work, self, source, held)
        try:
            if reading.read_pages():
                reading.finish()
        finally:
            source.close()
        return reading.held


class _Reading:
    """A run's pages from one source: each page with changes is applied (ChangesConsumer.apply) and its position
    saved; an empty page ends the run unless it may be throttling (after a full page), which is asked again with
    back-off."""

    def __init__(self, worker: Work, consumer: "ChangesConsumer", source: Source, held: Lease) -> None:
        self._worker, self._consumer, self._run, self._source = worker, consumer, worker.run, source
        self.held = self._saved = held  # the position reached, and the last one saved
        # The last run stopped after a full page (its budget ran out with more waiting): an empty first page is
        # as likely throttling as the end, unless nothing was written after the checkpoint (asked once).
        self._backoff = _Backoff(worker.time_left, worker.sleep, armed=held.behind)
        self._unchecked = held.behind
        # When a polling run began, before its first query (None for a change stream): see `_polled`.
        self._polled_at = worker.wall_clock() if source.name == PollingSource.name else None

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
        self._consumer.apply(self._worker, page.changes)
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

    def __init__(self, time_left: Callable[[], float], sleep: Callable[[float], None], *, armed: bool) -> None:
        self._time_left, self._sleep = time_left, sleep
        self.arm(armed)

    @property
    def exhausted(self) -> bool:
        """The pages after the last full one were asked again THROTTLED_RETRIES times, all empty."""
        return self.armed and self._waited >= THROTTLED_RETRIES

    def arm(self, full_page: bool) -> None:
        self.armed: bool = full_page
        self._delay: float = THROTTLED_BACKOFF_S[0]
        self._waited: int = 0

    def wait(self) -> bool:
        """Wait before asking again; False when the budget leaves no time to, or the retries are used up."""
        left = self._time_left()
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
