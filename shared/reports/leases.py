"""Feed partitions and their leases (`leases`, one document per partition), as Cosmos DB's change feed processor
keeps them: a partition is read by one worker at a time, the one holding its lease.

A lease holds the partition's position (the resume token of its change stream, and the checkpoint time before
which everything it received has been aggregated) and its ownership: `owner`, `expires_at` and `version`.
Claiming a free or expired lease bumps `version`; every checkpoint, renewal and release is guarded by the
owner and version it claimed, so a worker whose lease expired and was taken over cannot write a position
(the fencing token). What it aggregated meanwhile is harmless: aggregation is replay-safe.

Partitions: on Cosmos DB, one per physical partition of the feed's collection (`GetChangeStreamTokens`); on
any other MongoDB, REPORTS_PARTITIONS ranges of the hash bucket of the shard key that the feed's documents
carry (`bucket`, shared/store/partitioning.py). The heartbeat tally (shared/reports/tally.py) is not a change
feed but a sweep: REPORTS_PARTITIONS ranges of the bucket of the owner's `user_id` on every store, each with a
lease of the same kind, whose checkpoint time is the end of the closed hours it has counted.
"""

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pymongo import ReturnDocument, UpdateOne
from pymongo.database import Database

from shared.store import cosmos, schema
from shared.store.partitioning import BucketRange
from shared.store.retries import RetryPolicy, with_retries, write_idempotent

Token = Mapping[str, Any]


@dataclass(frozen=True)
class Feed:
    """A source collection the reports read changes of (or, `tally`, sweep once an hour)."""

    collection: str
    time_field: str  # the server-side time the polling source reads by (indexed in shared/store/schema.py)
    fields: tuple[str, ...] = ()  # what aggregation reads of a changed document besides its `_id`
    name: str = ""  # what leases and work messages call it (default: its collection)
    tally: bool = False  # swept by user bucket, hour by hour (shared/reports/tally.py), not read as changes

    @property
    def key(self) -> str:
        return self.name or self.collection

    @property
    def projection(self) -> dict[str, int]:
        """What the polling source reads of a document: a change only names what to recompute."""
        return dict.fromkeys((self.time_field, *self.fields), 1)


ACTIONS_FEED = Feed(schema.BOTTLE_ACTIONS, "received_at", ("bottle_id", "time"))
HEARTBEAT_TALLY = Feed(schema.BOTTLE_HEARTBEATS, "", name="heartbeat_tally", tally=True)  # no time: it sweeps
FEEDS = (ACTIONS_FEED, HEARTBEAT_TALLY)
FEED_BY_KEY = {feed.key: feed for feed in FEEDS}
# Feeds of an earlier layout (the heartbeat documents' change feed, and the hourly reports' feed that rolled the
# days up): their leases are left alone and a work message still queued for one is dropped (`retired`).
RETIRED_FEEDS = frozenset({schema.BOTTLE_HEARTBEATS, schema.USER_HOURLY_REPORTS})


def retired(message: Mapping[str, Any]) -> bool:
    """Whether a work message names a feed of an earlier layout (sent before an upgrade): the worker drops it,
    rather than failing it into the poison queue (where it would count as a failure, and alert)."""
    return message.get("feed") in RETIRED_FEEDS


@dataclass(frozen=True)
class Partition:
    """One partition of a feed: `index` of `count`, by bucket range, or by a Cosmos DB physical partition
    (`cosmos`: its change stream starts from `start_token`, the partition's token when the lease was made)."""

    feed: Feed
    index: int
    count: int
    cosmos: bool = False

    @property
    def lease_id(self) -> str:
        kind = "cosmos" if self.cosmos else "buckets"
        return f"reports:{self.feed.key}:{kind}:{self.index}/{self.count}"

    @property
    def buckets(self) -> BucketRange | None:
        """The bucket range a store without physical partitions reads (None on Cosmos DB)."""
        return None if self.cosmos else BucketRange(self.index, self.count)

    def message(self) -> dict[str, Any]:
        """The work message the dispatcher sends for this partition."""
        return {"feed": self.feed.key, "partition": self.index, "of": self.count, "cosmos": self.cosmos}

    @classmethod
    def from_message(cls, message: Mapping[str, Any]) -> "Partition":
        """The partition a work message names; ValueError for anything else."""
        feed = FEED_BY_KEY.get(str(message.get("feed")))
        index, count, on_cosmos = message.get("partition"), message.get("of"), message.get("cosmos")
        if feed is None or type(index) is not int or type(count) is not int or type(on_cosmos) is not bool:
            raise ValueError(f"not a report partition's work message: {dict(message)!r}")
        if not 0 <= index < count:
            raise ValueError(f"partition {index} of {count} does not exist")
        return cls(feed, index, count, on_cosmos)


def feed_partitions(
    db: Database[Any], feed: Feed, *, count: int, on_cosmos: bool, policy: RetryPolicy
) -> list[tuple[Partition, Token | None]]:
    """The feed's partitions, each with the token its change stream starts from when it has no position yet:
    on Cosmos DB one per physical partition (the tokens of `GetChangeStreamTokens`), elsewhere `count` bucket
    ranges (no start token: a new stream starts at the present). The tally has bucket ranges everywhere."""
    if on_cosmos and not feed.tally:
        tokens = with_retries(lambda: cosmos.change_stream_tokens(db, feed.collection), policy)
        if tokens:
            return [(Partition(feed, i, len(tokens), cosmos=True), token) for i, token in enumerate(tokens)]
    return [(Partition(feed, i, count), None) for i in range(count)]


@dataclass(frozen=True)
class Lease:
    """A partition's saved position, and (once claimed) who holds it under which version."""

    token: Token | None = None
    checkpoint_time: datetime | None = None
    start_token: Token | None = None
    owner: str | None = None
    version: int = 0
    created_at: datetime | None = None  # when the lease was made (the tally's first pass rolls up days from it)


def _lease(document: Mapping[str, Any]) -> Lease:
    return Lease(
        token=document.get("token"),
        checkpoint_time=document.get("checkpoint_time"),
        start_token=document.get("start_token"),
        owner=document.get("owner"),
        version=int(document.get("version", 0)),
        created_at=document.get("created_at"),
    )


def ensure_leases(
    db: Database[Any], partitions: Iterable[tuple[Partition, Token | None]], *, now: datetime, policy: RetryPolicy
) -> int:
    """Make a lease for every partition that has none; how many were made. A new partition of a feed that
    already has positions (the partition count changed, or Cosmos DB split a partition) starts from the
    feed's oldest checkpoint time and recovers from there; a feed's first partitions, and the new ones of a feed
    with a partition that never saved a checkpoint time, start from scratch."""
    wanted = list(partitions)
    if not wanted:
        return 0
    ids = [p.lease_id for p, _ in wanted]
    existing = with_retries(
        lambda: list(db[schema.LEASES].find({"feed": {"$in": sorted({p.feed.key for p, _ in wanted})}})),
        policy,
    )
    have = {doc["_id"] for doc in existing}
    # A lease without a checkpoint time has aggregated nothing known: the new ones then build from the start.
    oldest: dict[str, datetime | None] = {}
    for doc in existing:
        feed, time = doc["feed"], doc.get("checkpoint_time")
        known = oldest.get(feed, time)
        oldest[feed] = None if time is None or known is None else min(known, time)
    ops: list[Any] = [
        UpdateOne(
            {"_id": partition.lease_id},
            {
                "$setOnInsert": {
                    "feed": partition.feed.key,
                    "partition": partition.index,
                    "of": partition.count,
                    "start_token": start,
                    "token": None,
                    "checkpoint_time": oldest.get(partition.feed.key),
                    "owner": None,
                    "expires_at": None,
                    "version": 0,
                    "dispatched_until": None,
                    "created_at": now,
                }
            },
            upsert=True,
        )
        for (partition, start), lease_id in zip(wanted, ids, strict=True)
        if lease_id not in have
    ]
    return sum(write_idempotent(db[schema.LEASES], ops, policy)) if ops else 0


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
    does (a work message delivered twice, or to two workers at once)."""
    # A retry whose first try took effect (its reply lost) finds the lease already its owner's.
    free = [{"owner": None}, {"expires_at": {"$lt": now}}, {"owner": owner}]
    found = with_retries(
        lambda: db[schema.LEASES].find_one_and_update(
            {"_id": partition.lease_id, "$or": free},
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


def feed_lags(
    db: Database[Any],
    partitions: Iterable[Partition],
    *,
    now: datetime,
    policy: RetryPolicy,
    tally_due: datetime | None = None,
) -> dict[str, float]:
    """Per feed, how far its furthest-behind partition is: `now` minus its checkpoint time (or, before its
    first checkpoint, minus when its lease was made), in seconds. The tally is behind by the closed hours it
    has yet to count: `tally_due` (the end of the hours due) minus its checkpoint time, 0 when caught up."""
    ids = sorted(p.lease_id for p in partitions)
    leases = with_retries(
        lambda: list(db[schema.LEASES].find({"_id": {"$in": ids}}, {"feed": 1, "checkpoint_time": 1, "created_at": 1})),
        policy,
    )
    lags: dict[str, float] = {}
    for lease in leases:
        since = lease.get("checkpoint_time") or lease.get("created_at")
        feed = FEED_BY_KEY.get(lease["feed"])
        until = tally_due if feed is not None and feed.tally and tally_due is not None else now
        if since is not None:
            lag = max(0.0, (until - since).total_seconds())
            lags[lease["feed"]] = max(lags.get(lease["feed"], lag), lag)
    return lags
