"""Feed partitions and their leases (`leases`, one document per partition), as Cosmos DB's change feed processor
keeps them: a partition is read by one worker at a time, the one holding its lease.

A lease holds the partition's position (the resume token of its change stream, and the checkpoint time before
which everything it received has been aggregated) and its ownership: `owner`, `expires_at` and `version`.
Claiming a free or expired lease bumps `version`; every checkpoint, renewal and release is guarded by the
owner and version it claimed, so a worker whose lease expired and was taken over cannot write a position
(the fencing token). What it aggregated meanwhile is harmless: aggregation is replay-safe.

Partitions: on Cosmos DB, one per physical partition of the feed's collection (`GetChangeStreamTokens`), keyed
by the feed range its token carries (the reply promises one token per physical partition, not an order); on
any other MongoDB, REPORTS_PARTITIONS ranges of the hash bucket of the shard key that the feed's documents
carry (`bucket`, shared/store/partitioning.py). The heartbeat tally (shared/reports/tally.py) is not a change
feed but a sweep: REPORTS_PARTITIONS ranges of the bucket of the owner's `user_id` on every store, each with a
lease of the same kind, whose checkpoint time is the end of the closed hours it has counted.

Layouts change: Cosmos DB splits a physical partition as its collection grows, and REPORTS_PARTITIONS can be
changed. As Cosmos DB's change feed processor does, a new partition starts from the position of the partitions
it replaces (its parents: the live leases whose ranges overlap its own; a split's child on Cosmos DB also takes
the token of the parent that holds its whole range and got furthest: its own entry of that token, or the token
narrowed to its range), and a replaced lease is retired once the leases overlapping it cover its range and have
checkpointed; retired leases take part in nothing again.
"""

import logging
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from pymongo import ReturnDocument, UpdateOne
from pymongo.database import Database

from shared.store import cosmos, schema
from shared.store.cosmos import WHOLE_RANGE, ChildStart, FeedRange, overlaps, ranges_overlap, uncovered
from shared.store.partitioning import BucketRange
from shared.store.retries import RetryPolicy, with_retries, write_idempotent

log = logging.getLogger(__name__)
Token = Mapping[str, Any]
# In a tally lease's token (shared/reports/tally.py): where the roll-ups its passes have yet to do start.
ROLLUPS_FROM = "rollups_from"


@dataclass(frozen=True)
class Feed:
    """A source collection the reports read changes of (or, `tally`, sweep once an hour)."""

    collection: str
    time_field: str  # the server-side time the polling source reads by (indexed in shared/store/schema.py)
    fields: tuple[str, ...] = ()  # what aggregation reads of a changed document besides its `_id`
    name: str = ""  # what leases and work messages call it (default: its collection)
    tally: bool = False  # swept by user bucket, hour by hour (shared/reports/tally.py), not read as changes
    archive: bool = False  # swept by receive time, hour by hour, into the archive (shared/archive/actions.py)

    @property
    def hourly(self) -> bool:
        """Whether its partitions run once an hour is due (the tally, the archive's sweep), not at every dispatch:
        bucket ranges on every store, dispatched by the hours they have yet to do."""
        return self.tally or self.archive

    @property
    def key(self) -> str:
        return self.name or self.collection

    @property
    def projection(self) -> dict[str, int]:
        """What the polling source reads of a document: a change only names what to recompute."""
        return dict.fromkeys((self.time_field, *self.fields), 1)


ACTIONS_FEED = Feed(schema.BOTTLE_ACTIONS, "received_at", ("bottle_id", "time"))
HEARTBEAT_TALLY = Feed(schema.BOTTLE_HEARTBEATS, "", name="heartbeat_tally", tally=True)  # no time: it sweeps
# The archive's sweep of the actions by receive time (shared/archive/actions.py): one partition, when the app has an
# archive (shared/archive/current.py).
ACTIONS_ARCHIVE = Feed(schema.BOTTLE_ACTIONS, "received_at", name="actions_archive", archive=True)
FEEDS = (ACTIONS_FEED, HEARTBEAT_TALLY)
FEED_BY_KEY = {feed.key: feed for feed in (*FEEDS, ACTIONS_ARCHIVE)}


def feeds_to_run(*, archived: bool) -> tuple[Feed, ...]:
    """The feeds the dispatcher keeps: the reports', and the archive's sweep when the app has an archive."""
    return (*FEEDS, ACTIONS_ARCHIVE) if archived else FEEDS


# Feeds of an earlier layout (the heartbeat documents' change feed, and the hourly reports' feed that rolled the
# days up): their leases are left alone and a work message still queued for one is dropped (`retired`).
RETIRED_FEEDS = frozenset({schema.BOTTLE_HEARTBEATS, schema.USER_HOURLY_REPORTS})


def retired(message: Mapping[str, Any]) -> bool:
    """Whether a work message names a feed of an earlier layout, or a Cosmos DB partition by its place in the
    token list, as the code before feed ranges did (sent before an upgrade): the worker drops it, rather than
    failing it into the poison queue (where it would count as a failure, and alert)."""
    return message.get("feed") in RETIRED_FEEDS or (message.get("cosmos") is True and "range" not in message)


def bucket_span(buckets: BucketRange) -> FeedRange:
    """A bucket range as fixed-width hex, so bucket partitions' spans compare as feed ranges do."""
    return f"{buckets.low:04X}", f"{buckets.high:04X}"


@dataclass(frozen=True)
class Partition:
    """One partition of a feed: `index` of `count`, by bucket range, or by a Cosmos DB physical partition
    (`cosmos`: `feed_range`, the effective partition key range its token reads; its change stream starts from
    `start_token`, the partition's token when the lease was made; `index` of `count` only orders the ranges)."""

    feed: Feed
    index: int
    count: int
    cosmos: bool = False
    feed_range: FeedRange | None = None

    def __post_init__(self) -> None:
        if self.cosmos != (self.feed_range is not None):
            raise ValueError("a Cosmos DB partition is named by its feed range, and only it has one")

    @property
    def kind(self) -> str:
        return "cosmos" if self.cosmos else "buckets"

    @property
    def lease_id(self) -> str:
        if self.feed_range is not None:
            low, high = self.feed_range
            return f"reports:{self.feed.key}:cosmos:{low}-{high}"
        return f"reports:{self.feed.key}:buckets:{self.index}/{self.count}"

    @property
    def span(self) -> FeedRange:
        """The keys it reads, comparable with the spans of the same kind: its feed range, or its buckets as
        fixed-width hex."""
        if self.feed_range is not None:
            return self.feed_range
        return bucket_span(BucketRange(self.index, self.count))

    @property
    def buckets(self) -> BucketRange | None:
        """The bucket range a store without physical partitions reads (None on Cosmos DB)."""
        return None if self.cosmos else BucketRange(self.index, self.count)

    def message(self) -> dict[str, Any]:
        """The work message the dispatcher sends for this partition."""
        message = {"feed": self.feed.key, "partition": self.index, "of": self.count, "cosmos": self.cosmos}
        return message if self.feed_range is None else {**message, "range": list(self.feed_range)}

    @classmethod
    def from_message(cls, message: Mapping[str, Any]) -> "Partition":
        """The partition a work message names; ValueError for anything else."""
        feed = FEED_BY_KEY.get(str(message.get("feed")))
        index, count, on_cosmos = message.get("partition"), message.get("of"), message.get("cosmos")
        if feed is None or type(index) is not int or type(count) is not int or type(on_cosmos) is not bool:
            raise ValueError(f"not a report partition's work message: {dict(message)!r}")
        if not 0 <= index < count:
            raise ValueError(f"partition {index} of {count} does not exist")
        if not on_cosmos:
            return cls(feed, index, count)
        span = message.get("range")
        if not (isinstance(span, list) and len(span) == 2 and all(isinstance(k, str) for k in span)):
            raise ValueError(f"a Cosmos DB partition's work message without its feed range: {dict(message)!r}")
        return cls(feed, index, count, cosmos=True, feed_range=(span[0], span[1]))


class NoPartitionTokens(Exception):
    """Cosmos DB answered `GetChangeStreamTokens` without tokens, or with tokens that name no feed range: without
    them a feed cannot be read partition by partition (each bucket-filtered stream would read every physical
    partition). The dispatch fails, loudly, rather than fall back."""


def feed_partitions(
    db: Database[Any], feed: Feed, *, count: int, on_cosmos: bool, policy: RetryPolicy
) -> list[tuple[Partition, Token | None]]:
    """The feed's partitions, each with the token its change stream starts from when it has no position yet:
    on Cosmos DB one per physical partition (the tokens of `GetChangeStreamTokens`, ordered by feed range),
    elsewhere `count` bucket ranges (no start token: a new stream starts at the present). The tally has bucket
    ranges everywhere; the archive's sweep has one partition."""
    if feed.archive:  # one sweep by receive time, whatever the store: its files are named by what they hold
        return [(Partition(feed, 0, 1), None)]
    if on_cosmos and not feed.hourly:
        return list(cosmos_partitions(db, feed, policy))
    return [(Partition(feed, i, count), None) for i in range(count)]


def cosmos_partitions(db: Database[Any], feed: Feed, policy: RetryPolicy) -> list[tuple[Partition, Token]]:
    """One partition per token of `GetChangeStreamTokens`, named by the feed range the token carries."""
    tokens = with_retries(lambda: cosmos.change_stream_tokens(db, feed.collection), policy)
    if not tokens:
        raise NoPartitionTokens(f"GetChangeStreamTokens gave no resumeAfterTokens for {feed.collection}")
    try:
        ranged = sorted(((cosmos.feed_range(token), token) for token in tokens), key=lambda entry: entry[0])
    except ValueError as error:
        raise NoPartitionTokens(f"{feed.collection}: {error}") from None
    if len({span for span, _ in ranged}) != len(ranged):
        raise NoPartitionTokens(f"GetChangeStreamTokens named one feed range twice for {feed.collection}")
    return [
        (Partition(feed, i, len(ranged), cosmos=True, feed_range=span), token) for i, (span, token) in enumerate(ranged)
    ]


@dataclass(frozen=True)
class Lease:
    """A partition's saved position, and (once claimed) who holds it under which version."""

    token: Token | None = None
    checkpoint_time: datetime | None = None
    start_token: Token | None = None
    owner: str | None = None
    version: int = 0
    created_at: datetime | None = None  # when the lease was made (the tally's first pass rolls up days from it)
    # The last page read was full (more was waiting): a run that starts on an empty page then asks again rather
    # than take it for caught up (a throttled Cosmos DB stream answers empty pages).
    behind: bool = False
    # When the polling run that saved this position began reading (None: no polling run did, or since then a
    # change stream moved the position): its queries saw every document that had committed by then, up to the
    # checkpoint time (shared/reports/change_feed.py `aggregated_before`).
    polled_at: datetime | None = None


def _lease(document: Mapping[str, Any]) -> Lease:
    return Lease(
        token=document.get("token"),
        checkpoint_time=document.get("checkpoint_time"),
        start_token=document.get("start_token"),
        owner=document.get("owner"),
        version=int(document.get("version", 0)),
        created_at=document.get("created_at"),
        behind=bool(document.get("behind", False)),
        polled_at=document.get("polled_at"),
    )


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

    A new partition of a feed that has leases (Cosmos DB split a physical partition, or REPORTS_PARTITIONS
    changed) starts from its parents' position, as Cosmos DB's change feed processor hands a parent's position to
    its children: a split child on Cosmos DB from the token of the live lease that holds its whole range and got
    furthest (its own entry of it, or the token narrowed to its range: `_inherited_position`); any other from the
    oldest checkpoint time of the live leases whose ranges overlap its own, recovering from there (less the
    overlap). Either way it reads what was written since its parents' last checkpoint, never what older, replaced
    layouts left behind. A parent that never saved a checkpoint time has aggregated nothing known: its children
    build from the start. A feed's first partitions start from scratch. Each split child on Cosmos DB logs, and
    counts, how it starts: from its own entry of a parent's token, from the token narrowed to its range, or by
    time (polling the whole collection from the checkpoint time)."""
    wanted = list(partitions)
    made = LeasesMade()
    if not wanted:
        return made
    feeds = sorted({p.feed.key for p, _ in wanted})
    live = with_retries(
        lambda: list(db[schema.LEASES].find({"feed": {"$in": feeds}, "retired_at": None})),
        policy,
    )
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
        lease = {
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
        # A range that comes back (REPORTS_PARTITIONS 4 -> 8 -> 4) finds its old lease retired: it starts again
        # from its parents, as a new one would. The version goes on, so a worker of its earlier life is fenced.
        revived = {key: value for key, value in lease.items() if key != "version"}
        ops.append(UpdateOne({"_id": partition.lease_id, "retired_at": {"$ne": None}}, {"$set": revived}))
        ops.append(UpdateOne({"_id": partition.lease_id}, {"$setOnInsert": lease}, upsert=True))
    if ops:
        write_idempotent(db[schema.LEASES], ops, policy)
    _retire_replaced(db, [p for p, _ in wanted], live, now=now, policy=policy)
    made.count = len(fresh)
    return made


def _inherited_position(
    partition: Partition, parents: list[Mapping[str, Any]]
) -> tuple[dict[str, Any] | None, datetime | None, ChildStart | None]:
    """A new lease's first token and checkpoint time, and how a Cosmos DB child with parents starts (None for any
    other lease). A tally lease: the roll-ups its parents had yet to do, from their oldest checkpoint. A split
    child on Cosmos DB: the token of the live lease that holds its whole range and got furthest (`_holding_parent`),
    its own entry of it or the token narrowed to its range (`cosmos.child_token`), from that lease's checkpoint
    time. Otherwise (a merge, bucket ranges, no such lease with a usable token) no token, from the oldest
    checkpoint of its parents (`by_time` for a Cosmos DB child)."""
    if partition.feed.tally:
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


def _holding_parent(partition: Partition, parents: list[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """Of a Cosmos DB child's parents, the lease whose range holds the child's whole range, with a token and a
    checkpoint time, that checkpointed last (of two at one time, the narrower): it reads its own range from where
    that lease stopped (a re-read of what its range received since that checkpoint, no more), as Cosmos DB's own
    change feed clients carry a parent's continuation on to its children. Two such leases are live when a child
    splits before it ran (its parent retires only once every child ran): the child's lease holds the parent's
    token narrowed, or, if it ran, its own newer one. Any lease holding the range is a safe start: everything in
    its range before its checkpoint was aggregated. None for a merge (no parent holds the whole range)."""
    if not partition.cosmos:
        return None
    holding: list[tuple[FeedRange, Mapping[str, Any]]] = []
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


def _log_child_start(partition: Partition, parents: list[Mapping[str, Any]], how: ChildStart) -> None:
    """One line per new Cosmos DB lease with parents: which way it starts, and from which parents."""
    named = ", ".join(sorted(str(doc["_id"]) for doc in parents))
    if how == "own_entry":
        log.info("reports: %s starts from its own entry of its parent %s's token", partition.lease_id, named)
    elif how == "narrowed":
        log.info("reports: %s starts from its parent %s's token narrowed to its range", partition.lease_id, named)
    else:
        log.info(
            "reports: %s recovers by time from its parents' (%s) checkpoint less the overlap: no token of theirs "
            "holds its range, so it polls the whole collection from there",
            partition.lease_id,
            named,
        )


def _inherited_rollups(parents: list[Mapping[str, Any]]) -> dict[str, datetime] | None:
    """What a new tally partition takes over of its parents' passes besides their position: the oldest day
    whose roll-up one of them had yet to do (ROLLUPS_FROM in its token: a pass behind by more than a window
    rolls the days it passed up a day a pass; a first pass, from its lease's making). Their hours are counted
    already, so no pass of the new layout finds them changed: without it their daily reports stay incomplete."""
    pending = [_rollups_pending(doc) for doc in parents]
    known = [moment for moment in pending if moment is not None]
    return {ROLLUPS_FROM: min(known)} if known else None


def _rollups_pending(doc: Mapping[str, Any]) -> datetime | None:
    token = doc.get("token")
    moment = token.get(ROLLUPS_FROM) if isinstance(token, Mapping) else None
    if moment is None and doc.get("checkpoint_time") is None:
        moment = doc.get("created_at")  # a first pass rolls up the days since its lease was made
    return moment if isinstance(moment, datetime) else None


def _without_earlier_legacy_layouts(
    db: Database[Any], live: list[Mapping[str, Any]], *, now: datetime, policy: RetryPolicy
) -> list[Mapping[str, Any]]:
    """The live leases less those of the earlier layouts the code before ranges left (no `range` stored), which
    are retired now. That code never retired a lease, so every layout it ever ran is live, the earlier ones frozen
    where their layout ended (on Cosmos DB the first one, weeks back), and their ranges are unknown (they overlap
    everything): as parents, they would start each new lease from the feed's oldest checkpoint ever. Of each feed's
    legacy layouts (by kind and `of`), the last one to run stays: it started from all the earlier ones. Kinds count
    as layouts of one feed: on Cosmos DB that code read a feed by bucket ranges whenever GetChangeStreamTokens gave
    no tokens, and a frozen bucket layout kept beside the physical partitions' would be every new lease's parent."""
    layouts: dict[str, dict[tuple[str, Any], list[Mapping[str, Any]]]] = {}
    for doc in live:
        if "range" not in doc:
            layouts.setdefault(doc["feed"], {}).setdefault((_span_of(doc)[0], doc.get("of")), []).append(doc)
    earlier: set[Any] = set()
    for by_count in layouts.values():
        last = max(by_count.values(), key=_last_active)
        earlier |= {doc["_id"] for docs in by_count.values() if docs is not last for doc in docs}
    if earlier:
        with_retries(
            lambda: db[schema.LEASES].update_many(
                {"_id": {"$in": sorted(earlier)}, "retired_at": None}, {"$set": {"retired_at": now}}
            ),
            policy,
        )
    return [doc for doc in live if doc["_id"] not in earlier]


def _last_active(docs: list[Mapping[str, Any]]) -> datetime:
    """When a layout's leases were last made, claimed, checkpointed or released."""
    times = [doc.get(f) for doc in docs for f in ("created_at", "claimed_at", "updated_at", "released_at")]
    return max((t for t in times if isinstance(t, datetime)), default=datetime.min.replace(tzinfo=UTC))


def _start_time(parents: list[Mapping[str, Any]]) -> datetime | None:
    """Where a new partition starts: the oldest of its parents' checkpoint times (None: from scratch)."""
    times: list[datetime | None] = [doc.get("checkpoint_time") for doc in parents]
    known = [t for t in times if t is not None]
    return min(known) if known and len(known) == len(times) else None


def _span_of(doc: Mapping[str, Any]) -> tuple[str, FeedRange | None]:
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


def _overlaps(partition: Partition, doc: Mapping[str, Any]) -> bool:
    """Whether a live lease of the partition's feed reads keys the partition reads (ranges of another kind,
    or unknown, overlap everything)."""
    if doc["feed"] != partition.feed.key or doc["_id"] == partition.lease_id:
        return False
    kind, span = _span_of(doc)
    return kind != partition.kind or span is None or ranges_overlap(span, partition.span)


def _retire_replaced(
    db: Database[Any],
    current: list[Partition],
    live: list[Mapping[str, Any]],
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
        with_retries(
            lambda: db[schema.LEASES].update_many(
                {"_id": {"$in": retiring}, "retired_at": None}, {"$set": {"retired_at": now}}
            ),
            policy,
        )


def _covered(doc: Mapping[str, Any], children: list[Partition]) -> bool:
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
        lambda: list(db[schema.LEASES].find({"feed": feed.key, "kind": "cosmos", "retired_at": None})), policy
    )
    return sorted(
        doc["_id"]
        for doc in live
        if (span := _span_of(doc)[1]) is not None and any(ranges_overlap(span, gap) for gap in ranges)
    )


def _has_run(doc: Mapping[str, Any]) -> bool:
    return doc.get("updated_at") is not None or doc.get("released_at") is not None


def leases_to_dispatch(
    db: Database[Any],
    partitions: Iterable[Partition],
    *,
    now: datetime,
    hold_for: timedelta,
    policy: RetryPolicy,
    behind: datetime | None = None,
) -> list[Partition]:
    """The partitions no live worker holds and none was sent to lately (and with `behind`, only those whose
    checkpoint time is before it); each is marked as sent until `now + hold_for`, so the next dispatches do not
    pile up messages for a partition a worker is yet to take."""
    by_id = {p.lease_id: p for p in partitions}
    if not by_id:
        return []
    conditions: list[dict[str, Any]] = [
        {"$or": [{"owner": None}, {"expires_at": {"$lt": now}}]},
        {"$or": [{"dispatched_until": None}, {"dispatched_until": {"$lt": now}}]},
    ]
    if behind is not None:
        conditions.append({"$or": [{"checkpoint_time": None}, {"checkpoint_time": {"$lt": behind}}]})
    due = {"$and": conditions}
    candidates = with_retries(
        lambda: [doc["_id"] for doc in db[schema.LEASES].find({"_id": {"$in": sorted(by_id)}, **due}, {"_id": 1})],
        policy,
    )
    # Each mark is guarded by the same condition: of two racing dispatchers, one sends each partition. A retry
    # finds the mark its lost reply made.
    until = now + hold_for
    mark = {"$set": {"dispatched_until": until}}
    ours = {"$or": [due, {"dispatched_until": until}]}
    return [by_id[lease_id] for lease_id in candidates if _marked(db, {"_id": lease_id, **ours}, mark, policy)]


def _marked(db: Database[Any], guard: dict[str, Any], update: dict[str, Any], policy: RetryPolicy) -> bool:
    return with_retries(lambda: db[schema.LEASES].update_one(guard, update), policy).matched_count == 1


def new_owner() -> str:
    return uuid.uuid4().hex


def claim(
    db: Database[Any], partition: Partition, owner: str, *, now: datetime, lease_for: timedelta, policy: RetryPolicy
) -> Lease | None:
    """Take the partition's lease if no live worker holds it (a new version: the fencing token); None if one
    does (a work message delivered twice, or to two workers at once), or if the lease was retired (a message
    sent before its partition was replaced)."""
    # A retry whose first try took effect (its reply lost) finds the lease already its owner's.
    free = [{"owner": None}, {"expires_at": {"$lt": now}}, {"owner": owner}]
    found = with_retries(
        lambda: db[schema.LEASES].find_one_and_update(
            {"_id": partition.lease_id, "retired_at": None, "$or": free},
            {"$set": {"owner": owner, "expires_at": now + lease_for, "claimed_at": now}, "$inc": {"version": 1}},
            return_document=ReturnDocument.AFTER,
        ),
        policy,
    )
    return None if found is None else _lease(found)


def checkpoint(
    db: Database[Any],
    partition: Partition,
    lease: Lease,
    *,
    source: str,
    now: datetime,
    lease_for: timedelta,
    policy: RetryPolicy,
) -> bool:
    """Save the position after work that succeeded, and renew the lease; False if the lease was lost (taken
    over after it expired): the caller must stop, and its position is not saved."""
    update = {
        "token": lease.token,
        "checkpoint_time": lease.checkpoint_time,
        "behind": lease.behind,
        "polled_at": lease.polled_at,
        "source": source,
        "updated_at": now,
        "expires_at": now + lease_for,
    }
    return _fenced(db, partition, lease, {"$set": update}, policy)


def release(db: Database[Any], partition: Partition, lease: Lease, *, now: datetime, policy: RetryPolicy) -> bool:
    """Give the lease up, so the next dispatch sends the partition again at once; False if it was lost."""
    update = {"owner": None, "expires_at": None, "dispatched_until": None, "released_at": now}
    return _fenced(db, partition, lease, {"$set": update}, policy)


def _fenced(db: Database[Any], partition: Partition, lease: Lease, update: dict[str, Any], policy: RetryPolicy) -> bool:
    guard = {"_id": partition.lease_id, "owner": lease.owner, "version": lease.version}
    return with_retries(lambda: db[schema.LEASES].update_one(guard, update), policy).matched_count == 1


_LAG_FIELDS = {"feed": 1, "checkpoint_time": 1, "created_at": 1, "token": 1}


def _paced_pass_end(token: Any, now: datetime, pacing: timedelta) -> datetime | None:
    """The end of the hours a tally lease's pass under way counts, if it began less than `pacing` ago."""
    if not isinstance(token, Mapping) or token.get("end") is None or token.get("began") is None:
        return None
    end: datetime = token["end"]
    return end if now - token["began"] < pacing else None


def feed_lags(
    db: Database[Any],
    partitions: Iterable[Partition],
    *,
    now: datetime,
    policy: RetryPolicy,
    tally_due: datetime | None = None,
    tally_pacing: timedelta = timedelta(0),
    also: Iterable[str] = (),
) -> dict[str, float]:
    """Per feed, how far its furthest-behind partition is: `now` minus its checkpoint time (or, before its
    first checkpoint, minus when its lease was made), in seconds. The tally (and the archive's sweep, hourly too)
    is behind by the closed hours it has yet to do: `tally_due` (the end of the hours due) minus its checkpoint
    time, 0 when caught up; a pass
    under way that began less than `tally_pacing` ago counts as having counted its hours (it is paced over
    REPORTS_TALLY_SPREAD_MINUTES, so the lag and its alert do not fire every hour while it is on time). `also`:
    lease ids of no current partition to count as well (a range the token reply left out, unread meanwhile)."""
    ids = sorted({p.lease_id for p in partitions} | set(also))
    leases = with_retries(
        lambda: list(db[schema.LEASES].find({"_id": {"$in": ids}}, _LAG_FIELDS)),
        policy,
    )
    lags: dict[str, float] = {}
    for lease in leases:
        since = lease.get("checkpoint_time") or lease.get("created_at")
        feed = FEED_BY_KEY.get(lease["feed"])
        tally = feed is not None and feed.hourly
        until = tally_due if tally and tally_due is not None else now
        on_time = _paced_pass_end(lease.get("token"), now, tally_pacing) if tally else None
        if on_time is not None:  # a paced pass on time: its hours as good as counted
            since = on_time if since is None else max(since, on_time)
        if since is not None:
            lag = max(0.0, (until - since).total_seconds())
            lags[lease["feed"]] = max(lags.get(lease["feed"], lag), lag)
    return lags
