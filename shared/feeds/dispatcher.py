"""The feeds' dispatcher (the timer `aggregate_reports`): it makes sure every partition of every active consumer's feed
has a lease, and sends a work message for each one that no live worker holds (for an hourly feed, only once an hour
is due; for a trailing one, when its consumer says), as Cosmos DB's change feed processor hands out its leases; it
records each feed's lag. A token reply that
leaves part of a Cosmos DB feed unread, or reads part twice, is logged and counted at every dispatch."""

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from pymongo.database import Database

from shared.feeds.consumers import Consumer
from shared.feeds.layouts import ensure_leases, feed_coverage, leases_over
from shared.feeds.leases import feed_lags, leases_to_dispatch
from shared.feeds.partitions import (
    Feed,
    NoPartitionTokens,
    Partition,
    Shape,
    Token,
    feed_partitions,
)
from shared.feeds.settling import CLOCK_MARGIN, hours_due
from shared.settings import Settings
from shared.store.cosmos import FeedRange, is_cosmos_uri
from shared.store.retries import RetryPolicy
from shared.telemetry import metrics
from shared.telemetry.observability import fields

log = logging.getLogger(__name__)


@dataclass
class DispatchRun:
    """What one dispatch did: for its log line, its metrics and the tests."""

    partitions: int = 0  # of every feed
    leases_created: int = 0
    # Per way a new Cosmos DB lease with parents (a split's child) starts: `own_entry`, `narrowed`, `by_time`.
    child_starts: dict[str, int] = field(default_factory=dict)
    sent: list[str] = field(default_factory=list)  # lease ids a work message went out for
    lag_seconds: dict[str, float] = field(default_factory=dict)  # per feed, its furthest-behind partition


def dispatch(
    db: Database[Any],
    consumers: Sequence[Consumer],
    *,
    now: datetime,
    settings: Settings,
    send: Callable[[list[str]], None],
    on_cosmos: bool | None = None,
) -> DispatchRun:
    """One run of `aggregate_reports`: make sure every partition of the feed of every active consumer has a lease,
    and send a work message (JSON) for each one that no live worker holds. `send` gets them all at once (the queue
    output binding: a message lost with it is sent again by the next dispatch). On Cosmos DB, a feed whose
    `GetChangeStreamTokens` gives no usable tokens is logged as an error and counted
    (pillbottle.reports.unpartitioned), the other feeds are dispatched, and the run then fails."""
    policy = RetryPolicy.for_run(settings, settings.reports_time_budget_seconds)
    cosmos = is_cosmos_uri(settings.mongodb_connection_string) if on_cosmos is None else on_cosmos
    # Physical partitions are a change stream's unit. Polling reads by server time within a bucket range, on any
    # store: a Cosmos DB partition has no bucket range, so each would poll the whole collection (and an account
    # with change streams off has no tokens to name them by).
    by_feed_range = cosmos and settings.change_source != "polling"
    active = [consumer for consumer in consumers if consumer.active]
    found = _partitions_of_every_feed(db, active, settings, by_feed_range=by_feed_range, policy=policy)
    partitions = [p for p, _ in found.partitions]
    run = DispatchRun(partitions=len(partitions))
    made = ensure_leases(db, found.partitions, now=now, policy=policy)
    run.leases_created, run.child_starts = made.count, made.child_starts
    trailing = {
        consumer.feed.key: consumer.trail(db, _of(partitions, consumer.feed), now=now, policy=policy)
        for consumer in active
        if consumer.feed.shape is Shape.TRAILING
    }
    due = _due(
        db,
        partitions,
        now=now,
        settings=settings,
        policy=policy,
        trailing=[p for t in trailing.values() for p in t.due],
    )
    send([_json(p.message()) for p in due])
    run.sent = [p.lease_id for p in due]
    lags = _lags(db, partitions, now=now, settings=settings, policy=policy, also=found.stranded)
    run.lag_seconds = lags | {key: trail.lag.total_seconds() for key, trail in trailing.items()}
    for feed, lag in run.lag_seconds.items():
        metrics.report_lag(feed, lag)
    if found.unpartitioned:  # the other feeds are dispatched; the invocation still fails, for the alerts
        raise found.unpartitioned[0]
    return run


@dataclass
class _Found:
    """Every feed's partitions with their start tokens, the feeds a token reply left unpartitioned, and the
    leases over the ranges a token reply left out (`_check_coverage`)."""

    partitions: list[tuple[Partition, Token | None]] = field(default_factory=list)
    unpartitioned: list[NoPartitionTokens] = field(default_factory=list)
    stranded: list[str] = field(default_factory=list)


def _partitions_of_every_feed(
    db: Database[Any], consumers: Sequence[Consumer], settings: Settings, *, by_feed_range: bool, policy: RetryPolicy
) -> _Found:
    """The partitions of the consumers' feeds; a feed whose token reply partitions nothing is logged and counted,
    and left out."""
    found = _Found()
    for source in (consumer.feed for consumer in consumers):
        try:
            partitions = feed_partitions(
                db, source, count=settings.reports_partitions, on_cosmos=by_feed_range, policy=policy
            )
        except NoPartitionTokens as error:
            log.error("reports: %s is not dispatched: %s", source.key, error, extra=fields(feed=source.key))
            metrics.feed_unpartitioned(source.key)
            found.unpartitioned.append(error)
            continue
        found.partitions += partitions
        if by_feed_range and not source.hourly:
            found.stranded += _check_coverage(db, source, [p for p, _ in partitions], policy)
    return found


def _of(partitions: list[Partition], feed: Feed) -> list[Partition]:
    return [p for p in partitions if p.feed == feed]


def _due(
    db: Database[Any],
    partitions: list[Partition],
    *,
    now: datetime,
    settings: Settings,
    policy: RetryPolicy,
    trailing: list[Partition],
) -> list[Partition]:
    """The partitions to send a work message for, each marked as sent (`leases_to_dispatch`): those of a feed read
    as changes at every dispatch; those of an hourly feed when an hour it has yet to do is due (or its pass is under
    way); those of a trailing feed when its consumer says (`trailing`, of its Trail)."""
    hold = timedelta(seconds=settings.reports_lease_seconds)
    changes = [p for p in partitions if p.feed.shape is Shape.CHANGES]
    hourly = [p for p in partitions if p.feed.shape in (Shape.HOURLY, Shape.HOURLY_WHOLE)]
    due = leases_to_dispatch(db, changes, now=now, hold_for=hold, policy=policy)
    due += leases_to_dispatch(db, hourly, now=now, hold_for=hold, policy=policy, behind=hours_due(now))
    if trailing:
        due += leases_to_dispatch(db, trailing, now=now, hold_for=hold, policy=policy)
    return due


def _lags(
    db: Database[Any],
    partitions: list[Partition],
    *,
    now: datetime,
    settings: Settings,
    policy: RetryPolicy,
    also: list[str],
) -> dict[str, float]:
    """The lag of each feed but the trailing ones (`feed_lags`, with the leases `also` over ranges no partition
    reads)."""
    pacing = timedelta(minutes=settings.reports_tally_spread_minutes) + CLOCK_MARGIN
    own = [p for p in partitions if p.feed.shape is not Shape.TRAILING]
    return feed_lags(db, own, now=now, policy=policy, hours_due=hours_due(now), pacing=pacing, also=also)


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
            extra=fields(feed=feed.key, problem="overlap", ranges=_ranges(shared)),
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
        extra=fields(feed=feed.key, problem="gap", ranges=_ranges(gaps), kept=", ".join(stranded)),
    )
    metrics.feed_ranges_uncovered(feed.key, "gap")
    return stranded


def _ranges(ranges: list[FeedRange]) -> str:
    """Ranges as [min, max), quoted (the lowest bound is '')."""
    return ", ".join(f"[{low!r}, {high!r})" for low, high in ranges)


def _json(message: dict[str, Any]) -> str:
    return json.dumps(message, separators=(",", ":"))
