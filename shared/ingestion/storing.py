"""Storing a request's validated events, idempotent: its heartbeats in one write of the bottle's heartbeat document
(`store_heartbeats`), its opened/closed events in one bulk insert into `bottle_actions`, and the bottle's status
in one guarded update of `bottles` (`store_status`). At most three writes whatever the request's size, because Cosmos
DB charges each statement that changes a document as a replace of the whole document (docs/ingestion.md).
"""

from dataclasses import dataclass
from datetime import datetime
from hmac import compare_digest
from typing import Any, Literal

from bson import Binary
from pymongo import InsertOne, ReturnDocument, UpdateOne
from pymongo.collection import Collection
from pymongo.database import Database

from shared.bottles.entries import RegistryEntry, bottle_documents, read_bottle
from shared.devices.device_time import action_order
from shared.devices.heartbeat_document import (
    ALIVE_AT,
    KEY,
    RING,
    RING_TIME,
    SILENT_PENDING,
    HeartbeatDocument,
    HeartbeatFilter,
    HeartbeatUpdate,
    Placement,
    Window,
    already_counted,
    key_digest,
    newest,
    place,
    rewritten_ring,
    ring_write,
    slot_start,
)
from shared.doses.bottle_document import BottleDocument, BottleFilter, BottleUpdate
from shared.doses.due_tracking import after_doses, plan_of
from shared.errors import Unauthorized
from shared.ingestion.authentication import UNAUTHORIZED_MESSAGE
from shared.ingestion.events import DeviceEvent
from shared.store import schema
from shared.store.optimistic import AGAIN, Round, until_landed
from shared.store.partitioning import BUCKET_FIELD, bucket_of
from shared.store.retries import RetryPolicy, with_retries, write_idempotent


@dataclass(frozen=True)
class IngestResult:
    """What became of a request's events; the three add up to the events sent.

    stored: new events, kept. duplicates: repeats of events already kept (or of one earlier in the request), and
    reused event ids, which change nothing. expired: heartbeats older than the heartbeat window, accepted but not
    kept (their slot has left the ring), so a retry of one is answered the same."""

    stored: int
    duplicates: int
    expired: int


def ingest_events(
    db: Database[Any],
    bottle_id: str,
    key_hash: str,
    events: list[DeviceEvent],
    *,
    registry: RegistryEntry | None,
    bottle: BottleDocument | None = None,
    now: datetime,
    policy: RetryPolicy,
    window: Window,
    dose_history: int = 32,
) -> IngestResult:
    """Store a request's events; a retried event (same request or a later one) is counted as a duplicate, and a
    heartbeat older than the window as expired, however often it is sent (nothing of it is kept to tell).

    Heartbeats authenticate inside their own write (the key hash is part of the filter), so they need no
    registry entry; actions do (`registry`: their owner and medication are denormalised onto them). `bottle`:
    the bottle as the request read it (registry and status fields), if it did; a request with a dose reads it
    here otherwise. Writes are ordered so that a failure part-way leaves nothing a retry would not repair:
    events first, then the status derived from all of the request's actions (re-applied on retry, never
    backwards)."""
    heartbeats = _first_of_each(e for e in events if e.type == "heartbeat")
    actions = _first_of_each(e for e in events if e.type != "heartbeat")
    stored = expired = 0
    if heartbeats:
        times = [e.time for e in heartbeats]
        expired = sum(1 for t in times if place(t, now, window) is None)
        stored += store_heartbeats(db, bottle_id, key_digest(key_hash), times, now=now, window=window, policy=policy)
    if actions:
        assert registry is not None, "actions need the bottle's registry entry"
        inserts: list[InsertOne[Any] | UpdateOne] = [InsertOne(action_document(registry, e, now)) for e in actions]
        written = write_idempotent(db[schema.BOTTLE_ACTIONS], inserts, policy)
        stored += sum(written)
        repeats = [e for e, new in zip(actions, written, strict=True) if not new]
        reused = _reused_ids(db, bottle_id, repeats, policy) if repeats else set()
        kept = [e for e in actions if e.event_id not in reused]  # only events as they are stored count
        if kept:
            store_status(db, bottle_id, kept, bottle=bottle, dose_history=dose_history, policy=policy)
    return IngestResult(stored=stored, duplicates=len(events) - stored - expired, expired=expired)


_COMPARED = ("action", "time", "mass_of_contents", "number_of_pills", "pills_taken")


def _reused_ids(db: Database[Any], bottle_id: str, repeats: list[DeviceEvent], policy: RetryPolicy) -> set[str]:
    """The event ids among `repeats` (actions already stored) that are stored with other content: an id reused
    for a different event, which changes nothing. A true repeat (a device retry) still re-applies the status,
    which repairs a request that failed after storing its events. One read, only when a request repeats."""
    ids = [f"{bottle_id}|{e.event_id}" for e in repeats]
    found = with_retries(
        lambda: list(db[schema.BOTTLE_ACTIONS].find({"_id": {"$in": ids}, "bottle_id": bottle_id}, _COMPARED)),
        policy,
    )
    stored = {doc["_id"].split("|", 1)[1]: doc for doc in found}
    return {
        e.event_id
        for e in repeats
        if e.event_id not in stored or _content(stored[e.event_id]) != _content(action_document_fields(e))
    }


def _content(document: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(document.get(name) for name in _COMPARED)


def _first_of_each(events: Any) -> list[DeviceEvent]:
    """Drop repeats within one request: a heartbeat of the same instant, an action of the same event_id. (Two
    heartbeats of one 5-minute slot are one heartbeat too: the ring tells, _new_heartbeats.)"""
    seen: dict[Any, DeviceEvent] = {}
    for event in events:
        seen.setdefault(event.time if event.type == "heartbeat" else event.event_id, event)
    return list(seen.values())


def store_heartbeats(
    db: Database[Any],
    bottle_id: str,
    key: Binary,
    times: list[datetime],
    *,
    now: datetime,
    window: Window,
    policy: RetryPolicy,
) -> int:
    """Store a request's heartbeats in the bottle's heartbeat document; how many were new (a heartbeat older
    than the window is not: it has no slot in the ring).

    One write, whatever their number, and nothing read: its filter is the whole check (the device's key must be
    the bottle's, and the ring's last write recent enough for the ring to be kept clean in place). In the common
    case, heartbeats newer than any the bottle sent before, it is an update whose filter says so too (`_fresh`):
    every heartbeat is then new, and no reply is needed. Otherwise (a repeat, one sent out of order, a wrong key,
    a long silence) that update matches nothing, and a findAndModify with the same write follows: its reply, the
    ring as it was, tells a new heartbeat (its slot's bit was not set) from a repeat. (A bit test in the filter
    would save the reply, but Cosmos DB has no bit-test query operators, and an `$expr` on a 64-bit field may be
    evaluated in floating point, which loses the low bits.) When that matches nothing too, one read tells a
    wrong key or an unknown bottle (401) from a bottle silent for more than MAX_GAP_HOURS, whose ring is then
    written whole, guarded by the read."""
    placements = [place(t, now, window) for t in times]
    placed = [p for p in placements if p is not None]
    guard, update = ring_write(bottle_id, key, times, placed, now=now, window=window)
    collection: Collection[HeartbeatDocument] = db[schema.BOTTLE_HEARTBEATS]
    fresh = _fresh(guard, times)
    if with_retries(lambda: collection.update_one(fresh, update), policy).matched_count == 1:
        return _new_heartbeats({}, placements)

    def ring_round() -> int | Literal[Round.AGAIN]:
        before = with_retries(
            lambda: collection.find_one_and_update(
                guard, update, projection={RING: 1, RING_TIME: 1, "_id": 0}, return_document=ReturnDocument.BEFORE
            ),
            policy,
        )
        if before is not None:
            return _new_heartbeats(before, placements)
        found = _read_for_key(db, bottle_id, key, policy)
        if _rewrite_after_gap(
            db, bottle_id, key, found, times=times, placed=placed, now=now, window=window, policy=policy
        ):
            return _new_heartbeats(found, placements)
        return AGAIN  # a concurrent write of the ring came between the read and the rewrite

    return until_landed(ring_round, "the heartbeat document", policy)


def _fresh(guard: HeartbeatFilter, times: list[datetime]) -> HeartbeatFilter:
    """The ring write's filter, matching only if every heartbeat of the request is new: `alive_at` (never moved
    back; at least every heartbeat time the bottle stored, and its provisioning time) before the start of the
    earliest one's 5-minute slot, so no stored heartbeat shares a slot with any of them. (Not `last`: a bottle
    that never sent a heartbeat has none, where `alive_at` is set from its provisioning on.) On SecantusDB an
    update whose filter has no top-level operator finds its document by `_id`, where a findAndModify scans the
    collection."""
    return {**guard, ALIVE_AT: {"$lt": slot_start(min(times))}}


def _read_for_key(db: Database[Any], bottle_id: str, key: Binary, policy: RetryPolicy) -> HeartbeatDocument:
    """The heartbeat document, read after a ring write matched nothing; Unauthorized for an unknown bottle or a
    wrong key (the same answer, after the same steps)."""
    collection: Collection[HeartbeatDocument] = db[schema.BOTTLE_HEARTBEATS]
    found = with_retries(lambda: collection.find_one({"_id": bottle_id, "bottle_id": bottle_id}), policy)
    stored_key = bytes((found or {}).get(KEY) or b"\0" * len(key))
    if not compare_digest(stored_key, bytes(key)) or found is None:
        raise Unauthorized(UNAUTHORIZED_MESSAGE)
    return found


def _rewrite_after_gap(
    db: Database[Any],
    bottle_id: str,
    key: Binary,
    found: HeartbeatDocument,
    *,
    times: list[datetime],
    placed: list[Placement],
    now: datetime,
    window: Window,
    policy: RetryPolicy,
) -> bool:
    """The slow way, after a silence of more than MAX_GAP_HOURS: the ring written whole from the document as it
    was read, guarded by it. False if the guard failed (a concurrent write: the caller starts again)."""
    collection: Collection[HeartbeatDocument] = db[schema.BOTTLE_HEARTBEATS]
    update: HeartbeatUpdate = {
        "$set": {RING: rewritten_ring(found, placed, now, window), SILENT_PENDING: True},
        "$max": newest(times, placed, now),
    }
    guard: HeartbeatFilter = {
        "_id": bottle_id,
        "bottle_id": bottle_id,
        KEY: key,
        RING_TIME: found.get(RING_TIME),
        RING: found.get(RING),
    }
    return bool(with_retries(lambda: collection.update_one(guard, update), policy).matched_count == 1)


def _new_heartbeats(before: HeartbeatDocument, placements: list[Placement | None]) -> int:
    """How many of the request's heartbeats were new: not one older than the window (no slot: expired, which
    `ingest_events` counts), nor one whose 5-minute slot the ring had, or another of this request has (a repeat)."""
    new = 0
    seen: set[tuple[int, int]] = set()
    for placement in placements:
        if placement is None:
            continue
        slot = (placement.hour, placement.slot)
        if slot not in seen and not already_counted(before, placement):
            new += 1
        seen.add(slot)
    return new


def action_document(bottle: RegistryEntry, event: DeviceEvent, now: datetime) -> dict[str, Any]:
    """An opened/closed event as stored: the device's readings, the registry's owner and medication."""
    return {
        "_id": f"{bottle.bottle_id}|{event.event_id}",
        "bottle_id": bottle.bottle_id,
        BUCKET_FIELD: bucket_of(bottle.bottle_id),
        "user_id": bottle.user_id,
        "medication": bottle.medication,
        **action_document_fields(event),
        "event_id": event.event_id,
        "received_at": now,
    }


def action_document_fields(event: DeviceEvent) -> dict[str, Any]:
    """What the device said of an opened/closed event, as stored."""
    fields: dict[str, Any] = {
        "mass_of_contents": event.mass_of_contents,
        "number_of_pills": event.number_of_pills,
        "time": event.time,
        "action": event.type,
    }
    if event.type == "closed":
        fields["pills_taken"] = event.pills_taken
    return fields


def store_status(
    db: Database[Any],
    bottle_id: str,
    actions: list[DeviceEvent],
    *,
    bottle: BottleDocument | None,
    dose_history: int,
    policy: RetryPolicy,
) -> None:
    """Bring the bottle's status up to date with these actions (stored ones, retries included): one update.

    Without a dose the write needs nothing read: its filter is the whole condition (`status_writes`). With one,
    it is computed from the bottle as read (`bottle`, or read here) and guarded by that state
    (`computed_status_write`); if another write changed the bottle in between, it matches nothing, and the
    bottle is read again and the write computed again (`until_landed`: a few rounds, then 503; a retry is
    safe). A write already applied (a retry whose first answer was lost, a repeated request) computes to
    nothing, and is not sent."""
    collection = bottle_documents(db)
    if not any(e.is_dose for e in actions):
        for guarded in status_writes(bottle_id, actions):
            if _applied(collection, guarded, policy):
                return
        return
    as_read = bottle  # the request's own read serves the first round only

    def status_round() -> Literal[Round.AGAIN] | None:
        nonlocal as_read
        found = as_read if as_read is not None else read_bottle(db, bottle_id, policy)
        as_read = None
        if found is None:  # bottles are never deleted: nothing to bring up to date
            return None
        write = computed_status_write(found, actions, dose_history=dose_history)
        if write is None or _applied(collection, write, policy):
            return None
        return AGAIN

    until_landed(status_round, "the bottle's status", policy)


def _applied(
    collection: Collection[BottleDocument], write: tuple[BottleFilter, BottleUpdate], policy: RetryPolicy
) -> bool:
    """One guarded update (retried on throttling and faults); whether its filter matched."""
    return bool(with_retries(lambda: collection.update_one(*write), policy).matched_count == 1)


def _latest(actions: list[DeviceEvent]) -> DeviceEvent:
    return max(actions, key=lambda e: action_order(e.time, e.type))


def _status_fields(latest: DeviceEvent) -> BottleDocument:
    """What the latest action sets. `open_pending` tells the left-open check the open/closed state changed
    since it last looked."""
    return {
        "last_action": latest.type,
        "last_action_time": latest.time,
        "open_since": latest.time if latest.type == "opened" else None,
        "open_pending": True,
    }


# Every ingestion write of the status adds one (shared/doses/due_tracking.py), so a write computed from the
# bottle as read applies only if no other ingestion write came in between.
_VERSION: BottleUpdate = {"$inc": {"dose_seq": 1}}


def status_writes(bottle_id: str, actions: list[DeviceEvent]) -> list[tuple[BottleFilter, BottleUpdate]]:
    """The status write of actions without a dose, as (filter, update)s to try in turn until one matches (their
    filters exclude each other): guarded so an older event never moves the status backwards (`action_order`, as
    filters). The first matches a bottle whose last action is older, or which has none; for a close, the second an
    open at the same instant (rare: tried only when the first matched nothing).

    Two filters rather than one with a top-level `$or`: SecantusDB finds the document of a filter without a
    top-level operator by its `_id`, and scans the collection for one with it. `$not` matches a document without
    the field, as MongoDB's does; the API for MongoDB supports it ("Logical operators: $not", Azure Cosmos DB for
    MongoDB, supported features and syntax: https://learn.microsoft.com/azure/cosmos-db/mongodb/feature-support-42)."""
    latest = _latest(actions)
    update: BottleUpdate = {"$set": _status_fields(latest), **_VERSION}
    key: BottleFilter = {"_id": bottle_id, "bottle_id": bottle_id}
    writes: list[tuple[BottleFilter, BottleUpdate]] = [
        ({**key, "last_action_time": {"$not": {"$gte": latest.time}}}, update)
    ]
    if latest.type == "closed":
        writes.append(({**key, "last_action_time": latest.time, "last_action": "opened"}, update))
    return writes


def _moves_status(stored: BottleDocument, latest: DeviceEvent) -> bool:
    """`status_writes`' filters, on the bottle as read."""
    last: datetime | None = stored.get("last_action_time")
    return last is None or action_order(last, stored.get("last_action")) < action_order(latest.time, latest.type)


def computed_status_write(
    stored: BottleDocument, actions: list[DeviceEvent], *, dose_history: int
) -> tuple[BottleFilter, BottleUpdate] | None:
    """The status write of actions with doses, computed from the bottle as read (`stored`): (filter, update),
    or None when the bottle already shows them all (nothing to write).

    The status moves only for an action newer than the stored one (`status_writes`' rule). `last_dose_time` is the
    latest dose. A dose is new when `doses` does not hold it yet: new doses join `doses` (the newest
    `dose_history`, in order) and move the next dose due on (shared/doses/due_tracking.py) in this same write, so
    a dose already in `doses` has been counted, and a retried one never counts twice. The filter is the state
    the write was computed from: `dose_seq` (every ingestion write of the status adds one) and, when the dose
    tracking was computed, the fields the check and provisioning write too (`schedule_from`, `dose_due`,
    `dose_late_at`)."""
    bottle_id = stored["_id"]
    guard: BottleFilter = {"_id": bottle_id, "bottle_id": bottle_id, "dose_seq": stored.get("dose_seq")}
    fields: BottleDocument = {}
    update: BottleUpdate = {}
    latest = _latest(actions)
    if _moves_status(stored, latest):
        fields |= _status_fields(latest)
    doses = sorted({e.time for e in actions if e.is_dose})
    last_dose: datetime | None = stored.get("last_dose_time")
    if doses and (last_dose is None or doses[-1] > last_dose):
        fields["last_dose_time"] = doses[-1]
    known = set(stored.get("doses") or [])
    new = [dose for dose in doses if dose not in known]
    if new:
        update["$push"] = {"doses": {"$each": new, "$sort": 1, "$slice": -dose_history}}
        if stored.get("schedule_from") is not None:  # a bottle provisioned before dose tracking has none
            advance = after_doses(plan_of(stored), stored, new)
            fields |= advance.fields
            if advance.review_from is not None:
                update["$min"] = {"dose_review_from": advance.review_from}
            guard |= {
                "schedule_from": stored.get("schedule_from"),
                "dose_due": stored.get("dose_due"),
                "dose_late_at": stored.get("dose_late_at"),
            }
    if new or "last_dose_time" in fields:
        fields["dose_pending"] = True  # the check's resolve sweep looks at the bottle again
    if not fields and not update:
        return None
    if fields:
        update["$set"] = fields
    return guard, {**update, **_VERSION}
