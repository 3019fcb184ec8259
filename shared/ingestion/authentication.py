"""Device authentication: every request carries its bottle's device key (X-Device-Key). Unknown bottles and
wrong keys get the same answer."""

from typing import Any

from pymongo.database import Database

from shared.bottles.entries import RegistryEntry, cached_entry, load_entry
from shared.device_keys import MAX_KEY_LENGTH, hash_key, same_hash
from shared.errors import Unauthorized
from shared.store.retries import RetryPolicy

UNAUTHORIZED_MESSAGE = "unknown bottle or wrong device key"
_NO_KEY = "0" * 64  # what an unknown bottle's key hash is compared with: no key hashes to it


def check_key_shape(device_key: str | None) -> str:
    """A key worth hashing, or Unauthorized without touching the database."""
    if not device_key or len(device_key) > MAX_KEY_LENGTH:
        raise Unauthorized(UNAUTHORIZED_MESSAGE)
    return device_key


def authenticate(
    db: Database[Any],
    bottle_id: str,
    device_key: str | None,
    cache_ttl_s: float,
    policy: RetryPolicy,
    *,
    fresh: bool = False,
) -> tuple[RegistryEntry, dict[str, Any] | None]:
    """The registry entry of a bottle whose device presented the right key, and the bottle as read (registry and
    status fields) when this call read it; Unauthorized otherwise.

    Served from the worker's cache when it can be, unless `fresh` (the caller needs the bottle's status, so
    reads it anyway, and the key is checked against that read); a key the cached entry rejects is checked
    against the database once (the key may just have been rotated on another worker). An unknown bottle and a
    wrong key take the same steps (one registry read, one hash, one constant-time comparison), so neither the
    answer nor its timing tells them apart."""
    presented = hash_key(check_key_shape(device_key))
    cached = None if fresh else cached_entry(bottle_id)
    if cached is not None and same_hash(cached.key_hash, presented):
        return cached, None
    entry, bottle = load_entry(db, bottle_id, cache_ttl_s, policy)
    if not same_hash(entry.key_hash if entry is not None else _NO_KEY, presented) or entry is None:
        raise Unauthorized(UNAUTHORIZED_MESSAGE)
    return entry, bottle
