"""The bottle registry: provisioning, device keys, device authentication (cached) and the status view."""

import hashlib
import hmac
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, TypeAdapter, ValidationError
from pydantic_core import ErrorDetails
from pymongo import ReturnDocument, UpdateOne
from pymongo.database import Database

from shared import schema
from shared.cosmos import RetryPolicy, with_retries
from shared.dose_status import initial_fields, plan_of
from shared.errors import BadRequest, NotFound, Unauthorized, first_per_field, plain_message
from shared.instants import format_instant
from shared.schedules import DosePlan, Schedule

ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
Identifier = Annotated[StrictStr, Field(pattern=ID_PATTERN)]
_ID = TypeAdapter(Identifier)
UNAUTHORIZED_MESSAGE = "unknown bottle or wrong device key"
MAX_KEY_LENGTH = 256


class BottleSpec(BaseModel):
    """The provisioning body of PUT /api/bottles/{bottle_id}."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    user_id: Identifier
    medication: Annotated[StrictStr, Field(min_length=1, max_length=200)]
    schedule: Schedule
    grace_minutes: Annotated[StrictInt, Field(ge=1, le=720)] = 60

    @property
    def grace(self) -> timedelta:
        return timedelta(minutes=self.grace_minutes)


def check_id(value: str, field: str) -> str:
    """Ids are 1-64 characters of [A-Za-z0-9_-]; BadRequest naming the field otherwise."""
    try:
        return str(_ID.validate_python(value))
    except ValidationError:
        raise BadRequest(
            f"invalid {field}", [{"field": field, "message": "must be 1-64 characters of A-Z, a-z, 0-9, '_', '-'"}]
        ) from None


def parse_bottle_spec(payload: Any) -> BottleSpec:
    if isinstance(payload, dict) and isinstance(payload.get("medication"), str):
        payload = {**payload, "medication": payload["medication"].strip()}
    try:
        return BottleSpec.model_validate(payload)
    except ValidationError as error:
        details = [{"field": _field_path(e["loc"]) or None, "message": _spec_message(e)} for e in error.errors()]
        raise BadRequest("invalid bottle: nothing was stored", first_per_field(details)) from None


def _field_path(loc: tuple[int | str, ...]) -> str:
    if loc[:1] == ("schedule",) and len(loc) > 1:
        loc = loc[:1] + loc[2:]  # drop the discriminator's tag ("times" or "every_hours")
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else part)
    return path


def _spec_message(error: ErrorDetails) -> str:
    if error["type"] == "string_pattern_mismatch" and error["loc"][0] == "user_id":
        return "must be 1-64 characters of A-Z, a-z, 0-9, '_', '-'"
    if error["type"] == "string_pattern_mismatch":
        return "must be a 24-hour local time HH:MM"
    return plain_message(error)


def hash_key(device_key: str) -> str:
    # Keys are 256 random bits, so a fast hash is enough: there is no dictionary to attack.
    return hashlib.sha256(device_key.encode()).hexdigest()


def new_device_key() -> str:
    return secrets.token_urlsafe(32)


@dataclass(frozen=True)
class RegistryEntry:
    """What ingestion needs to know about a bottle; cached per worker."""

    bottle_id: str
    user_id: str
    medication: str
    key_hash: str
    dose_plan: DosePlan | None = None  # what ingestion needs to keep the next dose due current

    def accepts(self, device_key: str) -> bool:
        return hmac.compare_digest(self.key_hash, hash_key(device_key))


class RegistryCache:
    """A small LRU of registry entries with a time-to-live, shared by the threads of one worker."""

    def __init__(self, max_entries: int = 100_000, clock: Callable[[], float] = time.monotonic) -> None:
        self._entries: OrderedDict[str, tuple[float, RegistryEntry]] = OrderedDict()
        self._lock = threading.Lock()
        self._max = max_entries
        self._clock = clock

    def get(self, bottle_id: str) -> RegistryEntry | None:
        with self._lock:
            found = self._entries.get(bottle_id)
            if found is None:
                return None
            if found[0] <= self._clock():
                del self._entries[bottle_id]
                return None
            self._entries.move_to_end(bottle_id)
            return found[1]

    def put(self, entry: RegistryEntry, ttl_s: float) -> None:
        if ttl_s <= 0:
            return
        with self._lock:
            self._entries[entry.bottle_id] = (self._clock() + ttl_s, entry)
            self._entries.move_to_end(entry.bottle_id)
            while len(self._entries) > self._max:
                self._entries.popitem(last=False)

    def forget(self, bottle_id: str) -> None:
        with self._lock:
            self._entries.pop(bottle_id, None)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


REGISTRY_CACHE = RegistryCache()

_ENTRY_FIELDS = {
    "user_id": 1,
    "medication": 1,
    "key_hash": 1,
    "schedule": 1,
    "grace_minutes": 1,
    "provisioned_at": 1,
    "schedule_from": 1,
}


def check_key_shape(device_key: str | None) -> str:
    """A key worth hashing, or Unauthorized without touching the database."""
    if not device_key or len(device_key) > MAX_KEY_LENGTH:
        raise Unauthorized(UNAUTHORIZED_MESSAGE)
    return device_key


def confirm_heartbeat_key(db: Database[Any], bottle_id: str, key_hash: str, policy: RetryPolicy) -> None:
    """Unauthorized unless the bottle exists and `key_hash` is its key: the check heartbeats need only
    when one of their guarded writes matched nothing (a repeat, or a wrong key: the write cannot tell)."""
    found = with_retries(
        lambda: db[schema.BOTTLE_HEARTBEATS].find_one({"_id": bottle_id, "bottle_id": bottle_id}, {"key_hash": 1}),
        policy,
    )
    if found is None or not hmac.compare_digest(str(found.get("key_hash", "")), key_hash):
        REGISTRY_CACHE.forget(bottle_id)  # a cached entry accepted a key the bottle no longer has
        raise Unauthorized(UNAUTHORIZED_MESSAGE)


def authenticate(
    db: Database[Any], bottle_id: str, device_key: str | None, cache_ttl_s: float, policy: RetryPolicy
) -> RegistryEntry:
    """The registry entry of a bottle whose device presented the right key; Unauthorized otherwise.

    Served from the worker's cache when it can be; a key the cached entry rejects is checked against
    the database once (the key may just have been rotated on another worker)."""
    device_key = check_key_shape(device_key)
    cached = REGISTRY_CACHE.get(bottle_id)
    if cached is not None and cached.accepts(device_key):
        return cached
    found = with_retries(
        lambda: db[schema.BOTTLES].find_one({"_id": bottle_id, "bottle_id": bottle_id}, _ENTRY_FIELDS), policy
    )
    if found is None:
        REGISTRY_CACHE.forget(bottle_id)
        raise Unauthorized(UNAUTHORIZED_MESSAGE)
    plan = plan_of(found) if "schedule_from" in found else None
    entry = RegistryEntry(bottle_id, found["user_id"], found["medication"], found["key_hash"], plan)
    REGISTRY_CACHE.put(entry, cache_ttl_s)
    if not entry.accepts(device_key):
        raise Unauthorized(UNAUTHORIZED_MESSAGE)
    return entry


@dataclass(frozen=True)
class Provisioned:
    created: bool
    bottle: dict[str, Any]
    device_key: str | None  # only on create or rotation: shown once, never stored


def provision(
    db: Database[Any], bottle_id: str, spec: BottleSpec, *, rotate_key: bool, now: datetime, policy: RetryPolicy
) -> Provisioned:
    """Create or update a bottle in one atomic upsert. A new bottle, or a rotation, gets a fresh key."""
    device_key = new_device_key()
    registry = {
        "user_id": spec.user_id,
        "medication": spec.medication,
        "schedule": spec.schedule.model_dump(),
        "grace_minutes": spec.grace_minutes,
        "updated_at": now,
    }
    # Status fields start absent: `$max` (last_dose_time) treats a missing field as "no value yet".
    on_insert: dict[str, Any] = {"provisioned_at": now, **initial_fields(DosePlan(spec.schedule, spec.grace, now))}
    if rotate_key:
        registry |= {"key_hash": hash_key(device_key), "key_rotated_at": now}
    else:
        on_insert["key_hash"] = hash_key(device_key)
    before = with_retries(
        lambda: db[schema.BOTTLES].find_one_and_update(
            {"_id": bottle_id, "bottle_id": bottle_id},
            {"$set": registry, "$setOnInsert": on_insert},
            upsert=True,
            return_document=ReturnDocument.BEFORE,
        ),
        policy,
    )
    created = before is None
    if before is not None and _schedule_changed(before, registry):
        _restart_schedule(db, bottle_id, DosePlan(spec.schedule, spec.grace, now), before, policy)
    after = {**(before or on_insert), "_id": bottle_id, **registry}
    with_retries(lambda: _sync_heartbeat_document(db, bottle_id, spec, now, after["key_hash"]), policy)
    REGISTRY_CACHE.forget(bottle_id)
    return Provisioned(
        created=created,
        bottle=registry_view(after),
        device_key=device_key if created or rotate_key else None,
    )


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


# Ownership changes kept on a heartbeat document (reassignments are rare operations events).
MAX_OWNERS = 50


def _sync_heartbeat_document(db: Database[Any], bottle_id: str, spec: BottleSpec, now: datetime, key_hash: str) -> None:
    """Create the bottle's heartbeat document with `alive_at` = provisioning time (a bottle that never
    sends a heartbeat is silent from then on), and keep its owner, medication and key hash current.

    The key hash is here so that a heartbeat authenticates inside its own write (shared/ingestion.py):
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
                    "$set": {"user_id": spec.user_id, "medication": spec.medication, "key_hash": key_hash},
                    # silent_pending: the silent check has yet to look at this `alive_at` (shared/checks.py).
                    "$setOnInsert": {"alive_at": now, "silent_pending": True, "times": [], "owners": [owner]},
                },
                upsert=True,
            ),
        ],
        ordered=True,
    )


def bottle_status(db: Database[Any], bottle_id: str, policy: RetryPolicy) -> dict[str, Any]:
    """Registry fields and live status of a bottle (never its key); NotFound if unknown."""
    bottle = with_retries(
        lambda: db[schema.BOTTLES].find_one({"_id": bottle_id, "bottle_id": bottle_id}, {"key_hash": 0}), policy
    )
    if bottle is None:
        raise NotFound(f"no bottle '{bottle_id}'")
    heartbeats = with_retries(
        lambda: db[schema.BOTTLE_HEARTBEATS].find_one({"_id": bottle_id, "bottle_id": bottle_id}, {"last": 1}),
        policy,
    )
    view = registry_view(bottle)
    view["status"] = status_view(bottle, last_heartbeat=(heartbeats or {}).get("last"))
    return view


_SCHEDULE = TypeAdapter(Schedule)


def registry_view(bottle: dict[str, Any]) -> dict[str, Any]:
    """The registry fields of a bottle as the API shows them (never the key or its hash)."""
    return {
        "bottle_id": bottle["_id"],
        "user_id": bottle["user_id"],
        "medication": bottle["medication"],
        "schedule": _SCHEDULE.validate_python(bottle["schedule"]).model_dump(),
        "grace_minutes": bottle["grace_minutes"],
        "provisioned_at": format_instant(bottle["provisioned_at"]),
        "updated_at": format_instant(bottle["updated_at"]),
    }


def status_view(bottle: dict[str, Any], last_heartbeat: datetime | None) -> dict[str, Any]:
    """The live status of a bottle as the API shows it. `next_dose_due` is the earliest slot neither
    satisfied nor found late yet, as ingestion and the late-dose check keep it (in the past: overdue)."""
    due = bottle.get("dose_due") or plan_of(bottle).first_due(bottle.get("doses", []))
    return {
        "last_heartbeat": _instant_or_none(last_heartbeat),
        "last_action": bottle.get("last_action"),
        "last_action_time": _instant_or_none(bottle.get("last_action_time")),
        "open_since": _instant_or_none(bottle.get("open_since")),
        "last_dose_time": _instant_or_none(bottle.get("last_dose_time")),
        "next_dose_due": format_instant(due),
    }


def _instant_or_none(moment: datetime | None) -> str | None:
    return format_instant(moment) if moment is not None else None
