"""The report feeds as a partitioned change-feed processor, after Cosmos DB's own: a timer dispatcher sends one
work message per feed partition that no live worker holds, and a queue-triggered worker claims the partition's
lease, reads its changes page by page within a time budget, aggregates each page, and only then checkpoints.

    bottle_actions                            ->  user_hourly_reports (within a run)
    bottle_heartbeats (the tally, hourly)     ->  user_hourly_reports, user_daily_reports

The heartbeat documents are not read as a change feed: the tally (shared/reports/tally.py) sweeps them once an
hour, by user, through the same dispatcher, queue, workers and leases.

A partition's source of pages:
- a change stream (Cosmos DB's required pipeline, `updateLookup`; on other stores narrowed to the partition's
  buckets by `$match`), positioned by the resume token saved after the last page;
- or polling by an indexed server-side time (`received_at`) from the last checkpoint time minus an overlap,
  for stores without change streams (CHANGE_SOURCE=polling); a partition quiet for longer than the overlap
  reads from its checkpoint time (`aggregated_before`).

Cosmos DB's change streams, as its documentation describes them, and what this module does about each:
- a resume token belongs to a server batch: every document of a batch carries the same token, which points
  after the batch. A page therefore ends only where a server batch ends, and only then is it checkpointed;
  stopping inside a batch would skip the rest of it for good;
- a throttled stream answers with empty batches, so an empty or short page is no proof of being caught up:
  a checkpoint time is the newest server time among the documents read, never the clock's (actions are only
  ever inserted, so a change's document is the one the change wrote). And a run does not end at an empty page
  that follows a full one (more was waiting a moment ago): it asks again with back-off until the time budget is
  spent (`_Worker.read_and_aggregate`). The lease keeps whether its last page was full (`behind`), so a run whose
  first page is empty after a run that stopped mid-backlog asks again too, unless the feed holds nothing received
  after its checkpoint (one query). An empty page after a short one is an idle partition: the run ends;
- no deletes, no `operationType` in the output, order only within a shard key: aggregation recomputes
  buckets from source, so order and repeats do not matter;
- a rejected resume token (expired, or its partition split): the partition polls from its checkpoint time
  minus the overlap, then carries on with a new change stream opened before the polling began. A token the
  stream takes when it opens but refuses at its first read is dropped, and the next run recovers so;
- a split's child starts from its own entry of its parent's token (a token holding one continuation per child),
  or from the token narrowed to its own feed range (shared/reports/leases.py), so it re-reads only what its range
  received since the parent's last checkpoint; each child logs which, and the dispatch counts them;
- a getMore goes through the one retry loop like every store call (`PyMongoReader`).
"""

import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from pymongo.change_stream import ChangeStream
from pymongo.database import Database
from pymongo.errors import OperationFailure, PyMongoError

from shared import metrics
from shared.archive.actions import run_actions_sweep
from shared.archive.current import get_archive
from shared.archive.heartbeats import HeartbeatArchiver
from shared.archive.storage import ArchiveUnavailable
from shared.instants import format_instant, to_stored
from shared.reports.aggregation import Change, Stamper, find_all, refresh_hourly
from shared.reports.layouts import ensure_leases, feed_coverage, leases_over
from shared.reports.leases import Lease, checkpoint, claim, feed_lags, leases_to_dispatch, new_owner, release
from shared.reports.partitions import (
    Feed,
    NoPartitionTokens,
    Partition,
    Token,
    cosmos_partitions,
    feed_partitions,
    feeds_to_run,
)
from shared.reports.tally import CLOCK_MARGIN, hours_due, rolled_up_before, run_tally
from shared.settings import Settings
from shared.store.cosmos import FeedRange, is_cosmos_uri
from shared.store.partitioning import BUCKET_FIELD, BucketRange
from shared.store.retries import RetryPolicy, StoreUnavailable, is_transient, with_retries

log = logging.getLogger(__name__)

OPERATIONS = {"operationType": {"$in": ["insert", "update", "replace"]}}
PROJECTION = {"$project": {"_id": 1, "fullDocument": 1, "ns": 1, "documentKey": 1}}
# What Cosmos DB for MongoDB requires of a change stream (and any MongoDB accepts).
PIPELINE: list[dict[str, Any]] = [{"$match": OPERATIONS}, PROJECTION]
MAX_AWAIT_MS = 20  # how long an empty getMore waits for changes before the page counts as the last
# Back-off between empty pages after a full one (a throttled stream): doubles from the first to the last.
THROTTLED_BACKOFF_S = (0.1, 2.0)
# At most this many empty pages with the position unmoved are asked again after a full one (about 9 s of waits):
# throttling, or a partition with nothing new whose position stands still; past it the run ends.
THROTTLED_RETRIES = 8
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def partition_pipeline(buckets: BucketRange | None) -> list[dict[str, Any]]:
    """The required pipeline, narrowed to a bucket range where the store has no physical partitions to read."""
    if buckets is None:
        return PIPELINE
    return [{"$match": {**OPERATIONS, **buckets.selector(f"fullDocument.{BUCKET_FIELD}")}}, PROJECTION]


def aggregated_before(lease: Lease | None, settings: Settings) -> datetime | None:
    """Everything the partition received up to this instant has been aggregated (None: nothing known): the
    lease's checkpoint time less the overlap, for writes that commit late and for clock skew between instances;
    or, after a polling run, the earlier of the checkpoint time and when that run began less the overlap.

    A write the polling run's queries did not see had yet to commit when the run began, so its stamp is later
    than that less the overlap (which bounds both how long a write commits after its stamp and the instances'
    skew): a partition quiet for longer than the overlap reads nothing again, rather than its last overlap's
    worth at every run for as long as it stays quiet. Only polling proves it: an empty change stream page proves
    nothing on Cosmos DB (a throttled stream answers empty pages)."""
    if lease is None or lease.checkpoint_time is None:
        return None
    overlap = timedelta(seconds=settings.reports_poll_overlap_seconds)
    before = lease.checkpoint_time - overlap
    if lease.polled_at is not None:
        before = max(before, min(lease.checkpoint_time, lease.polled_at - overlap))
    return before


# --- sources ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Page:
    changes: list[Change]
    token: Token | None  # the position after this page (None: the source has no stream position)
    checkpoint_time: datetime | None  # the newest server time among the documents read (None: none known)


class Source(Protocol):
    name: str

    def next_page(self) -> Page | None:
        """The next page of changes, a page without changes that only moves the position, or None."""

    def close(self) -> None: ...


def _newest(documents: list[Mapping[str, Any] | None], time_field: str) -> datetime | None:
    times = [d[time_field] for d in documents if d is not None and d.get(time_field) is not None]
    return max(times, default=None)


class PollingSource:
    """Pages of documents by ascending server time, from `since` on, within the partition's buckets.

    A page ends on a whole instant (every document of its last instant is in it), so the next page can
    start strictly after it without an `_id` tie-breaker; a document written later with an earlier time is
    found by the next run, which starts the overlap before the checkpoint."""

    name = "polling"

    def __init__(
        self,
        db: Database[Any],
        feed: Feed,
        buckets: BucketRange | None,
        *,
        since: datetime | None,
        page_size: int,
        policy: RetryPolicy,
    ) -> None:
        self._collection = db[feed.collection]
        self._feed = feed
        self._within = buckets.selector(BUCKET_FIELD) if buckets is not None else {}
        # Everything received up to `since` has been aggregated (whole instants): read strictly after it.
        self._after: datetime | None = since
        self._page_size = page_size
        self._policy = policy

    def next_page(self) -> Page | None:
        field = self._feed.time_field
        after = {field: {"$gt": self._after}} if self._after is not None else {field: {"$gte": EPOCH}}
        query = {**after, **self._within}
        projection = self._feed.projection
        docs = with_retries(
            lambda: list(self._collection.find(query, projection).sort(field, 1).limit(self._page_size)), self._policy
        )
        if not docs:
            return None
        last = docs[-1][field]
        if len(docs) == self._page_size:
            whole = [d for d in docs if d[field] != last]
            if whole:
                docs, last = whole, whole[-1][field]
            else:  # the page is one instant: take all of it
                docs = find_all(self._collection, {field: last, **self._within}, self._policy, projection)
        self._after = last
        changes = [Change(self._feed.collection, d["_id"], d) for d in docs]
        return Page(changes, token=None, checkpoint_time=last)

    def close(self) -> None:
        pass


class ChangeReader(Protocol):
    """A change stream as the source reads it: one change at a time, the token after what was read, and
    whether the server batch the last change came from is used up (the only place a token may be saved)."""

    @property
    def resume_token(self) -> Token | None: ...

    def next_change(self) -> Mapping[str, Any] | None: ...

    def at_batch_end(self) -> bool: ...

    def close(self) -> None: ...


class PyMongoReader:
    """pymongo's ChangeStream as a ChangeReader, every getMore through the one retry loop (`with_retries`).

    pymongo closes a stream on an error it does not resume by itself (throttling, 16500, among them), so a retry
    opens it again from the resume token it had reached: a getMore is only sent once the batch before it is used
    up, so that token is the one after a whole server batch (on Cosmos DB, the only kind there is)."""

    def __init__(
        self, open_stream: Callable[[Token | None], ChangeStream[Any]], token: Token | None, policy: RetryPolicy
    ):
        self._open, self._policy, self._started_at = open_stream, policy, token
        self._stream = with_retries(lambda: open_stream(token), policy)

    @property
    def resume_token(self) -> Token | None:
        return self._stream.resume_token

    def next_change(self) -> Mapping[str, Any] | None:
        return with_retries(self._try_next, self._policy)

    def _try_next(self) -> Mapping[str, Any] | None:
        if not self._stream.alive:
            reached = self._stream.resume_token
            self._stream = self._open(reached if reached is not None else self._started_at)
        return self._stream.try_next()

    def at_batch_end(self) -> bool:
        # pymongo keeps the rest of the server's batch in its cursor; it asks the same private method to
        # decide when a batch's postBatchResumeToken applies.
        cursor = getattr(self._stream, "_cursor", None)
        return cursor is None or not cursor._has_next()

    def close(self) -> None:
        self._stream.close()


class ChangeStreamSource:
    """Pages of a change stream: at least `page_size` changes (or all there were), ending where a server batch
    ends, with the resume token after them."""

    name = "change_stream"

    def __init__(self, reader: ChangeReader, feed: Feed, page_size: int) -> None:
        self._reader = reader
        self._feed = feed
        self._page_size = page_size
        self._saved: Token | None = reader.resume_token

    @property
    def token(self) -> Token | None:
        return self._reader.resume_token

    def next_page(self) -> Page | None:
        changes: list[Change] = []
        dated: list[Mapping[str, Any] | None] = []
        while True:
            entry = self._reader.next_change()
            if entry is None:  # the server had nothing more for now: its batch ended
                break
            changes.append(Change(self._feed.collection, entry["documentKey"]["_id"], entry.get("fullDocument")))
            dated.append(entry.get("fullDocument"))
            if len(changes) >= self._page_size and self._reader.at_batch_end():
                break
        token = self._reader.resume_token
        if not changes and (token is None or token == self._saved):
            return None
        self._saved = token
        newest = _newest(dated, self._feed.time_field)
        return Page(changes, token=token, checkpoint_time=newest)

    def close(self) -> None:
        self._reader.close()


class RecoveringSource:
    """No usable resume token: poll from the checkpoint time until caught up, then hand over to a change
    stream opened before the polling began (so nothing falls between them; what both see is read twice).

    While it polls, the pages carry no token, so a run stopped midway recovers again next time."""

    name = "change_stream"

    def __init__(self, polling: PollingSource, stream: ChangeStreamSource) -> None:
        self._polling: PollingSource | None = polling
        self._stream = stream
        self._start = stream.token

    def next_page(self) -> Page | None:
        if self._polling is None:
            return self._stream.next_page()
        page = self._polling.next_page()
        if page is not None:
            return page
        self._polling = None
        handover = self._stream.next_page()
        return handover if handover is not None else Page([], token=self._start, checkpoint_time=None)

    def close(self) -> None:
        self._stream.close()


Watch = Callable[[Partition, Token | None], ChangeReader]


def open_source(
    db: Database[Any],
    partition: Partition,
    lease: Lease,
    settings: Settings,
    *,
    policy: RetryPolicy,
    watch: Watch | None = None,
) -> tuple[Source, bool]:
    """The partition's source positioned from its lease, and whether it has to recover from a checkpoint time.
    `watch` opens a change stream (tests pass a fake that behaves as Cosmos DB's)."""
    feed, page_size = partition.feed, settings.reports_page_size
    since = aggregated_before(lease, settings)
    if settings.change_source == "polling":
        return PollingSource(db, feed, partition.buckets, since=since, page_size=page_size, policy=policy), False
    watch = watch or (lambda p, token: PyMongoReader(_opener(db, p, page_size), token, policy))
    if lease.token is not None:
        try:
            return ChangeStreamSource(watch(partition, lease.token), feed, page_size), False
        except OperationFailure as cause:  # with_retries raises what is not transient as it is
            if is_transient(cause):
                raise
            log.warning(
                "reports: the resume token of %s was rejected (code %s: %s); recovering from its checkpoint time "
                "%s minus %ds, then continuing on a new change stream",
                partition.lease_id,
                cause.code,
                cause.details.get("errmsg") if cause.details else cause,
                format_instant(lease.checkpoint_time) if lease.checkpoint_time else "(none: from the start)",
                settings.reports_poll_overlap_seconds,
            )
    elif lease.checkpoint_time is None:
        log.info("reports: %s has no saved position; building from the start of its source", partition.lease_id)
    start = lease.start_token
    if partition.cosmos:
        # Rejected, a recovery that ran out of budget, or a first run: the stream need only start before the
        # polling, and the lease's first token may be as stale as one rejected, or name a range that has split
        # since (its message was queued before the split). Ask again: a range gone leaves it to its children.
        start = _fresh_start_token(db, partition, policy)
    try:
        stream = ChangeStreamSource(watch(partition, start), feed, page_size)
    except OperationFailure as error:
        if not is_transient(error):
            log.error(
                "reports: %s has no change stream here (%s); a store without change streams (a standalone "
                "mongod, a Cosmos DB account with them off) needs CHANGE_SOURCE=polling",
                partition.lease_id,
                error,
            )
        raise
    polling = PollingSource(db, feed, partition.buckets, since=since, page_size=page_size, policy=policy)
    return RecoveringSource(polling, stream), True


class PartitionLayoutChanged(Exception):
    """Cosmos DB no longer has this lease's physical partition (it split): the lease belongs to the old layout.
    The dispatcher makes the children's leases, which start from their parents' positions."""


def _fresh_start_token(db: Database[Any], partition: Partition, policy: RetryPolicy) -> Token | None:
    """The present token of the partition's own feed range (the reply's order means nothing)."""
    for current, token in cosmos_partitions(db, partition.feed, policy):
        if current.feed_range == partition.feed_range:
            return token
    raise PartitionLayoutChanged(f"{partition.feed.collection} has no physical partition {partition.feed_range} now")


def _opener(db: Database[Any], partition: Partition, page_size: int) -> Callable[[Token | None], ChangeStream[Any]]:
    """How the partition's change stream is opened from a token (the caller retries it)."""
    return lambda token: db[partition.feed.collection].watch(
        partition_pipeline(partition.buckets),
        full_document="updateLookup",
        resume_after=token,
        batch_size=page_size,
        max_await_time_ms=MAX_AWAIT_MS,
    )


# --- the dispatcher -----------------------------------------------------------------------------------------


@dataclass
class DispatchRun:
    partitions: int = 0  # of every feed
    leases_created: int = 0
    # Per way a new Cosmos DB lease with parents (a split's child) starts: `own_entry`, `narrowed`, `by_time`.
    child_starts: dict[str, int] = field(default_factory=dict)
    sent: list[str] = field(default_factory=list)  # lease ids a work message went out for
    lag_seconds: dict[str, float] = field(default_factory=dict)  # per feed, its furthest-behind partition


def dispatch(
    db: Database[Any],
    *,
    now: datetime,
    settings: Settings,
    send: Callable[[list[str]], None],
    on_cosmos: bool | None = None,
) -> DispatchRun:
    """One run of `aggregate_reports`: make sure every partition of every feed has a lease, and send a work
    message (JSON) for each one that no live worker holds. `send` gets them all at once (the queue output
    binding: a message lost with it is sent again by the next dispatch). On Cosmos DB, a feed whose
    `GetChangeStreamTokens` gives no usable tokens is logged as an error and counted
    (pillbottle.reports.unpartitioned), the other feeds are dispatched, and the run then fails."""
    policy = RetryPolicy.for_run(settings, settings.reports_time_budget_seconds)
    cosmos = is_cosmos_uri(settings.mongodb_connection_string) if on_cosmos is None else on_cosmos
    # Physical partitions are a change stream's unit. Polling reads by server time within a bucket range, on any
    # store: a Cosmos DB partition has no bucket range, so each would poll the whole collection (and an account
    # with change streams off has no tokens to name them by).
    by_feed_range = cosmos and settings.change_source != "polling"
    partitions: list[tuple[Partition, Token | None]] = []
    unpartitioned: list[NoPartitionTokens] = []
    stranded: list[str] = []
    for source in feeds_to_run(archived=get_archive(settings) is not None):
        try:
            found = feed_partitions(
                db, source, count=settings.reports_partitions, on_cosmos=by_feed_range, policy=policy
            )
        except NoPartitionTokens as error:
            log.error("reports: %s is not dispatched: %s", source.key, error)
            metrics.feed_unpartitioned(source.key)
            unpartitioned.append(error)
            continue
        partitions += found
        if by_feed_range and not source.hourly:
            stranded += _check_coverage(db, source, [p for p, _ in found], policy)
    run = DispatchRun(partitions=len(partitions))
    made = ensure_leases(db, partitions, now=now, policy=policy)
    run.leases_created, run.child_starts = made.count, made.child_starts
    hold = timedelta(seconds=settings.reports_lease_seconds)
    feeds = [p for p, _ in partitions if not p.feed.hourly]
    tallies = [p for p, _ in partitions if p.feed.hourly]
    # A tally partition (or the archive's sweep) is sent only when an hour it has yet to do is due (or its pass is
    # under way).
    due = leases_to_dispatch(db, feeds, now=now, hold_for=hold, policy=policy)
    due += leases_to_dispatch(db, tallies, now=now, hold_for=hold, policy=policy, behind=hours_due(now))
    send([_json(p.message()) for p in due])
    run.sent = [p.lease_id for p in due]
    pacing = timedelta(minutes=settings.reports_tally_spread_minutes) + CLOCK_MARGIN
    run.lag_seconds = feed_lags(
        db,
        [p for p, _ in partitions],
        now=now,
        policy=policy,
        tally_due=hours_due(now),
        tally_pacing=pacing,
        also=stranded,
    )
    for feed, lag in run.lag_seconds.items():
        metrics.report_lag(feed, lag)
    if unpartitioned:  # the other feeds are dispatched; the invocation still fails, for the alerts
        raise unpartitioned[0]
    return run


def _check_coverage(db: Database[Any], feed: Feed, partitions: list[Partition], policy: RetryPolicy) -> list[str]:
    """Log and count a token reply whose ranges leave part of the hash space out (no lease reads it: its documents
    never reach the reports) or name a part twice (read twice); the live leases over the part left out, which stay
    (not retired) and whose lag the dispatch reports."""
    gaps, shared = feed_coverage(partitions)
    if shared:
        log.error(
            "reports: GetChangeStreamTokens gave %s tokens whose feed ranges overlap at %s; those keys are read twice",
            feed.collection,
            _ranges(shared),
        )
        metrics.feed_ranges_uncovered(feed.key, "overlap")
    if not gaps:
        return []
    stranded = leases_over(db, feed, gaps, policy=policy)
    log.error(
        "reports: GetChangeStreamTokens gave %s no token for the feed ranges %s: nothing reads them until a reply "
        "covers them; their leases (%s) are kept, and count in the feed's lag",
        feed.collection,
        _ranges(gaps),
        ", ".join(stranded) or "none yet",
    )
    metrics.feed_ranges_uncovered(feed.key, "gap")
    return stranded


def _ranges(ranges: list[FeedRange]) -> str:
    """Ranges as [min, max), quoted (the lowest bound is '')."""
    return ", ".join(f"[{low!r}, {high!r})" for low, high in ranges)


def _json(message: dict[str, Any]) -> str:
    return json.dumps(message, separators=(",", ":"))


# --- the worker ---------------------------------------------------------------------------------------------


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
