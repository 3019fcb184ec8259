"""Provisioning a bottle (PUT /api/bottles/{bottle_id}): create or update its registry entry, issue or rotate
its device key, restart its dose tracking when the schedule changes, and keep its heartbeat document in step."""

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pymongo import ReturnDocument, UpdateOne
from pymongo.database import Database
from pymongo.errors import DuplicateKeyError

from shared.bottles.entries import forget_entry
from shared.bottles.spec import BottleSpec
from shared.bottles.status import registry_view
from shared.device_keys import hash_key, new_device_key
from shared.doses.due_tracking import initial_fields
from shared.doses.schedules import DosePlan
from shared.heartbeat_document import MAX_OWNERS
from shared.settings import Settings
from shared.store import schema
from shared.store.partitioning import BUCKET_FIELD, bucket_of
from shared.store.retries import RetryPolicy, StoreUnavailable, with_retries


@dataclass(frozen=True)
class Provisioned:
    created: bool
    bottle: dict[str, Any]
    device_key: str | None  # only on create or rotation: shown once, never stored


def provision(
    db: Database[Any], bottle_id: str, spec: BottleSpec, *, rotate_key: bool, now: datetime, settings: Settings
) -> Provisioned:
    """Create a bottle with one insert guarded by its unique `_id`, or update it. A new bottle, or a
    rotation, gets a fresh key. Of concurrent creates exactly one inserts, answers `created` and holds the
    key; the others update the bottle it made and get no key (an upsert is not atomic on every store)."""
    policy = RetryPolicy.for_request(settings)
    device_key = new_device_key()
    registry = {
        "user_id": spec.user_id,
        "medication": spec.medication,
        "schedule": spec.schedule.model_dump(),
        "grace_minutes": spec.grace_minutes,
        "updated_at": now,
    }
    key_hash = hash_key(device_key)
    # Status fields start absent: `$max` (last_dose_time) treats a missing field as "no value yet".
    new_bottle = {
        "_id": bottle_id,
        "bottle_id": bottle_id,
        **registry,
        "provisioned_at": now,
        **initial_fields(DosePlan(spec.schedule, spec.grace, now)),
        "key_hash": key_hash,
        # The checks sweep bottles one bucket range (partition) at a time (shared/notifications/checks.py).
        BUCKET_FIELD: bucket_of(bottle_id),
    }
    created = with_retries(lambda: _insert_new(db, new_bottle), policy)
    if created:
        after = new_bottle
    else:
        if rotate_key:
            registry |= {"key_hash": key_hash, "key_rotated_at": now}
        # `bucket` too: a bottle stored before the checks swept by bucket gets it with its next PUT.
        update = {"$set": {**registry, BUCKET_FIELD: bucket_of(bottle_id)}}
        before = with_retries(
            lambda: db[schema.BOTTLES].find_one_and_update(
                {"_id": bottle_id, "bottle_id": bottle_id}, update, return_document=ReturnDocument.BEFORE
            ),
            policy,
        )
        if before is None:  # bottles are never deleted: only a store that lost the insert gets here
            raise StoreUnavailable("the bottle was not found after its insert; retry", retry_after_s=1)
        # Our own insert, applied by an attempt whose answer was lost: still a create, and this key is its key.
        created = before.get("key_hash") == key_hash and before.get("provisioned_at") == now
        if not created and _schedule_changed(before, registry):
            _restart_schedule(db, bottle_id, DosePlan(spec.schedule, spec.grace, now), before, policy)
        after = {**before, **registry}
    with_retries(lambda: _sync_heartbeat_document(db, bottle_id, spec, now, after["key_hash"]), policy)
    forget_entry(bottle_id)
    return Provisioned(
        created=created,
        bottle=registry_view(after),
        device_key=device_key if created or rotate_key else None,
    )


def _insert_new(db: Database[Any], bottle: dict[str, Any]) -> bool:
    """Insert a new bottle; False if one with its `_id` exists (the unique `_id` decides between racers)."""
    try:
        db[schema.BOTTLES].insert_one(bottle)
    except DuplicateKeyError:
        return False
    return True


def _schedule_changed(before: dict[str, Any], registry: dict[str, Any]) -> bool:
    return bool(
        before.get("schedule") != registry["schedule"] or before.get("grace_minutes") != registry["grace_minutes"]
    )


def _restart_schedule(
    db: Database[Any], bottle_id: str, plan: DosePlan, before: dict[str, Any], policy: RetryPolicy
) -> None:
    """A changed schedule (or grace) takes effect now: slots before the change are never late under it."""
    fields = initial_fields(plan, before.get("doses", []))
    with_retries(
        lambda: db[schema.BOTTLES].update_one({"_id": bottle_id, "bottle_id": bottle_id}, {"$set": fields}), policy
    )


def _sync_heartbeat_document(db: Database[Any], bottle_id: str, spec: BottleSpec, now: datetime, key_hash: str) -> None:
    """Create the bottle's heartbeat document with `alive_at` = provisioning time (a bottle that never
    sends a heartbeat is silent from then on), and keep its owner, medication and key hash current.

    The key hash is here so that a heartbeat authenticates inside its own write (shared/ingestion/):
    the hot path never reads the registry.

    `owners` records who owned the bottle from when, so the reports count each heartbeat time for the user
    who owned the bottle then: a reassigned bottle's earlier heartbeats stay with its earlier owner. The
    first op only matches a reassignment, so a retried PUT never records it twice."""
    key = {"_id": bottle_id, "bottle_id": bottle_id}
    owner = {"user_id": spec.user_id, "since": now}
    db[schema.BOTTLE_HEARTBEATS].bulk_write(
        [
            UpdateOne(
                {**key, "user_id": {"$ne": spec.user_id}},
                # received_at: the reports' polling source reads by it, and a reassignment moves heartbeats.
                {
                    "$set": {"user_id": spec.user_id, "received_at": now},
                    "$push": {"owners": {"$each": [owner], "$slice": -MAX_OWNERS}},
                },
            ),
            UpdateOne(
                key,
                {
                    "$set": {
                        "user_id": spec.user_id,
                        "medication": spec.medication,
                        "key_hash": key_hash,
                        BUCKET_FIELD: bucket_of(bottle_id),
                    },
                    # silent_pending: the silent check is yet to look at this `alive_at` (notifications.checks).
                    "$setOnInsert": {"alive_at": now, "silent_pending": True, "times": [], "owners": [owner]},
                },
                upsert=True,
            ),
        ],
        ordered=True,
    )
