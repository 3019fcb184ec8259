"""The report consumer: reads three feeds page by page within a time budget, aggregates each page, and only
then saves the feed's position in `leases`.

    bottle_actions, bottle_heartbeats  ->  user_hourly_reports  ->  user_daily_reports (the second hop)

Each feed has a source of pages:
- a change stream (Cosmos DB's required pipeline, `updateLookup`), positioned by the resume token saved
  after the last page; a restart replays at most that page, which aggregation makes harmless;
- or polling by an indexed server-side time (`received_at`; `updated_at` for the hourly reports) from the
  last checkpoint time minus an overlap, for stores without change streams (CHANGE_SOURCE=polling).

A missing, expired or rejected resume token is not fatal: the consumer opens a new stream, catches up by
polling from the feed's last checkpoint time (minus the overlap), then carries on with the new stream.
"""

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from pymongo.change_stream import ChangeStream
from pymongo.database import Database
from pymongo.errors import OperationFailure, PyMongoError

from shared import metrics
from shared.instants import format_instant
from shared.reports.aggregation import Change, Stamper, find_all, refresh_daily, refresh_hourly, user_days_of
from shared.settings import Settings
from shared.store import schema
from shared.store.retries import RetryPolicy, StoreUnavailable, is_transient, with_retries

log = logging.getLogger(__name__)

# What Cosmos DB for MongoDB requires of a change stream (and any MongoDB accepts).
PIPELINE: list[dict[str, Any]] = [
    {"$match": {"operationType": {"$in": ["insert", "update", "replace"]}}},
    {"$project": {"_id": 1, "fullDocument": 1, "ns": 1, "documentKey": 1}},
]
MAX_AWAIT_MS = 20  # how long an empty getMore waits for changes before the feed counts as caught up
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

Token = Mapping[str, Any]


@dataclass(frozen=True)
class Feed:
    lease_id: str
    collection: str
    time_field: str  # the server-side time the polling source reads by (indexed in shared/store/schema.py)
    fields: tuple[str, ...] = ()  # what aggregation reads of a changed document besides its `_id`

    @property
    def projection(self) -> dict[str, int]:
        """What the polling source reads of a document: a change only names what to recompute."""
        return dict.fromkeys((self.time_field, *self.fields), 1)


ACTIONS_FEED = Feed("reports:bottle_actions", schema.BOTTLE_ACTIONS, "received_at", ("bottle_id", "time"))
HEARTBEATS_FEED = Feed("reports:bottle_heartbeats", schema.BOTTLE_HEARTBEATS, "received_at")
HOURLY_FEED = Feed("reports:user_hourly_reports", schema.USER_HOURLY_REPORTS, "updated_at")
FEEDS = (ACTIONS_FEED, HEARTBEATS_FEED, HOURLY_FEED)


# --- leases -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Lease:
    """A feed's saved position: the resume token of its change stream (None while it has none), and the
    time before which everything the feed received has been aggregated (None: nothing yet)."""

    token: Token | None = None
    checkpoint_time: datetime | None = None


def load_lease(db: Database[Any], feed: Feed, policy: RetryPolicy) -> Lease | None:
    found = with_retries(lambda: db[schema.LEASES].find_one({"_id": feed.lease_id}), policy)
    if found is None:
        return None
    return Lease(found.get("token"), found.get("checkpoint_time"))


def aggregated_before(lease: Lease | None, settings: Settings) -> datetime | None:
    """Everything the feed received before this instant has been aggregated: the lease's checkpoint time, less
    the overlap for writes that commit late and for clock skew between instances (None: nothing known)."""
    if lease is None or lease.checkpoint_time is None:
        return None
    return lease.checkpoint_time - timedelta(seconds=settings.reports_poll_overlap_seconds)


def save_lease(db: Database[Any], feed: Feed, lease: Lease, *, source: str, now: datetime, policy: RetryPolicy) -> None:
    update = {"token": lease.token, "checkpoint_time": lease.checkpoint_time, "source": source, "updated_at": now}
    with_retries(lambda: db[schema.LEASES].update_one({"_id": feed.lease_id}, {"$set": update}, upsert=True), policy)


# --- sources ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Page:
    changes: list[Change]
    token: Token | None  # the position after this page (None: the feed has no stream position yet)
    checkpoint_time: datetime | None  # everything received before it has now been read (None: unknown)


class Source(Protocol):
    name: str

    def next_page(self) -> Page | None:
        """The next page of changes, a page without changes that only moves the position, or None."""

    def close(self) -> None: ...


class PollingSource:
    """Pages of documents by ascending server time, from `since` on.

    A page ends on a whole instant (every document of its last instant is in it), so the next page can
    start strictly after it without an `_id` tie-breaker; a document written later with an earlier time is
    found by the next run, which starts the overlap before the checkpoint."""

    name = "polling"

    def __init__(self, db: Database[Any], feed: Feed, since: datetime | None, page_size: int, policy: RetryPolicy):
        self._collection = db[feed.collection]
        self._feed = feed
        self._after: datetime | None = None
        self._since = since or EPOCH
        self._page_size = page_size
        self._policy = policy

    def next_page(self) -> Page | None:
        field = self._feed.time_field
        query = {field: {"$gt": self._after}} if self._after is not None else {field: {"$gte": self._since}}
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
                docs = find_all(self._collection, {field: last}, self._policy, projection)
        self._after = last
        changes = [Change(self._feed.collection, d["_id"], d) for d in docs]
        return Page(changes, token=None, checkpoint_time=last)

    def close(self) -> None:
        pass


class ChangeStreamSource:
    """Pages of a change stream: up to `page_size` changes, and the resume token after them."""

    name = "change_stream"

    def __init__(self, stream: ChangeStream[Any], feed: Feed, page_size: int, now: datetime) -> None:
        self._stream = stream
        self._feed = feed
        self._page_size = page_size
        self._now = now
        self._saved: Token | None = None

    @property
    def token(self) -> Token | None:
        return self._stream.resume_token

    def next_page(self) -> Page | None:
        changes: list[Change] = []
        while len(changes) < self._page_size:
            entry = self._stream.try_next()
            if entry is None:
                break
            changes.append(Change(self._feed.collection, entry["documentKey"]["_id"], entry.get("fullDocument")))
        token = self._stream.resume_token
        if not changes and (token is None or token == self._saved):
            return None
        self._saved = token
        # Caught up: every change committed before this run started has been read.
        caught_up = len(changes) < self._page_size
        return Page(changes, token=token, checkpoint_time=self._now if caught_up else None)

    def close(self) -> None:
        self._stream.close()


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


def open_source(
    db: Database[Any], feed: Feed, lease: Lease | None, settings: Settings, *, now: datetime, policy: RetryPolicy
) -> tuple[Source, bool]:
    """The feed's source positioned from its lease, and whether it has to rebuild from a checkpoint time."""
    since = aggregated_before(lease, settings)
    page_size = settings.reports_page_size
    if settings.change_source == "polling":
        return PollingSource(db, feed, since, page_size, policy), False
    if lease is not None and lease.token is not None:
        try:
            return ChangeStreamSource(_watch(db, feed, lease.token, page_size, policy), feed, page_size, now), False
        except StoreUnavailable as error:
            cause = error.__cause__
            if not isinstance(cause, OperationFailure) or is_transient(cause):
                raise
            log.warning(
                "reports: the resume token of %s was rejected (code %s: %s); rebuilding from its last checkpoint "
                "time %s minus %ds, then continuing on a new change stream",
                feed.collection,
                cause.code,
                cause.details.get("errmsg") if cause.details else cause,
                format_instant(lease.checkpoint_time) if lease.checkpoint_time else "(none: from the start)",
                settings.reports_poll_overlap_seconds,
            )
    elif lease is None:
        log.info("reports: %s has no saved position; building from the start of its source", feed.collection)
    else:
        log.info("reports: %s has no resume token; rebuilding from its last checkpoint time", feed.collection)
    try:
        stream = ChangeStreamSource(_watch(db, feed, None, page_size, policy), feed, page_size, now)
    except StoreUnavailable as error:
        if isinstance(error.__cause__, OperationFailure) and not is_transient(error.__cause__):
            log.error(
                "reports: %s has no change stream here (%s); a store without change streams (a standalone "
                "mongod, a Cosmos DB account with them off) needs CHANGE_SOURCE=polling",
                feed.collection,
                error.__cause__,
            )
        raise
    return RecoveringSource(PollingSource(db, feed, since, page_size, policy), stream), True


def _watch(
    db: Database[Any], feed: Feed, token: Token | None, page_size: int, policy: RetryPolicy
) -> ChangeStream[Any]:
    return with_retries(
        lambda: db[feed.collection].watch(
            PIPELINE,
            full_document="updateLookup",
            resume_after=token,
            batch_size=page_size,
            max_await_time_ms=MAX_AWAIT_MS,
        ),
        policy,
    )


# --- the consumer -------------------------------------------------------------------------------------------


@dataclass
class RunSummary:
    pages: int = 0
    changes: int = 0
    hourly_written: int = 0
    daily_written: int = 0
    caught_up: bool = False
    recovered: list[str] = field(default_factory=list)  # feeds rebuilt from a checkpoint time
    failed: list[str] = field(default_factory=list)  # feeds stopped by a database error (retried next run)


class FeedsFailed(Exception):
    """Raised by `aggregate_reports` after a run in which some feeds stopped on a database error (the others'
    progress is saved): the host then counts the invocation as failed."""

    def __init__(self, failed: list[str]) -> None:
        super().__init__(f"report feeds stopped by a database error, retried next run: {', '.join(failed)}")
        self.failed = failed


@dataclass
class _OpenFeed:
    feed: Feed
    source: Source
    saved: Lease  # as the lease stands in `leases`
    position: Lease  # where the feed has got to (saved after each page of changes, otherwise at the end)
    aggregated_before: datetime | None  # as of the start of the run

    def save(self, db: Database[Any], *, now: datetime, policy: RetryPolicy) -> None:
        if self.position != self.saved:
            save_lease(db, self.feed, self.position, source=self.source.name, now=now, policy=policy)
            self.saved = self.position


def run_consumer(
    db: Database[Any], settings: Settings, *, now: datetime, clock: Callable[[], float] = time.monotonic
) -> RunSummary:
    """One run of `aggregate_reports`: rounds of a page per feed until a round finds nothing, or until the
    time budget is spent (checked between rounds, so it can be overrun by one round, and the daily hop is
    never starved by a backlog upstream). A feed that fails stops for this run; its lease still holds its
    last page.

    At the end, each feed's lag (`now` minus its saved checkpoint time) is recorded (shared/metrics.py), a
    failed feed's too: its lag grows while it keeps failing."""
    policy = RetryPolicy.for_run(settings, settings.reports_time_budget_seconds)
    deadline = clock() + settings.reports_time_budget_seconds
    stamper = Stamper(now)
    summary = RunSummary()
    feeds: list[_OpenFeed] = []
    loaded: dict[str, Lease] = {}  # each feed's lease as the run found it, where it could be read
    try:
        for feed in FEEDS:
            try:
                lease = load_lease(db, feed, policy)
                loaded[feed.collection] = lease or Lease()
                source, recovering = open_source(db, feed, lease, settings, now=now, policy=policy)
            except (PyMongoError, StoreUnavailable) as error:
                _stopped(feed, error, summary)
                continue
            feeds.append(
                _OpenFeed(feed, source, lease or Lease(), lease or Lease(), aggregated_before(lease, settings))
            )
            if recovering:
                summary.recovered.append(feed.collection)
        opened = list(feeds)  # `feeds` loses those that fail
        while feeds and clock() < deadline:
            progressed = False
            for open_feed in list(feeds):  # one page each, so no feed waits for another's backlog
                try:
                    progressed |= _take_page(db, open_feed, stamper=stamper, policy=policy, now=now, summary=summary)
                except (PyMongoError, StoreUnavailable) as error:
                    _stopped(open_feed.feed, error, summary)
                    open_feed.source.close()
                    feeds.remove(open_feed)
            if not progressed:
                summary.caught_up = not summary.failed
                break
        for open_feed in feeds:
            try:
                open_feed.save(db, now=now, policy=policy)
            except (PyMongoError, StoreUnavailable) as error:
                _stopped(open_feed.feed, error, summary)
    finally:
        for open_feed in feeds:
            open_feed.source.close()
    _record_lag(now, loaded | {open_feed.feed.collection: open_feed.saved for open_feed in opened})
    return summary


def _record_lag(now: datetime, saved: Mapping[str, Lease]) -> None:
    """Each feed's lag behind `now`, by its lease as saved (a feed without a checkpoint yet has none)."""
    for collection, lease in saved.items():
        if lease.checkpoint_time is not None:
            metrics.report_lag(collection, (now - lease.checkpoint_time).total_seconds())


def _take_page(
    db: Database[Any],
    open_feed: _OpenFeed,
    *,
    stamper: Stamper,
    policy: RetryPolicy,
    now: datetime,
    summary: RunSummary,
) -> bool:
    """Aggregate the feed's next page, then checkpoint it. True if the page had changes."""
    page = open_feed.source.next_page()
    if page is None:
        return False
    if page.changes:
        if open_feed.feed is HOURLY_FEED:
            summary.daily_written += refresh_daily(db, user_days_of(page.changes), policy)
        else:
            summary.hourly_written += refresh_hourly(
                db, page.changes, stamp=stamper.next(), policy=policy, changed_since=open_feed.aggregated_before
            ).written
        summary.pages += 1
        summary.changes += len(page.changes)
    old = open_feed.position
    checkpoint = max((t for t in (old.checkpoint_time, page.checkpoint_time) if t is not None), default=None)
    open_feed.position = Lease(page.token, checkpoint)
    if page.changes:  # a position without changes (an idle stream's token) is saved once, at the end of the run
        open_feed.save(db, now=now, policy=policy)
    return bool(page.changes)


def _stopped(feed: Feed, error: Exception, summary: RunSummary) -> None:
    log.warning("reports: %s stopped for this run: %s: %s", feed.collection, type(error).__name__, error)
    summary.failed.append(feed.collection)
