"""What an operation costs, by the project's cost model (tools/costs/request_units.py), and what a write did to the
documents it touched (read aside on the backend, before and after, so the model has their sizes and index
terms and the partition map their bytes).

This module is the one place the store meets the cost model (tests/infra/test_layout.py allows it alone):
`request_charge` prices an operation, `document_writes` counts index terms as the cost meter does. When the model
changes (the honest bill), only this module changes here."""

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pymongo.collection import Collection

from shared.settings import Settings
from shared.store.schema import collection_specs
from tools.costs import billing
from tools.costs.meter import IndexedPaths, bson_size, document_write
from tools.costs.request_units import DocumentWrite, Operation

READS = {"find", "getMore", "aggregate", "count", "distinct"}
WRITES = {"insert", "update", "delete", "findAndModify"}
Document = dict[str, Any]


@dataclass
class Touched:
    """One document a write looked at: as it was and as it is (None: absent), and whether the write matched it."""

    document_id: Any
    before: Document | None
    after: Document | None = None
    matched: bool = True


@dataclass
class WriteEffects:
    touched: list[Touched] = field(default_factory=list)
    inserted: list[Document] = field(default_factory=list)
    failed_inserts: set[int] = field(default_factory=set)


def statements(name: str, command: Mapping[str, Any]) -> list[tuple[Mapping[str, Any], bool]]:
    """(filter, whether it may touch many) per statement of an update, delete or findAndModify."""
    if name == "update":
        return [(u.get("q", {}), bool(u.get("multi"))) for u in command.get("updates", [])]
    if name == "delete":
        return [(d.get("q", {}), d.get("limit", 0) == 0) for d in command.get("deletes", [])]
    return [(command.get("query", {}), False)]


def look_before(collection: Collection[Document], name: str, command: Mapping[str, Any]) -> WriteEffects:
    """The documents a write is about to touch, read before it runs (not atomically with it: an approximation
    where writes race on one document)."""
    effects = WriteEffects()
    if name == "insert":
        effects.inserted = [dict(d) for d in command.get("documents", [])]
        return effects
    for query, multi in statements(name, command):
        found = list(collection.find(query)) if multi else [d for d in [collection.find_one(query)] if d]
        effects.touched += [Touched(d["_id"], d) for d in found]
        if not found and "_id" in query and not isinstance(query["_id"], Mapping):
            effects.touched.append(Touched(query["_id"], None, matched=False))
    return effects


def look_after(collection: Collection[Document], effects: WriteEffects, reply: Mapping[str, Any]) -> None:
    """Complete `effects` from the backend after the write: each touched document as it is now, and upserts."""
    failed = {e.get("index") for e in reply.get("writeErrors", []) or []}
    effects.failed_inserts = {i for i in failed if isinstance(i, int)}
    for touched in effects.touched:
        touched.after = collection.find_one({"_id": touched.document_id})
    upserted = [u["_id"] for u in reply.get("upserted", []) or []]
    last_error = reply.get("lastErrorObject")
    if isinstance(last_error, Mapping) and last_error.get("upserted") is not None:
        upserted.append(last_error["upserted"])
    for document_id in upserted:
        effects.touched.append(Touched(document_id, None, collection.find_one({"_id": document_id})))


@functools.cache
def _index_paths() -> dict[str, IndexedPaths]:
    return {spec.name: IndexedPaths.of(spec) for spec in collection_specs(Settings())}


def index_paths(collection: str) -> IndexedPaths:
    """The index terms of a collection's documents on Cosmos DB: its declared indexes (shared/store/schema.py),
    or `_id` alone for a collection the app does not declare."""
    return _index_paths().get(collection) or IndexedPaths((("_id", ("_id",)),), ttl=False)


def document_writes(effects: WriteEffects, collection: str) -> list[DocumentWrite]:
    """The writes as the cost model sees them."""
    paths = index_paths(collection)
    writes: list[DocumentWrite] = []
    for i, document in enumerate(effects.inserted):
        size = bson_size(document)
        if i in effects.failed_inserts:  # a duplicate key: the existing document was looked at
            writes.append(DocumentWrite(size, size, unchanged=True))
            continue
        deleted, inserted = paths.changed(None, document)
        writes.append(DocumentWrite(None, size, deleted, inserted))
    for touched in effects.touched:
        before, after = touched.before, touched.after
        if before is None and after is None:
            continue
        writes.append(document_write(paths, before, after, matched=touched.matched))
    return writes


def returned_sizes(reply: Mapping[str, Any]) -> list[int]:
    """BSON sizes of the documents a read returned (a change stream's by their full document)."""
    cursor = reply.get("cursor")
    if not isinstance(cursor, Mapping):
        values = reply.get("values")  # distinct
        return [bson_size({"v": v}) for v in values] if isinstance(values, list) else []
    batch = cursor.get("firstBatch", cursor.get("nextBatch", [])) or []
    return [bson_size(d.get("fullDocument") or d) for d in batch if isinstance(d, Mapping)]


def request_charge(
    command: str,
    collection: str,
    *,
    returned: list[int] | None = None,
    writes: list[DocumentWrite] | None = None,
    reply_document: int | None = None,
    partitions_reached: int = 1,
) -> float:
    """The request units the cost model charges for one command. `partitions_reached`: how many physical
    partitions a query checked (today's model does not charge for it; the honest one will)."""
    del partitions_reached  # the adapter's seam for the model's fan-out rule
    operation = Operation(command, collection, returned=returned or [], writes=writes or [])
    operation.reply_document = reply_document
    if command not in READS and command not in WRITES:
        return 0.0
    return round(operation.ru(), 2)


# --- the bill's rules the store applies (tools/costs/billing.py; rules.py cites their pages) ----------

PARTITION_GB = billing.PARTITION_GB
PARTITION_RU = billing.PARTITION_RU


def autoscale_maximum(requested_ru_per_second: float, stored_gb: float) -> int:
    """A container's autoscale maximum as Cosmos DB keeps it: as set (in steps of 1,000 RU/s), and raised by
    Cosmos DB itself to the storage floor (10 RU/s per GB stored, at least 1,000)."""
    return max(billing.round_up(requested_ru_per_second), billing.storage_floor(stored_gb))


def forced_partitions(stored_gb: float, maximum: int) -> int:
    """The physical partitions a container's storage (50 GB each) and maximum (10,000 RU/s each) force."""
    return billing.physical_partitions(stored_gb, maximum)


def billed_in_hour(peak_ru_per_second: float, maximum: float) -> float:
    """What an autoscale hour bills: its peak RU/s, and at least a tenth of the maximum."""
    return max(peak_ru_per_second, billing.BILLED_FLOOR * maximum)
