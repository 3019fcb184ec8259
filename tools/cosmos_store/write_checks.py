"""The rules a write meets before it runs, each refusing it whole (nothing written): a document without its
shard key (61) or a changed shard key value (66), a document past 2 MB (16 MB with `large_documents`), one
shard key value's documents past a logical partition's 20 GB (scaled: `logical_partition_bytes`). The pages
are quoted where the rules are decided (rules.py, features.py) and, for the 20 GB, by its test
(tests/integration/tools/test_cosmos_store.py)."""

from typing import Any

import bson

from tools.cosmos_store import charges, features, rules, wire
from tools.cosmos_store.indexes import BAD_VALUE
from tools.cosmos_store.partitions import Collection, Partition
from tools.cosmos_store.state import StoreState
from tools.cosmos_store.targeting import write_targets

Document = dict[str, Any]


def prepare_write(
    state: StoreState, collection: Collection, name: str, command: Document
) -> tuple[charges.WriteEffects, list[Partition]] | Document:
    """What a write will touch and the partitions it reaches, or Cosmos DB's refusal of it."""
    refused = shard_key_refusal(state, collection, name, command)
    if refused is not None:
        return refused
    effects = charges.look_before(state.backend(collection), name, command)
    too_large = size_refusal(state, name, command, effects)
    if too_large is not None:
        return too_large
    overflow = logical_overflow_refusal(state, collection, name, command, effects)
    if overflow is not None:
        return overflow
    return effects, write_targets(collection, name, command, effects)


def shard_key_refusal(state: StoreState, collection: Collection, name: str, command: Document) -> Document | None:
    """Cosmos DB's refusal of a write that leaves a document without its shard key (61) or changes one's
    shard key value (66), or None (rules.py quotes the pages)."""
    shard_key = collection.shard_key
    if shard_key is None or name == "delete":
        return None
    missing = rules.missing_shard_key(name, command, shard_key)
    if missing is not None:
        return wire.error_document(rules.SHARD_KEY_NOT_FOUND, f"{collection.name}: {missing}", "ShardKeyNotFound")
    backend = state.backend(collection)

    def current(query: Any) -> Any:
        found = backend.find_one(query, {shard_key: 1})
        return None if found is None else found.get(shard_key)

    changed = rules.shard_key_change(name, command, shard_key, current)
    if changed is not None:
        return wire.error_document(
            rules.IMMUTABLE_FIELD, f"{collection.name}: the write would change {changed}", "ImmutableField"
        )
    return None


def size_refusal(state: StoreState, name: str, command: Document, effects: charges.WriteEffects) -> Document | None:
    """A write that would store a document past 2 MB (16 MB with `large_documents`): refused, nothing written
    (features.py quotes the pages)."""
    if name == "delete":
        return None
    limit = features.LARGE_DOCUMENT_LIMIT if state.options.large_documents else features.DOCUMENT_LIMIT
    before = [t.before for t in effects.touched if t.before is not None]
    size, which = features.largest_written(name, command, before)
    if size <= limit:
        return None
    refusal = features.document_too_large(size, limit, which)
    return wire.error_document(refusal.code, refusal.message, refusal.code_name)


def logical_overflow_refusal(
    state: StoreState, collection: Collection, name: str, command: Document, effects: charges.WriteEffects
) -> Document | None:
    """A write that would take one shard key value's documents past the logical partition limit (20 GB,
    scaled: `logical_partition_bytes`): refused, nothing written. Inserts are sized exactly; an update as if
    it grew its document by all it carries (what it really adds is known only after it ran)."""
    added: dict[int, int] = {}
    for document in effects.inserted:
        key_hash = collection.hash_of(document)
        added[key_hash] = added.get(key_hash, 0) + len(bson.encode(document))
    growth = max((len(bson.encode({"u": u})) for u in rules.updates(name, command)), default=0)
    for touched in effects.touched if name != "insert" else []:
        if touched.before is not None:  # at most by what the update carries
            key_hash = collection.hash_of(touched.before)
            added[key_hash] = added.get(key_hash, 0) + growth
    overflow = state.partitions.logical_overflow(collection, added)
    if overflow is None:
        return None
    limit = state.partitions.logical_limit_bytes
    return wire.error_document(
        BAD_VALUE,
        f"Response status code does not indicate success: Forbidden (403); Substatus: 1014; Partition key "
        f"reached maximum size of {limit} bytes (20 GB scaled): {collection.name}'s shard key value would hold "
        f"{overflow[1]} bytes",
    )
