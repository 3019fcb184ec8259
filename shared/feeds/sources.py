"""Where a report partition's pages of changes come from: a change stream positioned by its lease's resume token;
polling by server time, for stores without change streams; or a recovery that polls from the checkpoint time, then
hands over to a change stream opened before it began. A change stream's page ends only where a server batch ends,
with the resume token after it. Why, rule by rule as Cosmos DB's change streams behave: docs/reports.md (Change
streams on Cosmos DB)."""

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from pymongo.change_stream import ChangeStream
from pymongo.database import Database
from pymongo.errors import OperationFailure

from shared.feeds.leases import Lease
from shared.feeds.partitions import Feed, Partition, Token, cosmos_partitions
from shared.instants import format_instant
from shared.settings import Settings
from shared.store.partitioning import BUCKET_FIELD, BucketRange
from shared.store.retries import RetryPolicy, find_all, is_transient, with_retries
from shared.telemetry.observability import fields

log = logging.getLogger(__name__)

OPERATIONS = {"operationType": {"$in": ["insert", "update", "replace"]}}
PROJECTION = {"$project": {"_id": 1, "fullDocument": 1, "ns": 1, "documentKey": 1}}
# What Cosmos DB for MongoDB requires of a change stream (and any MongoDB accepts).
PIPELINE: list[dict[str, Any]] = [{"$match": OPERATIONS}, PROJECTION]
MAX_AWAIT_MS = 20  # how long an empty getMore waits for changes before the page counts as the last
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Change:
    """One entry of a change feed (or one polled document): where it happened and the document after it."""

    collection: str
    key: Any
    document: Mapping[str, Any] | None


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
    """The partition's source positioned from its lease, and whether it has to recover from a checkpoint time:
    polling where the setting says so; else the change stream resumed from the lease's token; else (no token, or
    one the store rejected) a recovery. `watch` opens a change stream (tests pass a fake that behaves as Cosmos
    DB's)."""
    since = aggregated_before(lease, settings)
    if settings.change_source == "polling":
        return _polling(db, partition, since, settings, policy), False
    watch = watch or (lambda p, token: PyMongoReader(_opener(db, p, settings.reports_page_size), token, policy))
    if lease.token is not None:
        resumed = _resumed(watch, partition, lease, settings)
        if resumed is not None:
            return resumed, False
    elif lease.checkpoint_time is None:
        log.info(
            "reports: %s has no saved position; building from the start of its source",
            partition.lease_id,
            extra=fields(feed=partition.feed.key, partition=partition.lease_id),
        )
    return _recovering(db, partition, lease, since, settings, policy=policy, watch=watch), True


def _polling(
    db: Database[Any], partition: Partition, since: datetime | None, settings: Settings, policy: RetryPolicy
) -> PollingSource:
    page_size = settings.reports_page_size
    return PollingSource(db, partition.feed, partition.buckets, since=since, page_size=page_size, policy=policy)


def _resumed(watch: Watch, partition: Partition, lease: Lease, settings: Settings) -> ChangeStreamSource | None:
    """The change stream resumed from the lease's token; None if the store rejected the token (logged: the
    partition then recovers from its checkpoint time). A transient error propagates."""
    try:
        return ChangeStreamSource(watch(partition, lease.token), partition.feed, settings.reports_page_size)
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
            extra=fields(feed=partition.feed.key, partition=partition.lease_id, code=cause.code),
        )
        return None


def _recovering(
    db: Database[Any],
    partition: Partition,
    lease: Lease,
    since: datetime | None,
    settings: Settings,
    *,
    policy: RetryPolicy,
    watch: Watch,
) -> RecoveringSource:
    """Polling from `since` until caught up, then a change stream opened before the polling began: from the
    lease's first token on a bucket partition, from a fresh token of its feed range on Cosmos DB."""
    start = lease.start_token
    if partition.cosmos:
        # Rejected, a recovery that ran out of budget, or a first run: the stream need only start before the
        # polling, and the lease's first token may be as stale as one rejected, or name a range that has split
        # since (its message was queued before the split). Ask again: a range gone leaves it to its children.
        start = _fresh_start_token(db, partition, policy)
    stream = _new_stream(watch, partition, start, settings.reports_page_size)
    return RecoveringSource(_polling(db, partition, since, settings, policy), stream)


def _new_stream(watch: Watch, partition: Partition, start: Token | None, page_size: int) -> ChangeStreamSource:
    """A change stream from `start`; a store that has none is logged as needing CHANGE_SOURCE=polling."""
    try:
        return ChangeStreamSource(watch(partition, start), partition.feed, page_size)
    except OperationFailure as error:
        if not is_transient(error):
            log.error(
                "reports: %s has no change stream here (%s); a store without change streams (a standalone "
                "mongod, a Cosmos DB account with them off) needs CHANGE_SOURCE=polling",
                partition.lease_id,
                error,
                extra=fields(feed=partition.feed.key, partition=partition.lease_id),
            )
        raise


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
