"""Registry entries: what other jobs need to know about a bottle (owner, medication, key hash, dose plan),
read from `bottles` and cached per worker for a short time."""

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pymongo.database import Database

from shared.device_keys import hash_key, same_hash
from shared.doses.due_tracking import plan_of
from shared.doses.schedules import DosePlan
from shared.store import schema
from shared.store.retries import RetryPolicy, with_retries


@dataclass(frozen=True)
class RegistryEntry:
    """What ingestion needs to know about a bottle; cached per worker."""

    bottle_id: str
    user_id: str
    medication: str
    key_hash: str
    dose_plan: DosePlan | None = None  # what ingestion needs to keep the next dose due current

    def accepts(self, device_key: str) -> bool:
        return same_hash(self.key_hash, hash_key(device_key))


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


def cached_entry(bottle_id: str) -> RegistryEntry | None:
    """The worker's cached entry of a bottle, if it has a fresh one."""
    return REGISTRY_CACHE.get(bottle_id)


def load_entry(db: Database[Any], bottle_id: str, cache_ttl_s: float, policy: RetryPolicy) -> RegistryEntry | None:
    """The bottle's entry read from the registry (and cached for `cache_ttl_s`); None if it is unknown."""
    found = with_retries(
        lambda: db[schema.BOTTLES].find_one({"_id": bottle_id, "bottle_id": bottle_id}, _ENTRY_FIELDS), policy
    )
    if found is None:
        REGISTRY_CACHE.forget(bottle_id)
        return None
    plan = plan_of(found) if "schedule_from" in found else None
    entry = RegistryEntry(bottle_id, found["user_id"], found["medication"], found["key_hash"], plan)
    REGISTRY_CACHE.put(entry, cache_ttl_s)
    return entry


def forget_entry(bottle_id: str) -> None:
    """Drop the worker's cached entry (the bottle changed, or its cached key was found stale)."""
    REGISTRY_CACHE.forget(bottle_id)


def forget_all_entries() -> None:
    REGISTRY_CACHE.clear()
