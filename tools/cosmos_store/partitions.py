"""Physical partitions, as Cosmos DB keeps them: each collection's hash space of shard key values in contiguous
ranges, each with the bytes it holds, a storage limit and a per-second throughput budget of its own; splits and
merges. How it models them: docs/cosmos-store.md, "What it models" (Physical partitions, Storage and splits,
Throttling)."""

import hashlib
import itertools
import math
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import bson

from tools.cosmos_store import charges

TOP = 1 << 128  # the exclusive upper end of the hash space ("FF" in a feed range)
Key = bytes  # a document's `_id`, as BSON (hashable whatever its type)


def effective_key(value: Any) -> int:
    """The hash a shard key value places its document by (its effective partition key): MD5 of the value's BSON,
    128 bits (32 hex digits in a feed range).
    https://learn.microsoft.com/azure/cosmos-db/scaling-provisioned-throughput-best-practices: "As data gets
    written, Azure Cosmos DB uses the hash of the partition key value to determine which logical and physical
    partition the data lives on." """
    return int.from_bytes(hashlib.md5(bson.encode({"": value})).digest(), "big")


def range_bound(value: int) -> str:
    """A hash as a feed range bound: "" for the bottom, "FF" for the top, else 32 upper-case hex digits."""
    if value <= 0:
        return ""
    if value >= TOP:
        return "FF"
    return f"{value:032X}"


def parse_bound(text: str) -> int:
    if text == "":
        return 0
    if text.upper() == "FF":
        return TOP
    return int(text, 16)


def id_key(document_id: Any) -> Key:
    return bson.encode({"": document_id})


def id_of(key: Key) -> Any:
    """The `_id` a key of `id_key` stands for."""
    return bson.decode(key)[""]


def document_ttl(document: dict[str, Any]) -> int | None:
    """A document's own TTL: "The TTL value must be an int32. Alternatively, an int64 that fits in an int32, or a
    double with no decimal part that fits in an int32. Values for the TTL property that do not conform to these
    specifications are allowed but not treated as a meaningful document TTL value."
    (https://learn.microsoft.com/azure/cosmos-db/mongodb/time-to-live)"""
    value = document.get("ttl")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not value.is_integer():
        return None
    return int(value) if -(2**31) <= value < 2**31 else None


@dataclass
class Partition:
    """One physical partition: its hash range [low, high), its id (a new one for each child), what it holds.
    "Each PartitionKeyRangeId maps to one physical partition and is assigned to hold data for a range of possible
    hash values." (the scaling page, `effective_key`)"""

    id: int
    low: int
    high: int
    parent: int | None = None
    bytes: int = 0
    spent: float = 0.0  # request units charged within the current second
    second: int = -1  # which second `spent` is of
    charged: float = 0.0  # request units charged ever
    throttled: int = 0  # operations refused ever
    share: float | None = None  # its share of the collection's autoscale maximum (RU/s), when it has one
    merged_from: tuple[int, int] | None = None  # the two partitions a merge made it of
    keys: Counter[int] = field(default_factory=Counter, repr=False)  # documents per shard key hash it holds

    def holds(self, key_hash: int) -> bool:
        return self.low <= key_hash < self.high

    @property
    def feed_range(self) -> tuple[str, str]:
        return range_bound(self.low), range_bound(self.high)


@dataclass
class Stored:
    key_hash: int
    size: int
    written_at: float  # the proxy's clock at the document's last write (its `_ts`)
    ttl: int | None = None  # the document's own `ttl` field (seconds; -1: never expires)


@dataclass
class Split:
    collection: str
    parent: Partition
    children: tuple[Partition, Partition]


@dataclass
class Merge:
    collection: str
    parents: tuple[Partition, Partition]
    child: Partition


@dataclass
class Collection:
    """A collection's partition map and the documents it holds, by `_id`."""

    name: str  # "db.collection"
    shard_key: str | None
    partitions: list[Partition]
    documents: dict[Key, Stored] = field(default_factory=dict)
    key_bytes: Counter[int] = field(default_factory=Counter, repr=False)  # bytes per shard key hash (logical)
    autoscale_max: float | None = None  # the collection's autoscale maximum RU/s (scaled), when it has one
    merged: bool = False  # a merge ran on it: its change feed can no longer be read from a start time

    @property
    def bytes(self) -> int:
        return sum(p.bytes for p in self.partitions)

    def partition_of(self, key_hash: int) -> Partition:
        return next(p for p in self.partitions if p.holds(key_hash))

    def hash_of(self, document: dict[str, Any]) -> int:
        """The hash of a document's shard key value (its `_id`'s in an unsharded collection, which has one
        partition anyway; a missing shard key value hashes as null, as Cosmos DB places it)."""
        if self.shard_key is None:
            return 0
        return effective_key(_path(document, self.shard_key))


def _path(document: dict[str, Any], path: str) -> Any:
    value: Any = document
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


class PartitionMaps:
    """Every collection's partitions; thread-safe. `limit_bytes` stands for 50 GB, `ru_per_second` for a
    physical partition's 10,000 RU/s; both are scaled down for tests and runs, and settable at any time. "Each
    physical partition can support a maximum of 10,000 RU/s (applies to all APIs) of throughput and 50 GB of
    storage" (the scaling page, `effective_key`). A partition past its storage limit splits in two."""

    def __init__(
        self,
        *,
        limit_bytes: int,
        ru_per_second: float,
        initial_partitions: int,
        auto_split: bool,
        shard_key_of: Callable[[str, str], str | None],
        clock: Callable[[], float],
        logical_limit_bytes: int | None = None,
        autoscale_max: float | None = None,
    ) -> None:
        self.limit_bytes = limit_bytes
        self.logical_limit_bytes = logical_limit_bytes
        self.autoscale_max = autoscale_max  # every sharded collection's requested maximum RU/s (scaled)
        self._ru_scale = ru_per_second / charges.PARTITION_RU  # proxy RU/s per real RU/s, as first set
        self.ru_per_second = ru_per_second
        self.initial_partitions = initial_partitions
        self.auto_split = auto_split
        self._shard_key_of = shard_key_of
        self._clock = clock
        self._collections: dict[str, Collection] = {}
        self._ids = 0
        self._lock = threading.RLock()
        self.splits: list[Split] = []
        self.merges: list[Merge] = []

    def _next_id(self) -> int:
        self._ids += 1
        return self._ids - 1

    def collection(self, database: str, name: str) -> Collection:
        full = f"{database}.{name}"
        with self._lock:
            found = self._collections.get(full)
            if found is None:
                shard_key = self._shard_key_of(database, name)
                count = self.initial_partitions if shard_key is not None else 1  # unsharded: one partition
                bounds = [TOP * i // count for i in range(count + 1)]
                partitions = [Partition(self._next_id(), bounds[i], bounds[i + 1]) for i in range(count)]
                found = self._collections[full] = Collection(full, shard_key, partitions)
                self._autoscale(found)
            return found

    def set_shard_key(self, database: str, name: str, shard_key: str | None) -> None:
        with self._lock:
            collection = self.collection(database, name)
            collection.shard_key = shard_key
            self._autoscale(collection)

    def forget(self, database: str, name: str | None = None) -> None:
        """A dropped collection (or database, without a name): its partitions go with it."""
        with self._lock:
            prefix = f"{database}." if name is None else None
            for full in list(self._collections):
                if full == f"{database}.{name}" or (prefix is not None and full.startswith(prefix)):
                    del self._collections[full]

    # --- storage ---

    def record(self, collection: Collection, document_id: Any, document: dict[str, Any] | None) -> list[Split]:
        """A document as now stored (None: deleted); splits what passed its limit when splitting is automatic."""
        with self._lock:
            key = id_key(document_id)
            old = collection.documents.pop(key, None)
            if old is not None:
                holder = collection.partition_of(old.key_hash)
                holder.bytes -= old.size
                collection.key_bytes[old.key_hash] -= old.size
                if collection.key_bytes[old.key_hash] <= 0:
                    del collection.key_bytes[old.key_hash]
                holder.keys[old.key_hash] -= 1
                if not holder.keys[old.key_hash]:
                    del holder.keys[old.key_hash]
            if document is None:
                return []
            stored = Stored(
                collection.hash_of(document), len(bson.encode(document)), self._clock(), document_ttl(document)
            )
            collection.documents[key] = stored
            partition = collection.partition_of(stored.key_hash)
            partition.bytes += stored.size
            partition.keys[stored.key_hash] += 1
            collection.key_bytes[stored.key_hash] += stored.size
            # One logical partition (one shard key value) never spans two physical ones: a split cannot relieve
            # a partition that holds one key (Cosmos DB caps a logical partition at 20 GB instead:
            # `logical_limit_bytes`, which the proxy checks before a write).
            splittable = collection.shard_key is not None and len(partition.keys) > 1
            done = []
            if self.auto_split and partition.bytes > self.limit_bytes and splittable:
                done = self._split(collection, partition)
            return done + self._autoscale(collection)

    def split(self, database: str, name: str, partition_id: int | None = None) -> list[Split]:
        """Split a collection's partition (by id; else its largest) in two, as Cosmos DB does on its own."""
        with self._lock:
            collection = self.collection(database, name)
            if collection.shard_key is None:
                raise ValueError(f"{collection.name} has no shard key: an unsharded collection has one partition")
            if partition_id is None:
                partition = max(collection.partitions, key=lambda p: p.bytes)
            else:
                partition = next(p for p in collection.partitions if p.id == partition_id)
            return self._split(collection, partition) + self._autoscale(collection)

    def _split(self, collection: Collection, parent: Partition) -> list[Split]:
        """The split of `parent` into two children at `_middle` (none if its range is one hash)."""
        middle = self._middle(collection, parent)
        if not parent.low < middle < parent.high:
            return []  # a range of one hash cannot split
        left = Partition(self._next_id(), parent.low, middle, parent=parent.id)
        right = Partition(self._next_id(), middle, parent.high, parent=parent.id)
        for stored in collection.documents.values():
            if parent.holds(stored.key_hash):
                child = left if stored.key_hash < middle else right
                child.bytes += stored.size
                child.keys[stored.key_hash] += 1
        index = collection.partitions.index(parent)
        collection.partitions[index : index + 1] = [left, right]
        done = Split(collection.name, parent, (left, right))
        self.splits.append(done)
        return [done]

    def merge(self, database: str, name: str, partition_ids: tuple[int, int] | None = None) -> Merge:
        """Merge two adjacent partitions of a collection into one (by ids; else the adjacent pair holding the
        least), as an operator's `az cosmosdb mongodb collection merge` does; ValueError where Cosmos DB would
        keep them apart: no shard key, one partition, not adjacent, or fewer partitions than its storage and
        autoscale maximum force."""
        with self._lock:
            collection = self.collection(database, name)
            pairs = list(itertools.pairwise(collection.partitions))
            if collection.shard_key is None or not pairs:
                raise ValueError(f"{collection.name} has one partition: nothing to merge")
            if partition_ids is None:
                left, right = min(pairs, key=lambda pair: pair[0].bytes + pair[1].bytes)
            else:
                found = [pair for pair in pairs if {p.id for p in pair} == set(partition_ids)]
                if not found:
                    raise ValueError(f"partitions {partition_ids} of {collection.name} are not two adjacent ones")
                left, right = found[0]
            if left.bytes + right.bytes > self.limit_bytes:
                raise ValueError(f"{collection.name}: partitions {left.id} and {right.id} hold more than one can")
            forced = self._forced(collection)
            if len(collection.partitions) - 1 < forced:
                raise ValueError(f"{collection.name} needs {forced} partitions for its storage and throughput")
            child = Partition(self._next_id(), left.low, right.high, merged_from=(left.id, right.id))
            child.bytes = left.bytes + right.bytes
            child.keys = left.keys + right.keys
            index = collection.partitions.index(left)
            collection.partitions[index : index + 2] = [child]
            collection.merged = True
            done = Merge(collection.name, (left, right), child)
            self.merges.append(done)
            self._autoscale(collection)
            return done

    def _forced(self, collection: Collection) -> int:
        if collection.autoscale_max is None:
            return 1
        return charges.forced_partitions(self.stored_gb(collection), round(collection.autoscale_max / self._ru_scale))

    def stored_gb(self, collection: Collection) -> float:
        """The GB a collection's bytes stand for (`limit_bytes` stands for a partition's 50 GB)."""
        return collection.bytes / self.limit_bytes * charges.PARTITION_GB

    def _autoscale(self, collection: Collection) -> list[Split]:
        """With an autoscale maximum: raise it to the storage floor, split until the partitions the maximum
        forces exist (10,000 RU/s each), and give each partition its share of the maximum."""
        if self.autoscale_max is None or collection.shard_key is None:
            return []
        requested = self.autoscale_max / self._ru_scale
        maximum = charges.autoscale_maximum(requested, self.stored_gb(collection))
        collection.autoscale_max = maximum * self._ru_scale
        done: list[Split] = []
        needed = charges.forced_partitions(self.stored_gb(collection), maximum)
        if not collection.documents and len(collection.partitions) < needed:  # created with them: no split
            bounds = [TOP * i // needed for i in range(needed + 1)]
            collection.partitions = [Partition(self._next_id(), bounds[i], bounds[i + 1]) for i in range(needed)]
        while len(collection.partitions) < needed:
            split = self._split(collection, max(collection.partitions, key=lambda p: p.high - p.low))
            if not split:
                break
            done += split
        for partition in collection.partitions:
            partition.share = collection.autoscale_max / len(collection.partitions)
        return done

    @staticmethod
    def _middle(collection: Collection, parent: Partition) -> int:
        """Where a split divides `parent`'s range: where half its bytes lie on each side (the hash of the document at
        the weighted median), or at the middle of the range when it holds one key or none."""
        held = sorted((s.key_hash, s.size) for s in collection.documents.values() if parent.holds(s.key_hash))
        total, running = sum(size for _, size in held), 0
        for i, (key_hash, size) in enumerate(held):
            running += size
            if running * 2 >= total and i + 1 < len(held) and held[i + 1][0] > key_hash:
                return held[i + 1][0]  # the next distinct key starts the right half
        return (parent.low + parent.high) // 2

    # --- throughput ---

    def logical_overflow(self, collection: Collection, added: dict[int, int]) -> tuple[int, int] | None:
        """(shard key hash, bytes it would hold) of the first logical partition that `added` bytes per key hash
        would take past `logical_limit_bytes` (Cosmos DB's 20 GB, scaled), or None."""
        with self._lock:
            if self.logical_limit_bytes is None or collection.shard_key is None:
                return None
            for key_hash, size in added.items():
                total = collection.key_bytes.get(key_hash, 0) + size
                if size > 0 and total > self.logical_limit_bytes:
                    return key_hash, total
            return None

    def budget(self, partition: Partition) -> float:
        """A partition's RU per second now: its own throughput, or less, its share of an autoscale maximum."""
        return self.ru_per_second if partition.share is None else min(self.ru_per_second, partition.share)

    def throttled_for_ms(self, partitions: Iterable[Partition]) -> int | None:
        """Milliseconds until every given partition has budget again, or None if all have some now. Each partition
        spends its budget per wall-clock second; once the second's charges reach it, further operations on it are
        throttled until the next second begins.
        https://learn.microsoft.com/azure/cosmos-db/nosql/troubleshoot-request-rate-too-large: "In a given second,
        if the operations consume more than the provisioned request units, Azure Cosmos DB will return a 429
        exception. Each second, the number of request units available to use is reset." """
        with self._lock:
            now = self._clock()
            second = math.floor(now)
            if any(p.second == second and p.spent >= self.budget(p) for p in partitions):
                return max(1, math.ceil((second + 1 - now) * 1000))
            return None

    def refuse(self, partitions: Iterable[Partition]) -> None:
        with self._lock:
            for partition in partitions:
                partition.throttled += 1

    def charge(self, partitions: list[Partition], request_units: float) -> None:
        """Spend `request_units` across the partitions an operation reached (evenly)."""
        if not partitions:
            return
        with self._lock:
            second = math.floor(self._clock())
            share = request_units / len(partitions)
            for partition in partitions:
                if partition.second != second:
                    partition.second, partition.spent = second, 0.0
                partition.spent += share
                partition.charged += share

    def documents_of(self, collection: Collection) -> list[tuple[Key, Stored]]:
        with self._lock:
            return list(collection.documents.items())

    def collections(self) -> list[Collection]:
        with self._lock:
            return list(self._collections.values())
