"""A feed partition's lease (`leases`, one document per partition): its position, and who holds it. Claiming a free
or expired lease bumps `version`; every checkpoint, renewal and release is guarded by the owner and version it
claimed (the fencing token), so a worker whose lease was taken over cannot save a position. What it aggregated
meanwhile is harmless: aggregation is replay-safe. Also here: which leases are free to dispatch, and each feed's
lag from its leases' checkpoints."""

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final, TypedDict

from pymongo import ReturnDocument
from pymongo.collection import Collection
from pymongo.database import Database

from shared.feeds.partitions import Partition, Token
from shared.store import schema
from shared.store.retries import RetryPolicy, with_retries

# In an hourly lease's token (shared/feeds/sweeps.py): where the work its passes left to the next ones starts (a new
# layout's leases take it over from their parents: shared/feeds/layouts.py).
ROLLUPS_FROM: Final = "rollups_from"


class LeaseDocument(TypedDict, total=False):
    """A lease document's fields, as the dispatcher, the workers and the layout bookkeeping write and read them
    (each write sets a few). Leases written before ranges were stored lack `kind` and `range`."""

    _id: str  # Partition.lease_id
    feed: str
    kind: str  # "buckets" or "cosmos"
    range: list[str]  # the partition's span: [low, high)
    partition: int
    of: int
    start_token: Token | None  # a Cosmos DB partition's token when the lease was made
    # The position: everything the partition received before `checkpoint_time` has been aggregated.
    token: Token | None
    checkpoint_time: datetime | None
    polled_at: datetime | None
    behind: bool
    source: str  # which source saved the position (for operators)
    # The ownership: the fencing guard is `owner` and `version`.
    owner: str | None
    expires_at: datetime | None
    version: int
    dispatched_until: datetime | None
    created_at: datetime | None
    claimed_at: datetime | None
    updated_at: datetime | None
    released_at: datetime | None
    retired_at: datetime | None


def lease_documents(db: Database[Any]) -> Collection[LeaseDocument]:
    """The `leases` collection, its documents typed."""
    return db[schema.LEASES]


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
    # checkpoint time (shared/feeds/sources.py `aggregated_before`).
    polled_at: datetime | None = None


def _lease(document: LeaseDocument) -> Lease:
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
    held: LeaseDocument = {"owner": owner, "expires_at": now + lease_for, "claimed_at": now}
    bumped: LeaseDocument = {"version": 1}
    found = with_retries(
        lambda: lease_documents(db).find_one_and_update(
            {"_id": partition.lease_id, "retired_at": None, "$or": free},
            {"$set": held, "$inc": bumped},
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
    update: LeaseDocument = {
        "token": lease.token,
        "checkpoint_time": lease.checkpoint_time,
        "behind": lease.behind,
        "polled_at": lease.polled_at,
        "source": source,
        "updated_at": now,
        "expires_at": now + lease_for,
    }
    return _fenced(db, partition, lease, update, policy)


def release(db: Database[Any], partition: Partition, lease: Lease, *, now: datetime, policy: RetryPolicy) -> bool:
    """Give the lease up, so the next dispatch sends the partition again at once; False if it was lost."""
    update: LeaseDocument = {"owner": None, "expires_at": None, "dispatched_until": None, "released_at": now}
    return _fenced(db, partition, lease, update, policy)


def _fenced(db: Database[Any], partition: Partition, lease: Lease, fields: LeaseDocument, policy: RetryPolicy) -> bool:
    """Set `fields` if the lease is still the one claimed (its owner and version): False if it was lost."""
    guard = {"_id": partition.lease_id, "owner": lease.owner, "version": lease.version}
    return with_retries(lambda: lease_documents(db).update_one(guard, {"$set": fields}), policy).matched_count == 1


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
        lambda: [doc["_id"] for doc in lease_documents(db).find({"_id": {"$in": sorted(by_id)}, **due}, {"_id": 1})],
        policy,
    )
    # Each mark is guarded by the same condition: of two racing dispatchers, one sends each partition. A retry
    # finds the mark its lost reply made.
    until = now + hold_for
    sent: LeaseDocument = {"dispatched_until": until}
    mark = {"$set": sent}
    ours = {"$or": [due, {"dispatched_until": until}]}
    return [by_id[lease_id] for lease_id in candidates if _marked(db, {"_id": lease_id, **ours}, mark, policy)]


def _marked(db: Database[Any], guard: dict[str, Any], update: dict[str, Any], policy: RetryPolicy) -> bool:
    return with_retries(lambda: lease_documents(db).update_one(guard, update), policy).matched_count == 1


_LAG_FIELDS = {"feed": 1, "checkpoint_time": 1, "created_at": 1, "token": 1}


def _paced_pass_end(token: Any, now: datetime, pacing: timedelta) -> datetime | None:
    """The end of the hours an hourly lease's pass under way does, if it began less than `pacing` ago."""
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
    hours_due: datetime | None = None,
    pacing: timedelta = timedelta(0),
    also: Iterable[str] = (),
) -> dict[str, float]:
    """Per feed, how far its furthest-behind partition is: `now` minus its checkpoint time (or, before its
    first checkpoint, minus when its lease was made), in seconds. An hourly feed (Shape) is behind by the closed
    hours it has yet to do: `hours_due` (the end of the hours due) minus its checkpoint time, 0 when caught up; a
    pass under way that began less than `pacing` ago counts as having done its hours (it is paced over
    REPORTS_TALLY_SPREAD_MINUTES, so the lag and its alert do not fire every hour while it is on time). `also`:
    lease ids of the same feeds but no current partition to count as well (a range the token reply left out,
    unread meanwhile)."""
    hourly = {p.feed.key for p in partitions if p.feed.hourly}
    ids = sorted({p.lease_id for p in partitions} | set(also))
    leases = with_retries(
        lambda: list(lease_documents(db).find({"_id": {"$in": ids}}, _LAG_FIELDS)),
        policy,
    )
    lags: dict[str, float] = {}
    for lease in leases:
        since = lease.get("checkpoint_time") or lease.get("created_at")
        swept = lease["feed"] in hourly
        until = hours_due if swept and hours_due is not None else now
        on_time = _paced_pass_end(lease.get("token"), now, pacing) if swept else None
        if on_time is not None:  # a paced pass on time: its hours as good as counted
            since = on_time if since is None else max(since, on_time)
        if since is not None:
            lag = max(0.0, (until - since).total_seconds())
            lags[lease["feed"]] = max(lags.get(lease["feed"], lag), lag)
    return lags
