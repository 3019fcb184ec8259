"""Storing validated device events: idempotent, bulk, and in as few writes as the events allow.

Per request: one bulk update of `bottle_heartbeats` (one op per heartbeat, into the bottle's document),
one bulk insert into `bottle_actions`, and one bulk update of the bottle's status in `bottles`. A request
of heartbeats costs one write; an opened/closed event two; a batch of any size at most three.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pymongo import InsertOne, UpdateOne
from pymongo.database import Database

from shared.bottles.entries import RegistryEntry
from shared.doses.due_tracking import ingestion_updates
from shared.doses.schedules import DosePlan
from shared.heartbeat_document import LATE_KEPT, late_arrival
from shared.ingestion.authentication import confirm_heartbeat_key
from shared.ingestion.events import DeviceEvent
from shared.store import schema
from shared.store.partitioning import BUCKET_FIELD, bucket_of
from shared.store.retries import RetryPolicy, count_matched, with_retries, write_idempotent


@dataclass(frozen=True)
class IngestResult:
    stored: int
    duplicates: int


def ingest_events(
    db: Database[Any],
    bottle_id: str,
    key_hash: str,
    events: list[DeviceEvent],
    *,
    registry: RegistryEntry | None,
    now: datetime,
    policy: RetryPolicy,
    history: int,
    dose_history: int = 32,
) -> IngestResult:
    """Store a request's events; a retried event (same request or a later one) is counted as a duplicate.

    Heartbeats authenticate inside their own write (the key hash is part of the filter), so they need no
    registry entry; actions do (`registry`: their owner and medication are denormalised onto them).
    Writes are ordered so that a failure part-way leaves nothing a retry would not repair: events first,
    then the status derived from all of the request's actions (re-applied on retry, never backwards).
    """
    heartbeats = _first_of_each(e for e in events if e.type == "heartbeat")
    actions = _first_of_each(e for e in events if e.type != "heartbeat")
    stored = 0
    if heartbeats:
        ops = [_heartbeat_update(bottle_id, key_hash, e, now, history) for e in heartbeats]
        matched = count_matched(db[schema.BOTTLE_HEARTBEATS], ops, policy)
        if matched < len(ops):
            confirm_heartbeat_key(db, bottle_id, key_hash, policy)  # a wrong key matched nothing: 401
        stored += matched
    if actions:
        assert registry is not None, "actions need the bottle's registry entry"
        inserts: list[InsertOne[Any] | UpdateOne] = [InsertOne(action_document(registry, e, now)) for e in actions]
        written = write_idempotent(db[schema.BOTTLE_ACTIONS], inserts, policy)
        stored += sum(written)
        repeats = [e for e, new in zip(actions, written, strict=True) if not new]
        reused = _reused_ids(db, bottle_id, repeats, policy) if repeats else set()
        kept = [e for e in actions if e.event_id not in reused]  # only events as they are stored count
        fresh = [e.time for e, new in zip(actions, written, strict=True) if new and e.is_dose]
        if kept:
            updates = status_updates(
                bottle_id, kept, plan=registry.dose_plan, fresh_doses=fresh, dose_history=dose_history
            )
            write_idempotent(db[schema.BOTTLES], updates, policy)
    return IngestResult(stored=stored, duplicates=len(events) - stored)


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
    """Drop repeats within one request: a heartbeat is its instant, an action its event_id."""
    seen: dict[Any, DeviceEvent] = {}
    for event in events:
        seen.setdefault(event.time if event.type == "heartbeat" else event.event_id, event)
    return list(seen.values())


def _heartbeat_update(bottle_id: str, key_hash: str, event: DeviceEvent, now: datetime, history: int) -> UpdateOne:
    """One heartbeat into the bottle's heartbeat document (created at provisioning): `last` and
    `alive_at` move forward only, `times` keeps the newest `history` instants in order, and a late
    heartbeat is listed in `late` with its arrival, for the report consumer (shared/heartbeat_document.py).

    The filter is the whole check: the device's key hash must be the bottle's, and `$ne` makes a
    repeated heartbeat match nothing. One write, no read, on the hot path."""
    push: dict[str, Any] = {"times": {"$each": [event.time], "$sort": 1, "$slice": -history}}
    late = late_arrival(event.time, now)
    if late is not None:
        push["late"] = {"$each": [late], "$slice": -LATE_KEPT}
    return UpdateOne(
        {"_id": bottle_id, "bottle_id": bottle_id, "key_hash": key_hash, "times": {"$ne": event.time}},
        {
            "$push": push,
            "$max": {"last": event.time, "alive_at": event.time},
            # silent_pending: the silent check has yet to look at this bottle's (possibly new) `alive_at`.
            "$set": {"received_at": now, "silent_pending": True},
        },
    )


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


def status_updates(
    bottle_id: str,
    actions: list[DeviceEvent],
    *,
    plan: DosePlan | None = None,
    fresh_doses: Sequence[datetime] = (),
    dose_history: int = 32,
) -> list[InsertOne[Any] | UpdateOne]:
    """The bottle's status after these actions, guarded so an older event never moves it backwards.

    `open_pending` tells the left-open check the open/closed state changed since it last looked; the dose
    ops keep the next dose due current (shared/doses/due_tracking.py). All of it is one bulk write."""
    # At the same instant a close sorts after an open, in one request or across several in any order: the
    # bottle ends closed.
    latest = max(actions, key=lambda e: (e.time, e.type == "closed"))
    key = {"_id": bottle_id, "bottle_id": bottle_id}
    newer: list[dict[str, Any]] = [{"last_action_time": None}, {"last_action_time": {"$lt": latest.time}}]
    if latest.type == "closed":
        newer.append({"last_action_time": latest.time, "last_action": "opened"})
    updates: list[InsertOne[Any] | UpdateOne] = [
        UpdateOne(
            {**key, "$or": newer},
            {
                "$set": {
                    "last_action": latest.type,
                    "last_action_time": latest.time,
                    "open_since": latest.time if latest.type == "opened" else None,
                    "open_pending": True,
                }
            },
        )
    ]
    doses = [e.time for e in actions if e.is_dose]
    if doses:
        updates.append(UpdateOne(key, {"$max": {"last_dose_time": max(doses)}, "$set": {"dose_pending": True}}))
        updates += ingestion_updates(bottle_id, plan, doses, fresh_doses, dose_history)
    return updates
