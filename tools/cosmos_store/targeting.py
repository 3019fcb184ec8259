"""The physical partitions a command reaches, as Cosmos DB routes it: a filter that pins the shard key by
equality (or `$in`) reaches the partitions of those values, any other a fan-out to every partition; a write
reaches the partitions of the documents it touches. Throughput is spent, and throttling met, on these.

    https://learn.microsoft.com/azure/cosmos-db/scaling-provisioned-throughput-best-practices
    "As data gets written, Azure Cosmos DB uses the hash of the partition key value to determine which logical
    and physical partition the data lives on."

Where a document lies (the hash of its shard key value, the partition owning it) is partitions.py's."""

from collections.abc import Iterable, Mapping
from typing import Any

from tools.cosmos_store import charges
from tools.cosmos_store.partitions import Collection, Partition

Document = dict[str, Any]


def filter_of(name: str, command: Document) -> Any:
    """A read's filter: an aggregate's first `$match`, a count's or distinct's `query`, else `filter`."""
    if name == "aggregate":
        return next((s["$match"] for s in command.get("pipeline", []) if isinstance(s, Mapping) and "$match" in s), {})
    if name in {"count", "distinct"}:
        return command.get("query", {})
    return command.get("filter", {})


def query_targets(collection: Collection, query: Any) -> list[Partition]:
    """The partitions a filter reaches: one per shard key value it pins by equality (or `$in`), else all."""
    if collection.shard_key is None or not isinstance(query, Mapping) or collection.shard_key not in query:
        return list(collection.partitions)
    value = query[collection.shard_key]
    if isinstance(value, Mapping):
        if set(value) == {"$eq"}:
            values = [value["$eq"]]
        elif set(value) == {"$in"} and isinstance(value["$in"], list):
            values = list(value["$in"])
        else:
            return list(collection.partitions)
    else:
        values = [value]
    return distinct(collection.partition_of(collection.hash_of({collection.shard_key: v})) for v in values)


def write_targets(
    collection: Collection, name: str, command: Document, effects: charges.WriteEffects
) -> list[Partition]:
    """The partitions a write reaches: those of the documents it inserts or found to touch, else (it touches
    none) those its statements' filters reach."""
    if name == "insert":
        return distinct(collection.partition_of(collection.hash_of(d)) for d in effects.inserted)
    found = [t.before for t in effects.touched if t.before is not None]
    if found:
        return distinct(collection.partition_of(collection.hash_of(d)) for d in found)
    filters = [q for q, _ in charges.statements(name, command)]
    return distinct(p for q in filters for p in query_targets(collection, q))


def stream_partitions(collection: Collection, partition_id: int | None) -> list[Partition]:
    """The partitions a change stream reads: the one it was opened on (none if it is gone), or all."""
    if partition_id is None:
        return list(collection.partitions)
    return [p for p in collection.partitions if p.id == partition_id]


def distinct(partitions: Iterable[Partition]) -> list[Partition]:
    """Each partition once, in the order first met."""
    found: dict[int, Partition] = {}
    for partition in partitions:
        found.setdefault(partition.id, partition)
    return list(found.values())
