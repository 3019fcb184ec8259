"""The report feeds' dispatcher (the timer `aggregate_reports`): it makes sure every partition of every feed has a
lease, and sends a work message for each one that no live worker holds (for an hourly feed, only once an hour is
due), as Cosmos DB's change feed processor hands out its leases; it records each feed's lag. A token reply that
leaves part of a Cosmos DB feed unread, or reads part twice, is logged and counted at every dispatch."""

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from pymongo.database import Database

from shared.archive.current import get_archive
from shared.feeds.layouts import ensure_leases, feed_coverage, leases_over
from shared.feeds.leases import feed_lags, leases_to_dispatch
from shared.feeds.partitions import (
    HEARTBEATS_ARCHIVE,
    Feed,
    NoPartitionTokens,
    Partition,
    Token,
    feed_partitions,
    feeds_to_run,
)
from shared.feeds.settling import CLOCK_MARGIN, hours_due
from shared.reports.archiving import behind_the_tally, due_to_catch_up
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
    found = _partitions_of_every_feed(db, settings, by_feed_range=by_feed_range, policy=policy)
    partitions = [p for p, _ in found.partitions]
    run = DispatchRun(partitions=len(partitions))
    made = ensure_leases(db, found.partitions, now=now, policy=policy)
    run.leases_created, run.child_starts = made.count, made.child_starts
    due = _due(db, partitions, now=now, settings=settings, policy=policy)
    send([_json(p.message()) for p in due])
    run.sent = [p.lease_id for p in due]
    run.lag_seconds = _recorded_lags(db, partitions, now=now, settings=settings, policy=policy, also=found.stranded)
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
    db: Database[Any], settings: Settings, *, by_feed_range: bool, policy: RetryPolicy
) -> _Found:
    """The partitions of every feed the app keeps; a feed whose token reply partitions nothing is logged and
    counted, and left out."""
    found = _Found()
    for source in feeds_to_run(archived=get_archive(settings) is not None):
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


def _due(
    db: Database[Any], partitions: list[Partition], *, now: datetime, settings: Settings, policy: RetryPolicy
) -> list[Partition]:
    """The partitions to send a work message for, each marked as sent (`leases_to_dispatch`). A tally partition
    (or the archive's sweep) is sent only when an hour it has yet to do is due (or its pass is under way); a
    partition of the archive's heartbeats only when it is behind its tally partition (a pass the tally could not
    hand it), and while its store is down every few minutes only."""
    hold = timedelta(seconds=settings.reports_lease_seconds)
    feeds = [p for p in partitions if not p.feed.hourly]
    archived = [p for p in partitions if p.feed == HEARTBEATS_ARCHIVE]
    tallies = [p for p in partitions if p.feed.hourly and p.feed != HEARTBEATS_ARCHIVE]
    due = leases_to_dispatch(db, feeds, now=now, hold_for=hold, policy=policy)
    due += leases_to_dispatch(db, tallies, now=now, hold_for=hold, policy=policy, behind=hours_due(now))
    if archived:  # the archive's heartbeats: only where the tally could not hand a pass to it
        late = due_to_catch_up(db, archived, now=now, policy=policy)
        due += leases_to_dispatch(db, late, now=now, hold_for=hold, policy=policy)
    return due


def _recorded_lags(
    db: Database[Any],
    partitions: list[Partition],
    *,
    now: datetime,
    settings: Settings,
    policy: RetryPolicy,
    also: list[str],
) -> dict[str, float]:
    """Each feed's lag (`feed_lags`, with the leases `also` over ranges no partition reads), recorded as a metric."""
    pacing = timedelta(minutes=settings.reports_tally_spread_minutes) + CLOCK_MARGIN
    reports = [p for p in partitions if p.feed != HEARTBEATS_ARCHIVE]
    lags = feed_lags(db, reports, now=now, policy=policy, tally_due=hours_due(now), tally_pacing=pacing, also=also)
    archived = [p for p in partitions if p.feed == HEARTBEATS_ARCHIVE]
    if archived:  # how far the archive's heartbeats are behind the tally's hours (0 while it hands them)
        behind = behind_the_tally(db, archived, now=now, policy=policy).values()
        lags[HEARTBEATS_ARCHIVE.key] = max(behind, default=timedelta(0)).total_seconds()
    for feed, lag in lags.items():
        metrics.report_lag(feed, lag)
    return lags


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
