"""Device authentication: every request carries its bottle's device key (X-Device-Key). Unknown bottles and
wrong keys get the same answer."""

from typing import Any

from pymongo.database import Database

from shared.bottles.entries import RegistryEntry, entry_of, read_bottle
from shared.devices.device_keys import MAX_KEY_LENGTH, hash_key, same_hash
from shared.doses.bottle_document import BottleDocument
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
    db: Database[Any], bottle_id: str, device_key: str | None, policy: RetryPolicy
) -> tuple[RegistryEntry, BottleDocument]:
    """The registry entry of a bottle whose device presented the right key, and the bottle as read (registry and
    status fields); Unauthorized otherwise.

    The bottle is read for every request that needs it (one point read, ~1 RU), never taken from a per-worker
    cache: a rotation answers after its write, so from then on every worker reads the new key, and a revoked key
    is refused for every event kind at once. An unknown bottle and a wrong key take the same steps (one read,
    one hash, one constant-time comparison), so neither the answer nor its timing tells them apart."""
    presented = hash_key(check_key_shape(device_key))
    bottle = read_bottle(db, bottle_id, policy)
    if not same_hash(bottle["key_hash"] if bottle is not None else _NO_KEY, presented) or bottle is None:
        raise Unauthorized(UNAUTHORIZED_MESSAGE)
    return entry_of(bottle), bottle
