"""Partition layouts over time: when Cosmos DB splits a physical partition or REPORTS_PARTITIONS changes, each new
partition's lease starts from the position of the live leases its range overlaps (its parents), and a replaced
lease is retired once its successors cover its range and have run. The rules, and why they follow Cosmos DB's change
feed processor, are in docs/reports.md (Splits)."""

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pymongo import UpdateOne
from pymongo.database import Database

from shared.feeds.leases import ROLLUPS_FROM, LeaseDocument, lease_documents
from shared.feeds.partitions import Feed, Partition, Shape, Token, bucket_span
from shared.store import cosmos
from shared.store.cosmos import WHOLE_RANGE, ChildStart, FeedRange, overlaps, ranges_overlap, uncovered
from shared.store.partitioning import BucketRange
from shared.store.retries import RetryPolicy, with_retries, write_idempotent
from shared.telemetry.observability import fields

log = logging.getLogger(__name__)


@dataclass
class LeasesMade:
    """What `ensure_leases` made: how many leases, and per way a split child on Cosmos DB starts (`own_entry`,
    `narrowed`, `by_time`: shared/store/cosmos.py `child_token`), how many children took it."""

    count: int = 0
    child_starts: dict[str, int] = field(default_factory=dict)


def ensure_leases(
    db: Database[Any], partitions: Iterable[tuple[Partition, Token | None]], *, now: datetime, policy: RetryPolicy
) -> LeasesMade:
    """Make a lease for every partition that has none, and retire the leases they replaced; what was made.

    A new partition of a feed that has leases starts from its parents' position (`_inherited_position`), so it
    reads what was written since their last checkpoint, never what older, replaced layouts left behind; a feed's
    first partitions start from scratch. Each split child on Cosmos DB logs, and counts, how it starts."""
    wanted = list(partitions)
    made = LeasesMade()
    if not wanted:
        return made
    feeds = sorted({p.feed.key for p, _ in wanted})
    live = with_retries(lambda: list(lease_documents(db).find({"feed": {"$in": feeds}, "retired_at": None})), policy)
    live = _without_earlier_legacy_layouts(db, live, now=now, policy=policy)
    have = {doc["_id"] for doc in live}
    fresh = [(partition, start) for partition, start in wanted if partition.lease_id not in have]
    ops: list[Any] = []
    for partition, start in fresh:
        parents = [doc for doc in live if _overlaps(partition, doc)]
        token, since, how = _inherited_position(partition, parents)
        if how is not None:
            made.child_starts[how] = made.child_starts.get(how, 0) + 1
            _log_child_start(partition, parents, how)
        ops += _made_or_revived(partition.lease_id, _new_lease(partition, start, token, since, now=now))
    if ops:
        write_idempotent(lease_documents(db), ops, policy)
    _retire_replaced(db, [p for p, _ in wanted], live, now=now, policy=policy)
    made.count = len(fresh)
    return made


def _new_lease(
    partition: Partition, start: Token | None, token: Token | None, since: datetime | None, *, now: datetime
) -> LeaseDocument:
    """A new partition's lease document: free, at version 0, from the position it inherited."""
    return {
        "feed": partition.feed.key,
        "kind": partition.kind,
        "range": list(partition.span),
        "partition": partition.index,
        "of": partition.count,
        "start_token": start,
        "token": token,
        "checkpoint_time": since,
        "polled_at": None,
        "owner": None,
        "expires_at": None,
        "version": 0,
        "dispatched_until": None,
        "created_at": now,
        "retired_at": None,
    }


def _made_or_revived(lease_id: str, lease: LeaseDocument) -> list[UpdateOne]:
    """The writes that make a lease, or revive a retired one of the same id: a range that comes back
    (REPORTS_PARTITIONS 4 -> 8 -> 4) starts again from its parents, as a new one would. A revived lease keeps its
    version, so a worker of its earlier life is fenced."""
    revived = {key: value for key, value in lease.items() if key != "version"}
    return [
        UpdateOne({"_id": lease_id, "retired_at": {"$ne": None}}, {"$set": revived}),
        UpdateOne({"_id": lease_id}, {"$setOnInsert": lease}, upsert=True),
    ]


def _inherited_position(
    partition: Partition, parents: list[LeaseDocument]
) -> tuple[dict[str, Any] | None, datetime | None, ChildStart | None]:
    """A new lease's first token and checkpoint time, and how a Cosmos DB child with parents starts (None for any
    other lease). An HOURLY lease: the work its parents' passes left to later ones (ROLLUPS_FROM), from their
    oldest checkpoint. A split
    child on Cosmos DB: the token of the live lease that holds its whole range and got furthest (`_holding_parent`),
    its own entry of it or the token narrowed to its range (`cosmos.child_token`), from that lease's checkpoint
    time. Otherwise (a merge, bucket ranges, no such lease with a usable token) no token, from the oldest
    checkpoint of its parents (`by_time` for a Cosmos DB child)."""
    if partition.feed.shape is Shape.HOURLY:
        return _inherited_rollups(parents), _start_time(parents), None
    if not (partition.cosmos and parents):
        return None, _start_time(parents), None
    parent = _holding_parent(partition, parents)
    token = parent.get("token") if parent is not None else None
    if parent is None or not isinstance(token, Mapping):
        return None, _start_time(parents), "by_time"
    inherited, how = cosmos.child_token(token, partition.span)
    if inherited is None:
        return None, _start_time(parents), "by_time"
    return inherited, parent["checkpoint_time"], how


def _holding_parent(partition: Partition, parents: list[LeaseDocument]) -> LeaseDocument | None:
    """Of a Cosmos DB child's parents, the lease whose range holds the child's whole range, with a token and a
    checkpoint time, that checkpointed last (of two at one time, the narrower): it reads its own range from where
    that lease stopped (a re-read of what its range received since that checkpoint, no more), as Cosmos DB's own
    change feed clients carry a parent's continuation on to its children. Two such leases are live when a child
    splits before it ran (its parent retires only once every child ran): the child's lease holds the parent's
    token narrowed, or, if it ran, its own newer one. Any lease holding the range is a safe start: everything in
    its range before its checkpoint was aggregated. None for a merge (no parent holds the whole range)."""
    if not partition.cosmos:
        return None
    holding: list[tuple[FeedRange, LeaseDocument]] = []
    for doc in parents:
        kind, span = _span_of(doc)
        usable = isinstance(doc.get("token"), Mapping) and isinstance(doc.get("checkpoint_time"), datetime)
        if kind == "cosmos" and span is not None and _within(partition.span, span) and usable:
            holding.append((span, doc))
    if not holding:
        return None
    spans = [span for span, _ in holding]
    _, parent = max(holding, key=lambda held: (held[1]["checkpoint_time"], sum(_within(held[0], s) for s in spans)))
    return parent


def _within(inner: FeedRange, outer: FeedRange) -> bool:
    return outer[0] <= inner[0] and inner[1] <= outer[1]


def _log_child_start(partition: Partition, parents: list[LeaseDocument], how: ChildStart) -> None:
    """One line per new Cosmos DB lease with parents: which way it starts, and from which parents."""
    named = ", ".join(sorted(str(doc["_id"]) for doc in parents))
    extra = fields(feed=partition.feed.key, partition=partition.lease_id, parents=named, start=how)
    if how == "own_entry":
        log.info(
            "reports: %s starts from its own entry of its parent %s's token", partition.lease_id, named, extra=extra
        )
    elif how == "narrowed":
        log.info(
            "reports: %s starts from its parent %s's token narrowed to its range",
            partition.lease_id,
            named,
            extra=extra,
        )
    else:
        log.info(
            "reports: %s recovers by time from its parents' (%s) checkpoint less the overlap: no token of theirs "
            "holds its range, so it polls the whole collection from there",
            partition.lease_id,
            named,
            extra=extra,
        )


def _inherited_rollups(parents: list[LeaseDocument]) -> dict[str, datetime] | None:
    """What a new HOURLY partition takes over of its parents' passes besides their position: the oldest instant
    from which one of them left work to later passes (ROLLUPS_FROM in its token; a first pass, from its lease's
    making). Their hours are done already, so no pass of the new layout finds them changed: without it that work
    would never be done (for the heartbeat tally: the roll-ups of days a pass that fell behind leaves to the next,
    shared/reports/tally.py)."""
    pending = [_rollups_pending(doc) for doc in parents]
    known = [moment for moment in pending if moment is not None]
    return {ROLLUPS_FROM: min(known)} if known else None


def _rollups_pending(doc: LeaseDocument) -> datetime | None:
    token = doc.get("token")
    moment = token.get(ROLLUPS_FROM) if isinstance(token, Mapping) else None
    if moment is None and doc.get("checkpoint_time") is None:
        moment = doc.get("created_at")  # a first pass rolls up the days since its lease was made
    return moment if isinstance(moment, datetime) else None


def _without_earlier_legacy_layouts(
    db: Database[Any], live: list[LeaseDocument], *, now: datetime, policy: RetryPolicy
) -> list[LeaseDocument]:
    """The live leases less those of the earlier layouts the code before ranges left (no `range` stored), which
    are retired now. That code never retired a lease, so every layout it ever ran is live, the earlier ones frozen
    where their layout ended (on Cosmos DB the first one, weeks back), and their ranges are unknown (they overlap
    everything): as parents, they would start each new lease from the feed's oldest checkpoint ever. Of each feed's
    legacy layouts (by kind and `of`), the last one to run stays: it started from all the earlier ones. Kinds count
    as layouts of one feed: on Cosmos DB that code read a feed by bucket ranges whenever GetChangeStreamTokens gave
    no tokens, and a frozen bucket layout kept beside the physical partitions' would be every new lease's parent."""
    layouts: dict[str, dict[tuple[str, Any], list[LeaseDocument]]] = {}
    for doc in live:
        if "range" not in doc:
            layouts.setdefault(doc["feed"], {}).setdefault((_span_of(doc)[0], doc.get("of")), []).append(doc)
    earlier: set[Any] = set()
    for by_count in layouts.values():
        last = max(by_count.values(), key=_last_active)
        earlier |= {doc["_id"] for docs in by_count.values() if docs is not last for doc in docs}
    if earlier:
        _retire(db, sorted(earlier), now=now, policy=policy)
    return [doc for doc in live if doc["_id"] not in earlier]


def _last_active(docs: list[LeaseDocument]) -> datetime:
    """When a layout's leases were last made, claimed, checkpointed or released."""
    times = [
        moment
        for doc in docs
        for moment in (doc.get("created_at"), doc.get("claimed_at"), doc.get("updated_at"), doc.get("released_at"))
    ]
    return max((t for t in times if isinstance(t, datetime)), default=datetime.min.replace(tzinfo=UTC))


def _start_time(parents: list[LeaseDocument]) -> datetime | None:
    """Where a new partition starts: the oldest of its parents' checkpoint times (None: from scratch)."""
    times: list[datetime | None] = [doc.get("checkpoint_time") for doc in parents]
    known = [t for t in times if t is not None]
    return min(known) if known and len(known) == len(times) else None


def _span_of(doc: LeaseDocument) -> tuple[str, FeedRange | None]:
    """A lease document's kind and range (None: unknown, as on leases made before ranges were stored, which
    are then taken to overlap every range)."""
    kind = str(doc.get("kind") or ("cosmos" if ":cosmos:" in str(doc["_id"]) else "buckets"))
    span = doc.get("range")
    if isinstance(span, list) and len(span) == 2:
        return kind, (str(span[0]), str(span[1]))
    index, count = doc.get("partition"), doc.get("of")
    if kind == "buckets" and isinstance(index, int) and isinstance(count, int) and 0 <= index < count:
        return kind, bucket_span(BucketRange(index, count))
    return kind, None


def _overlaps(partition: Partition, doc: LeaseDocument) -> bool:
    """Whether a live lease of the partition's feed reads keys the partition reads (ranges of another kind,
    or unknown, overlap everything)."""
    if doc["feed"] != partition.feed.key or doc["_id"] == partition.lease_id:
        return False
    kind, span = _span_of(doc)
    return kind != partition.kind or span is None or ranges_overlap(span, partition.span)


def _retire_replaced(
    db: Database[Any],
    current: list[Partition],
    live: list[LeaseDocument],
    *,
    now: datetime,
    policy: RetryPolicy,
) -> None:
    """Retire each live lease that no current partition is, once the current partitions overlapping it cover its
    whole range and each has run to the end at least once (checkpointed or released: its own position then covers
    what the parent left). A range no current partition reads (a `GetChangeStreamTokens` reply that left it out)
    keeps its lease: it is all that remembers where that range was."""
    ids = {p.lease_id for p in current}
    by_id = {doc["_id"]: doc for doc in live}
    retiring = []
    for doc in live:
        if doc["_id"] in ids:
            continue
        overlapping = [p for p in current if _overlaps(p, doc)]
        children = [by_id.get(p.lease_id) for p in overlapping]
        ran = all(child is not None and _has_run(child) for child in children)
        if overlapping and ran and _covered(doc, overlapping):
            retiring.append(doc["_id"])
    if retiring:
        _retire(db, retiring, now=now, policy=policy)


def _retire(db: Database[Any], lease_ids: list[str], *, now: datetime, policy: RetryPolicy) -> None:
    """Mark the leases retired: they take part in nothing again, unless their range comes back."""
    retired: LeaseDocument = {"retired_at": now}
    with_retries(
        lambda: lease_documents(db).update_many({"_id": {"$in": lease_ids}, "retired_at": None}, {"$set": retired}),
        policy,
    )


def _covered(doc: LeaseDocument, children: list[Partition]) -> bool:
    """Whether the partitions overlapping a lease read every key it read (a lease of another kind, or of an
    unknown range, read the whole key space)."""
    kind, span = _span_of(doc)
    if span is None or kind != children[0].kind:
        span = WHOLE_RANGE if children[0].cosmos else bucket_span(BucketRange(0, 1))
    return not uncovered(span, [child.span for child in children])


def feed_coverage(partitions: list[Partition]) -> tuple[list[FeedRange], list[FeedRange]]:
    """What a Cosmos DB feed's partitions leave out of the hash space, and what two of them both read: none of
    either in a whole `GetChangeStreamTokens` reply (each physical partition owns one contiguous range)."""
    spans = [p.span for p in partitions]
    return uncovered(WHOLE_RANGE, spans), overlaps(spans)


def leases_over(db: Database[Any], feed: Feed, ranges: list[FeedRange], *, policy: RetryPolicy) -> list[str]:
    """The live Cosmos DB leases of `feed` whose ranges overlap `ranges` (those a reply left out): what no
    partition reads now was last read by them, and their checkpoints show how far behind it falls."""
    live = with_retries(
        lambda: list(lease_documents(db).find({"feed": feed.key, "kind": "cosmos", "retired_at": None})), policy
    )
    return sorted(
        doc["_id"]
        for doc in live
        if (span := _span_of(doc)[1]) is not None and any(ranges_overlap(span, gap) for gap in ranges)
    )


def _has_run(doc: LeaseDocument) -> bool:
    return doc.get("updated_at") is not None or doc.get("released_at") is not None
