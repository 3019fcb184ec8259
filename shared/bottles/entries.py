"""Registry entries: what other jobs need to know about a bottle (owner, medication, key hash), read from
`bottles` and cached per worker for a short time. The read that fills the cache also returns the bottle's status
(what ingestion computes its one status write from), which is never cached."""

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pymongo.database import Database

from shared.device_keys import hash_key, same_hash
from shared.store import schema
from shared.store.retries import RetryPolicy, with_retries


@dataclass(frozen=True)
class RegistryEntry:
    """What ingestion needs to know about a bottle; cached per worker."""

    bottle_id: str
    user_id: str
    medication: str
    key_hash: str

    def accepts(self, device_key: str) -> bool:
        return same_hash(self.key_hash, hash_key(device_key))


class RegistryCache:
    """A small LRU of registry entries with a time-to-live, shared by the threads of one worker.

    An entry read before a `forget` (a rotation on this worker) is not cached after it: `put` takes the
    `generation` from before the read, and any forget since makes it a no-op, so a read racing a rotation cannot
    cache the revoked key."""

    def __init__(self, max_entries: int = 100_000, clock: Callable[[], float] = time.monotonic) -> None:
        self._entries: OrderedDict[str, tuple[float, RegistryEntry]] = OrderedDict()
        self._lock = threading.Lock()
        self._forgets = 0
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

    def generation(self) -> int:
        """Take before reading an entry from the database; pass to `put`."""
        with self._lock:
            return self._forgets

    def put(self, entry: RegistryEntry, ttl_s: float, generation: int | None = None) -> None:
        if ttl_s <= 0:
            return
        with self._lock:
            if generation is not None and generation != self._forgets:
                return  # something was forgotten since the entry was read: it may be what was forgotten
            self._entries[entry.bottle_id] = (self._clock() + ttl_s, entry)
            self._entries.move_to_end(entry.bottle_id)
            while len(self._entries) > self._max:
                self._entries.popitem(last=False)

    def forget(self, bottle_id: str) -> None:
        with self._lock:
            self._forgets += 1
            self._entries.pop(bottle_id, None)

    def clear(self) -> None:
        with self._lock:
            self._forgets += 1
            self._entries.clear()


REGISTRY_CACHE = RegistryCache()

# One point read of a bottle: its registry entry, and the status fields ingestion's status write is computed
# from (shared/ingestion/storing.py), the dose plan's fields among them.
BOTTLE_FIELDS = dict.fromkeys(
    (
        "user_id",
        "medication",
        "key_hash",
        "schedule",
        "grace_minutes",
        "provisioned_at",
        "schedule_from",
        "last_action",
        "last_action_time",
        "last_dose_time",
        "doses",
        "dose_due",
        "dose_late_at",
        "dose_seq",
    ),
    1,
)


def cached_entry(bottle_id: str) -> RegistryEntry | None:
    """The worker's cached entry of a bottle, if it has a fresh one."""
    return REGISTRY_CACHE.get(bottle_id)


def read_bottle(db: Database[Any], bottle_id: str, policy: RetryPolicy) -> dict[str, Any] | None:
    """The bottle's registry and status fields (BOTTLE_FIELDS), one point read; None if it is unknown."""
    key = {"_id": bottle_id, "bottle_id": bottle_id}
    return with_retries(lambda: db[schema.BOTTLES].find_one(key, BOTTLE_FIELDS), policy)


def load_entry(
    db: Database[Any], bottle_id: str, cache_ttl_s: float, policy: RetryPolicy
) -> tuple[RegistryEntry | None, dict[str, Any] | None]:
    """The bottle's entry read from the registry (and cached for `cache_ttl_s`), with the document it was read
    from (registry and status); (None, None) if it is unknown."""
    generation = REGISTRY_CACHE.generation()
    found = read_bottle(db, bottle_id, policy)
    if found is None:
        REGISTRY_CACHE.forget(bottle_id)
        return None, None
    entry = RegistryEntry(bottle_id, found["user_id"], found["medication"], found["key_hash"])
    REGISTRY_CACHE.put(entry, cache_ttl_s, generation)
    return entry, found


def forget_entry(bottle_id: str) -> None:
    """Drop the worker's cached entry (the bottle changed, or its cached key was found stale)."""
    REGISTRY_CACHE.forget(bottle_id)


def forget_all_entries() -> None:
    REGISTRY_CACHE.clear()
