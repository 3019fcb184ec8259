"""Device keys: issued at provisioning (shown once), stored only as a hash, checked by ingestion."""

import hashlib
import hmac
import secrets

MAX_KEY_LENGTH = 256


def new_device_key() -> str:
    return secrets.token_urlsafe(32)


def hash_key(device_key: str) -> str:
    # Keys are 256 random bits, so a fast hash is enough: there is no dictionary to attack.
    return hashlib.sha256(device_key.encode()).hexdigest()


def same_hash(stored: str, presented: str) -> bool:
    """Compare two key hashes in constant time."""
    return hmac.compare_digest(stored, presented)
