"""What the proxy's parts share: its options, a client of its own on the backend (to look aside at documents
and indexes, never on an app's connection), each collection's shard key, the partition maps, the index
catalog, the meter, and the open cursors. One object, so that each part takes what it works on by name."""

import random
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pymongo import MongoClient
from pymongo.collection import Collection as BackendCollection

from shared.settings import Settings
from shared.store.schema import collection_specs
from tools.cosmos_store.cursors import Cursors
from tools.cosmos_store.indexes import IndexCatalog
from tools.cosmos_store.metering import Metered
from tools.cosmos_store.options import Options
from tools.cosmos_store.partitions import Collection, Partition, PartitionMaps

Document = dict[str, Any]


class ShardKeys:
    """Each collection's shard key: as customAction CreateCollection declared it through the proxy, else as
    shared/store/schema.py declares the collection of that name (None: unsharded)."""

    def __init__(self) -> None:
        self._declared: dict[str, str | None] = {}
        self._schema = {spec.name: spec.shard_key for spec in collection_specs(Settings())}

    def of(self, database: str, name: str) -> str | None:
        full = f"{database}.{name}"
        if full in self._declared:
            return self._declared[full]
        return self._schema.get(name)

    def declare(self, database: str, name: str, shard_key: str | None) -> None:
        self._declared[f"{database}.{name}"] = shard_key


@dataclass
class StoreState:
    """The shared state; `lock` guards `metered` and `random` (the partition maps and cursors guard their own)."""

    options: Options
    observer: MongoClient[Document]
    shard_keys: ShardKeys
    partitions: PartitionMaps
    indexes: IndexCatalog
    metered: Metered
    cursors: Cursors
    random: random.Random
    lock: threading.Lock

    @classmethod
    def open(cls, backend_uri: str, options: Options) -> "StoreState":
        """The state of a new proxy in front of `backend_uri` (its observer client connects lazily)."""
        observer: MongoClient[Document] = MongoClient(backend_uri, directConnection=True)
        shard_keys = ShardKeys()
        partitions = PartitionMaps(
            limit_bytes=options.partition_bytes,
            ru_per_second=options.partition_ru_per_second,
            initial_partitions=options.initial_partitions,
            auto_split=options.auto_split,
            shard_key_of=shard_keys.of,
            clock=options.clock,
            logical_limit_bytes=options.logical_partition_bytes,
            autoscale_max=options.autoscale_max_ru_per_second,
        )

        def list_indexes(database: str, name: str) -> list[Mapping[str, Any]]:
            return list(observer[database][name].list_indexes())

        indexes = IndexCatalog(list_indexes, options.clock, options.index_delay_seconds)
        return cls(
            options,
            observer,
            shard_keys,
            partitions,
            indexes,
            Metered(),
            Cursors(),
            random.Random(options.seed),
            threading.Lock(),
        )

    def backend(self, collection: Collection) -> BackendCollection[Document]:
        """The collection on the backend, through the observer client."""
        database, name = collection.name.split(".", 1)
        return self.observer[database][name]

    def spend(self, collection: Collection, reached: list[Partition], charge: float) -> None:
        """Charge the partitions a command reached (their throughput) and the meter."""
        self.partitions.charge(reached, charge)
        with self.lock:
            self.metered.add(collection.name, charge, self.options.clock())
