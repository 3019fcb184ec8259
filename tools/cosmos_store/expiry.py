"""Time to live as Cosmos DB applies it: a document expires its collection's TTL (the `_ts` index's
`expireAfterSeconds`) after its last write through the proxy, or its own `ttl` field's seconds after (-1: never).
`expire` deletes what has expired by the proxy's clock, when asked or on the proxy's sweep; Cosmos DB does it
in the background with spare throughput. The TTL index rule is indexes.py's; its page is quoted by
`test_ttl_indexes_only_on_ts_and_documents_expire_by_their_last_write_or_own_ttl`."""

from tools.cosmos_store.partitions import Collection, Key, Stored, id_of
from tools.cosmos_store.state import StoreState


def expire(state: StoreState) -> int:
    """Delete what TTL has expired by now, on the backend and in the partition map; the number deleted."""
    deleted = 0
    for collection in state.partitions.collections():
        database, name = collection.name.split(".", 1)
        ttl = state.indexes.ttl_seconds(database, name)
        if ttl is None:
            continue
        expired = expired_keys(collection, ttl, state.options.clock())
        for key in expired:
            document_id = id_of(key)
            state.observer[database][name].delete_one({"_id": document_id})
            state.partitions.record(collection, document_id, None)
        deleted += len(expired)
    return deleted


def expired_keys(collection: Collection, ttl: int, now: float) -> list[Key]:
    """The documents of `collection` expired at `now`, its TTL being `ttl` seconds."""
    return [key for key, stored in list(collection.documents.items()) if _has_expired(stored, ttl, now)]


def _has_expired(stored: Stored, ttl: int, now: float) -> bool:
    seconds = stored.ttl if stored.ttl is not None else ttl
    return seconds >= 0 and stored.written_at + seconds <= now
