"""Provisioning a bottle (PUT /api/bottles/{bottle_id}): create or update its registry entry, issue or rotate
its device key, restart its dose tracking when the schedule changes, and keep its heartbeat document in step."""

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Literal

from pymongo import ReturnDocument
from pymongo.collection import Collection
from pymongo.database import Database
from pymongo.errors import DuplicateKeyError

from shared.bottles.entries import bottle_documents
from shared.bottles.spec import BottleSpec
from shared.bottles.status import registry_view
from shared.devices.device_keys import hash_key, new_device_key
from shared.devices.device_time import MAX_FUTURE_SKEW
from shared.devices.heartbeat_document import (
    ALIVE_AT,
    KEY,
    KEY_VERSION,
    OWNERS,
    RING,
    RING_TIME,
    SILENT_PENDING,
    USER_BUCKET,
    HeartbeatDocument,
    HeartbeatFilter,
    HeartbeatUpdate,
    Owner,
    Window,
    hour_number,
    key_digest,
    rewritten_ring,
)
from shared.doses.bottle_document import BottleDocument, BottleFilter, BottleUpdate
from shared.doses.due_tracking import initial_fields
from shared.doses.schedules import DosePlan
from shared.settings import Settings
from shared.store import schema
from shared.store.optimistic import AGAIN, Round, until_landed
from shared.store.partitioning import BUCKET_FIELD, bucket_of
from shared.store.retries import RetryPolicy, StoreUnavailable, with_retries

# The bottle's key version: 1 at the create, one more at each rotation, changed in the same write as `key_hash`.
# The heartbeat document's copy of the key carries the version it was copied at, and only a newer one replaces it.
KEY_VERSION_FIELD: Final = "key_version"


@dataclass(frozen=True)
class Provisioned:
    created: bool
    bottle: dict[str, Any]  # as the API shows it (registry_view)
    device_key: str | None  # only on create or rotation: shown once, never stored


def provision(
    db: Database[Any], bottle_id: str, spec: BottleSpec, *, rotate_key: bool, now: datetime, settings: Settings
) -> Provisioned:
    """Create a bottle with one insert guarded by its unique `_id`, or update it. A new bottle, or a
    rotation, gets a fresh key. Of concurrent creates exactly one inserts, answers `created` and holds the
    key; the others update the bottle it made and get no key (an upsert is not atomic on every store).

    A PUT that asks for what is stored already (a retry), its bottle and heartbeat document read first, writes
    nothing and answers the bottle as stored, `updated_at` that of its last change: a retry changes nothing. Any
    difference, or a rotation, goes the whole way, every write guarded as before."""
    policy = RetryPolicy.for_request(settings)
    device_key = new_device_key()
    registry: BottleDocument = {
        "user_id": spec.user_id,
        "medication": spec.medication,
        "schedule": spec.schedule.model_dump(),
        "grace_minutes": spec.grace_minutes,
        "updated_at": now,
    }
    key_hash = hash_key(device_key)
    # Status fields start absent: `$max` (last_dose_time) treats a missing field as "no value yet".
    new_bottle: BottleDocument = {
        "_id": bottle_id,
        "bottle_id": bottle_id,
        **registry,
        "provisioned_at": now,
        **initial_fields(DosePlan(spec.schedule, spec.grace, now)),
        "key_hash": key_hash,
        KEY_VERSION_FIELD: 1,
        # The checks sweep bottles one bucket range (partition) at a time (shared/notifications/checks/).
        BUCKET_FIELD: bucket_of(bottle_id),
    }
    point: BottleFilter = {"_id": bottle_id, "bottle_id": bottle_id}
    stored = with_retries(lambda: bottle_documents(db).find_one(point, _REGISTRY_READ), policy)
    if (
        stored is not None
        and not rotate_key
        and _registry_unchanged(stored, registry)
        and _heartbeat_document_in_step(db, bottle_id, spec, stored.get(KEY_VERSION_FIELD, 0), policy)
    ):
        # What the PUT asks for is stored already (a retry, or the same PUT again): nothing is written, not even
        # `updated_at`, and the answer is the bottle as stored.
        return Provisioned(created=False, bottle=registry_view(stored), device_key=None)
    created = stored is None and with_retries(lambda: _insert_new(db, new_bottle), policy)
    after: BottleDocument
    if created:
        after = new_bottle
    else:
        # `bucket` too: a bottle stored before the checks swept by bucket gets it with its next PUT.
        update: BottleUpdate = {"$set": {**registry, BUCKET_FIELD: bucket_of(bottle_id)}}
        before = with_retries(
            lambda: bottle_documents(db).find_one_and_update(point, update, return_document=ReturnDocument.BEFORE),
            policy,
        )
        if before is None:  # bottles are never deleted: only a store that lost the bottle gets here
            met = "insert" if stored is None else "read"
            raise StoreUnavailable(f"the bottle was not found after its {met}; retry", policy.contended_retry_after())
        # Our own insert, applied by an attempt whose answer was lost: still a create, and this key is its key.
        created = before.get("key_hash") == key_hash and before.get("provisioned_at") == now
        if not created and _schedule_changed(before, registry):
            _restart_schedule(db, bottle_id, DosePlan(spec.schedule, spec.grace, now), before, policy)
        after = {**before, **registry}
        if rotate_key:
            after |= _rotate(db, bottle_id, key_hash, now=now, policy=policy)
    window = Window(settings.heartbeat_window_hours)
    key = VersionedKey(after["key_hash"], after.get(KEY_VERSION_FIELD, 0))  # a bottle stored before versions: 0
    _sync_heartbeat_document(db, bottle_id, spec, now=now, key=key, window=window, policy=policy)
    return Provisioned(
        created=created,
        bottle=registry_view(after),
        device_key=device_key if created or rotate_key else None,
    )


# What a PUT reads of a bottle first: whether the registry is already as asked, and the answer if it is.
_REGISTRY_READ = dict.fromkeys(
    (
        "user_id",
        "medication",
        "schedule",
        "grace_minutes",
        "provisioned_at",
        "updated_at",
        BUCKET_FIELD,
        KEY_VERSION_FIELD,
    ),
    1,
)


def _registry_unchanged(stored: BottleDocument, registry: BottleDocument) -> bool:
    """Whether the bottle as read already holds every registry field a PUT would write (`updated_at` aside), and
    its bucket (which a PUT adds to a bottle stored before the checks swept by bucket)."""
    return all(stored.get(name) == value for name, value in registry.items() if name != "updated_at") and stored.get(
        BUCKET_FIELD
    ) == bucket_of(stored["_id"])


def _heartbeat_document_in_step(
    db: Database[Any], bottle_id: str, spec: BottleSpec, key_version: int, policy: RetryPolicy
) -> bool:
    """Whether the bottle's heartbeat document already holds what `_sync_heartbeat_document` would write for this
    spec (its owner, medication and bucket, a key at least as new as the bottle's, none of the earlier layout's
    fields), so that the sync would change nothing. One point read; False if there is no document yet (a PUT
    interrupted before it made one: the PUT goes the whole way, as the first one would have)."""
    collection: Collection[HeartbeatDocument] = db[schema.BOTTLE_HEARTBEATS]
    projection = dict.fromkeys(("user_id", "medication", BUCKET_FIELD, KEY_VERSION, *_FORMER_FIELDS), 1)
    found = with_retries(lambda: collection.find_one({"_id": bottle_id, "bottle_id": bottle_id}, projection), policy)
    return bool(
        found is not None
        and found.get("user_id") == spec.user_id
        and found.get("medication") == spec.medication
        and found.get(BUCKET_FIELD) == bucket_of(bottle_id)
        and found.get(KEY_VERSION, -1) >= key_version
        and not any(name in found for name in _FORMER_FIELDS)
    )


def _rotate(db: Database[Any], bottle_id: str, key_hash: str, *, now: datetime, policy: RetryPolicy) -> BottleDocument:
    """Give the bottle a new key and the next key version, in one write; the key and version as it left them.

    The version is read from the write's own after-image: every rotation gets its own, and the newest key has the
    highest. (A version computed from a before-image plus one is not safe: SecantusDB's findAndModify may answer,
    under concurrency, a before-image older than the document it updated, so two rotations got one version.)
    Cosmos DB for MongoDB supports `findAndModify` and `$inc` ("Database commands" and "Update operators" in
    https://learn.microsoft.com/azure/cosmos-db/mongodb/feature-support-40)."""
    update: BottleUpdate = {"$set": {"key_hash": key_hash, "key_rotated_at": now}, "$inc": {KEY_VERSION_FIELD: 1}}
    key: BottleFilter = {"_id": bottle_id, "bottle_id": bottle_id}
    after = with_retries(
        lambda: bottle_documents(db).find_one_and_update(
            key,
            update,
            projection={"key_hash": 1, "key_rotated_at": 1, KEY_VERSION_FIELD: 1, "_id": 0},
            return_document=ReturnDocument.AFTER,
        ),
        policy,
    )
    if after is None:  # bottles are never deleted: only a store that lost the bottle gets here
        raise StoreUnavailable(
            "the bottle was not found during its key rotation; retry", policy.contended_retry_after()
        )
    return after


def _insert_new(db: Database[Any], bottle: BottleDocument) -> bool:
    """Insert a new bottle; False if one with its `_id` exists (the unique `_id` decides between racers)."""
    try:
        bottle_documents(db).insert_one(bottle)
    except DuplicateKeyError:
        return False
    return True


def _schedule_changed(before: BottleDocument, registry: BottleDocument) -> bool:
    return bool(
        before.get("schedule") != registry["schedule"] or before.get("grace_minutes") != registry["grace_minutes"]
    )


def _restart_schedule(
    db: Database[Any], bottle_id: str, plan: DosePlan, before: BottleDocument, policy: RetryPolicy
) -> None:
    """A changed schedule (or grace) takes effect now: slots before the change are never late under it."""
    key: BottleFilter = {"_id": bottle_id, "bottle_id": bottle_id}
    update: BottleUpdate = {"$set": initial_fields(plan, before.get("doses", []))}
    with_retries(lambda: bottle_documents(db).update_one(key, update), policy)


@dataclass(frozen=True)
class VersionedKey:
    """A bottle's key hash as its registry write left it, and the key version that write gave it."""

    key_hash: str
    version: int


# Fields of the heartbeat document's earlier layout, dropped when a bottle is provisioned again (a migration). Not
# `last`: the newest heartbeat then as now (ring writes `$max` it), which the bottle's status shows.
_FORMER_FIELDS = ("times", "late", "key_hash", "received_at")
_OWNERSHIP = {"user_id": 1, OWNERS: 1, RING: 1, RING_TIME: 1}
_SYNCED = {**_OWNERSHIP, KEY_VERSION: 1}


def _sync_heartbeat_document(
    db: Database[Any],
    bottle_id: str,
    spec: BottleSpec,
    *,
    now: datetime,
    key: VersionedKey,
    window: Window,
    policy: RetryPolicy,
) -> None:
    """Create the bottle's heartbeat document with `alive_at` = provisioning time (a bottle that never
    sends a heartbeat is silent from then on), and keep its medication and key current: one write.

    The key is here so that a heartbeat authenticates inside its own write (shared/ingestion/): the hot path
    never reads the registry. A PUT copies the key its own registry write left, which a concurrent rotation may
    have replaced since, so the copy is written with its version, and never over a newer one (`_copy_key`). A new
    owner is recorded by a second write (below)."""
    collection: Collection[HeartbeatDocument] = db[schema.BOTTLE_HEARTBEATS]
    update: HeartbeatUpdate = {
        "$set": {"medication": spec.medication, BUCKET_FIELD: bucket_of(bottle_id)},
        # silent_pending: the silent check has yet to look at this `alive_at` (shared/notifications/checks/rules.py).
        "$setOnInsert": {
            KEY: key_digest(key.key_hash),
            KEY_VERSION: key.version,
            "user_id": spec.user_id,
            USER_BUCKET: bucket_of(spec.user_id),
            ALIVE_AT: now,
            SILENT_PENDING: True,
            RING_TIME: now,
        },
        "$unset": dict.fromkeys(_FORMER_FIELDS, ""),
    }

    def upsert() -> HeartbeatDocument | Literal[Round.AGAIN]:
        """The document after the upsert; AGAIN where a concurrent PUT's create won the race (a duplicate key,
        or, on some stores, an upsert that answers no document): it exists now, and the next round updates it."""
        try:
            found = with_retries(
                lambda: collection.find_one_and_update(
                    {"_id": bottle_id, "bottle_id": bottle_id},
                    update,
                    projection=_SYNCED,
                    upsert=True,
                    return_document=ReturnDocument.AFTER,
                ),
                policy,
            )
        except DuplicateKeyError:
            return AGAIN
        return AGAIN if found is None else found

    document = until_landed(upsert, "the heartbeat document", policy)
    if document.get(KEY_VERSION, -1) < key.version:
        _copy_key(collection, bottle_id, key, policy)
    if document["user_id"] != spec.user_id:
        _reassign(collection, bottle_id, document, spec.user_id, now=now, window=window, policy=policy)


def _copy_key(
    collection: Collection[HeartbeatDocument], bottle_id: str, key: VersionedKey, policy: RetryPolicy
) -> None:
    """Write the key into the heartbeat document unless it holds the same or a newer version: a PUT that read the
    bottle before a rotation (and so holds the old key) cannot put it back after the rotation's copy. Matching
    nothing is the newer copy winning; a copy of the earlier layout has no version and is replaced."""
    older: HeartbeatFilter = {"$or": [{KEY_VERSION: {"$lt": key.version}}, {KEY_VERSION: {"$exists": False}}]}
    guard: HeartbeatFilter = {"_id": bottle_id, "bottle_id": bottle_id, **older}
    copied: HeartbeatUpdate = {"$set": {KEY: key_digest(key.key_hash), KEY_VERSION: key.version}}
    with_retries(
        lambda: collection.update_one(guard, copied),
        policy,
    )


def _reassign(
    collection: Collection[HeartbeatDocument],
    bottle_id: str,
    document: HeartbeatDocument,
    user_id: str,
    *,
    now: datetime,
    window: Window,
    policy: RetryPolicy,
) -> None:
    """Record that `user_id` owns the bottle from `now`, so the reports count each heartbeat for whoever owned
    the bottle at its time: a reassigned bottle's earlier heartbeats stay with its earlier owner.

    The earlier owner goes to `owners` ([{user_id, until}], oldest first), which keeps only those that may own a
    heartbeat of the window (ring writes drop the others); `ub` follows the owner, so the tally finds the bottle
    under its new owner. The write moves `r` on, and so writes the ring as ring writes do; it is guarded by what
    it read, and a retried PUT finds the owner already recorded."""
    key: HeartbeatFilter = {"_id": bottle_id, "bottle_id": bottle_id}
    as_read: HeartbeatDocument | None = document

    def reassign_round() -> Literal[Round.AGAIN] | None:
        nonlocal as_read
        current = as_read if as_read is not None else with_retries(lambda: collection.find_one(key, _OWNERSHIP), policy)
        as_read = None
        if current is None or current["user_id"] == user_id:  # already recorded (a retried PUT, a racing one)
            return None
        oldest = window.start(hour_number(now)) - MAX_FUTURE_SKEW
        earlier: list[Owner] = [o for o in current.get(OWNERS) or [] if o["until"] > oldest]
        earlier.append({"user_id": current["user_id"], "until": now})
        fields: HeartbeatDocument = {
            "user_id": user_id,
            USER_BUCKET: bucket_of(user_id),
            OWNERS: earlier,
            RING: rewritten_ring(current, [], now, window),
            RING_TIME: max(now, current.get(RING_TIME) or now),
        }
        # The ownership as read (_OWNERSHIP's fields, in its order).
        guard: HeartbeatFilter = {
            **key,
            "user_id": current.get("user_id"),
            OWNERS: current.get(OWNERS),
            RING: current.get(RING),
            RING_TIME: current.get(RING_TIME),
        }
        update: HeartbeatUpdate = {"$set": fields}
        if with_retries(lambda: collection.update_one(guard, update), policy).matched_count == 1:
            return None
        return AGAIN

    until_landed(reassign_round, "the heartbeat document", policy)
