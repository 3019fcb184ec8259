"""Measuring what a run would cost on Cosmos DB (tools/costs/request_units.py turns it into request units).

A pymongo command listener records, for each database command, its BSON size and its reply's, the documents a
read returned (a change stream's by their `fullDocument`), and, with an observer (a second client on the same
server), each document a write touched: its stored size before and after, and the index terms it deleted and
inserted, by the indexes shared/store/schema.py declares for Cosmos DB (plus `_id` and the shard key, which
Cosmos DB indexes by itself, and `_ts` where a TTL index is). The observer reads aside, on its own client, so
the run's command counts are untouched; it slows a run down, so costs are measured in their own passes, never
in a timed one.
"""

import contextlib
import itertools
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import bson
from pymongo import MongoClient, monitoring
from pymongo.database import Database

from shared.settings import Settings
from shared.store.schema import CollectionSpec, collection_specs
from tools.command_tally import HANDSHAKE
from tools.costs.request_units import ALL, DocumentWrite, Operation

READS = {"find", "getMore", "aggregate", "count", "distinct"}
WRITES = {"insert", "update", "delete", "findAndModify"}

Term = tuple[Any, ...]


def _frozen(value: Any) -> Any:
    if isinstance(value, Mapping):
        return tuple(sorted((k, _frozen(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    return value


def _values(document: Mapping[str, Any], path: str) -> list[Any]:
    """The values a (dotted) path has in a document: none if missing, one per element across an array."""
    current: list[Any] = [document]
    for part in path.split("."):
        found: list[Any] = []
        for value in current:
            items = value if isinstance(value, list) else [value]
            found += [item[part] for item in items if isinstance(item, Mapping) and part in item]
        current = found
    flat: list[Any] = []
    for value in current:
        flat += value if isinstance(value, list) else [value]
    return [v for v in flat if v is not None]


@dataclass(frozen=True)
class IndexedPaths:
    """The index terms of a collection's documents on Cosmos DB."""

    indexes: tuple[tuple[str, tuple[str, ...]], ...]  # (name, key paths)
    ttl: bool

    @classmethod
    def of(cls, spec: CollectionSpec) -> "IndexedPaths":
        indexes: list[tuple[str, tuple[str, ...]]] = [("_id", ("_id",))]
        if spec.shard_key and spec.shard_key != "_id":
            indexes.append(("shard key", (spec.shard_key,)))
        ttl = False
        for index in spec.indexes:
            keys = tuple(name for name, _ in index.keys_for(cosmos=True))
            if keys == ("_ts",):
                ttl = True
                continue
            indexes.append((index.name, keys))
        return cls(tuple(indexes), ttl)

    def terms(self, document: Mapping[str, Any] | None) -> set[Term]:
        if document is None:
            return set()
        terms: set[Term] = set()
        for name, paths in self.indexes:
            values = [_values(document, path) for path in paths]
            if not any(values):
                continue
            for combination in itertools.product(*[v or [None] for v in values]):
                terms.add((name, *(_frozen(v) for v in combination)))
        return terms

    def changed_indexes(self, before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> tuple[str, ...]:
        """The indexes (by name) whose terms a write from `before` to `after` changed (`_ts` for a TTL)."""
        names = {term[0] for term in self.terms(before) ^ self.terms(after)}
        if self.ttl and (before is not None or after is not None):
            names.add("_ts")
        return tuple(sorted(names))

    def changed(self, before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> tuple[int, int]:
        """(terms deleted, terms inserted) by a write from `before` to `after` (None: absent)."""
        old, new = self.terms(before), self.terms(after)
        deleted, inserted = len(old - new), len(new - old)
        if self.ttl:  # `_ts` changes with every write
            deleted += before is not None
            inserted += after is not None
        return deleted, inserted


def bson_size(document: Mapping[str, Any]) -> int:
    return len(bson.encode(document))


def document_write(
    paths: IndexedPaths, before: Mapping[str, Any] | None, after: Mapping[str, Any] | None, *, matched: bool
) -> DocumentWrite:
    """What one write did to one document, as the cost model prices it: a read when it matched nothing or changed
    nothing, else the document's sizes before and after and the index terms and indexes it changed."""
    if not matched or before == after:
        size = bson_size(before) if before is not None else None
        return DocumentWrite(size, size, unchanged=True)
    deleted, inserted = paths.changed(before, after)
    return DocumentWrite(
        bson_size(before) if before is not None else None,
        bson_size(after) if after is not None else None,
        deleted,
        inserted,
        indexes=paths.changed_indexes(before, after),
    )


def shard_key_values(query: Any, shard_key: str | None) -> int:
    """How many shard key values a filter pins: 1 (one partition, or an unsharded collection), k for `$in` of k
    values, ALL when it pins none (a range, or no condition on the shard key: the query fans out)."""
    if shard_key is None:
        return 1
    if not isinstance(query, Mapping):
        return ALL
    found = [_pinned(query[shard_key])] if shard_key in query else []
    for clause in query.get("$and", []) or []:
        found.append(shard_key_values(clause, shard_key))
    pinned = [n for n in found if n != ALL]
    return min(pinned) if pinned else ALL


def _pinned(condition: Any) -> int:
    if not isinstance(condition, Mapping) or not any(str(k).startswith("$") for k in condition):
        return 1  # equality with a value
    if "$eq" in condition:
        return 1
    if "$in" in condition and isinstance(condition["$in"], list) and condition["$in"]:
        return len({repr(v) for v in condition["$in"]})
    return ALL


def command_reach(command: Mapping[str, Any], name: str, shard_key: str | None) -> int:
    """The shard key values a read command's filter pins (shard_key_values); a change stream reads one physical
    partition's feed at a time (one token per partition, as the app consumes it on Cosmos DB)."""
    if name == "find":
        return shard_key_values(command.get("filter", {}), shard_key)
    if name in {"count", "distinct"}:
        return shard_key_values(command.get("query", {}), shard_key)
    if name == "aggregate":
        pipeline = command.get("pipeline", []) or []
        first = pipeline[0] if pipeline else {}
        if "$changeStream" in first:
            return 1
        return shard_key_values(first.get("$match", {}), shard_key)
    return 1


@dataclass
class Measured:
    """What one command did, as recorded: the operation for the cost model, and its wire sizes."""

    label: str
    operation: Operation
    sent: int
    received: int = 0


@dataclass
class _Pending:
    label: str
    command: str
    collection: str
    sent: int
    reach: int = 1
    cursor: int = 0  # a getMore's cursor
    before: list[tuple[Any, dict[str, Any] | None, bool]] = field(default_factory=list)  # (_id, doc, matched)
    inserted: list[dict[str, Any]] = field(default_factory=list)


class CostMeter(monitoring.CommandListener):
    """Records every command (handshakes aside) under the current label; `observe` names the server's URI to
    read write effects aside (without it, writes carry no document sizes or index terms)."""

    def __init__(
        self, settings: Settings | None = None, observe: str | None = None, extra: Sequence[CollectionSpec] = ()
    ) -> None:
        specs = [*collection_specs(settings or Settings()), *extra]
        self._paths = {spec.name: IndexedPaths.of(spec) for spec in specs}
        self._shard_keys = {spec.name: spec.shard_key for spec in specs}
        self._cursors: dict[int, int] = {}  # cursor id -> the reach of the command that opened it
        self._observer: MongoClient[dict[str, Any]] | None = (
            MongoClient(observe, tz_aware=True, retryWrites=False) if observe else None
        )
        self._pending: dict[int, _Pending] = {}
        self._lock = threading.Lock()
        self.label = ""
        self.measured: list[Measured] = []
        self.recording = True

    def close(self) -> None:
        if self._observer is not None:
            self._observer.close()

    @contextlib.contextmanager
    def labelled(self, label: str) -> Iterator[None]:
        previous, self.label = self.label, label
        try:
            yield
        finally:
            self.label = previous

    def clear(self) -> None:
        with self._lock:
            self.measured.clear()

    def operations(self, label: str | None = None) -> list[Operation]:
        return [m.operation for m in self.measured if label is None or m.label == label]

    # --- the listener ---

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if not self.recording or event.command_name in HANDSHAKE:
            return
        command = event.command
        collection = command.get(event.command_name)
        name = collection if isinstance(collection, str) else str(command.get("collection", ""))
        pending = _Pending(self.label, event.command_name, name, bson_size(command))
        if event.command_name == "getMore":
            pending.cursor = int(command.get("getMore", 0))
            pending.reach = self._cursors.get(pending.cursor, 1)
        elif event.command_name in READS:
            pending.reach = command_reach(command, event.command_name, self._shard_keys.get(name))
        if self._observer is not None and event.command_name in WRITES:
            db = self._observer[event.database_name]
            self._look_before(db, pending, command)
        with self._lock:
            self._pending[event.request_id] = pending

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        with self._lock:
            pending = self._pending.pop(event.request_id, None)
        if pending is None:
            return
        operation = Operation(pending.command, pending.collection, reach=pending.reach)
        reply = event.reply
        cursor = reply.get("cursor")
        if isinstance(cursor, Mapping):
            with self._lock:
                if cursor.get("id"):
                    self._cursors[int(cursor["id"])] = pending.reach
                elif pending.command == "getMore":  # the cursor is exhausted: forget it
                    self._cursors.pop(pending.cursor, None)
            batch = cursor.get("firstBatch", cursor.get("nextBatch", [])) or []
            operation.returned = [bson_size(d.get("fullDocument") or d) for d in batch if isinstance(d, Mapping)]
        if pending.command == "findAndModify" and isinstance(reply.get("value"), Mapping):
            operation.reply_document = bson_size(reply["value"])
        if self._observer is not None and pending.command in WRITES:
            operation.writes = self._effects(self._observer[event.database_name], pending, reply)
        measured = Measured(pending.label, operation, pending.sent, bson_size(reply))
        with self._lock:
            self.measured.append(measured)

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        with self._lock:
            self._pending.pop(event.request_id, None)

    # --- write effects ---

    def _look_before(self, db: Database[Any], pending: _Pending, command: Mapping[str, Any]) -> None:
        collection = db[pending.collection]
        if pending.command == "insert":
            pending.inserted = [dict(d) for d in command.get("documents", [])]
            return
        if pending.command == "update":
            statements = [(u["q"], bool(u.get("multi"))) for u in command.get("updates", [])]
        elif pending.command == "delete":
            statements = [(d["q"], d.get("limit", 0) == 0) for d in command.get("deletes", [])]
        else:  # findAndModify
            statements = [(command.get("query", {}), False)]
        for query, multi in statements:
            found = list(collection.find(query)) if multi else [d for d in [collection.find_one(query)] if d]
            if found:
                pending.before += [(doc["_id"], doc, True) for doc in found]
            elif "_id" in query and not isinstance(query["_id"], Mapping):  # a point write that matched nothing
                pending.before.append((query["_id"], collection.find_one({"_id": query["_id"]}), False))

    def _effects(self, db: Database[Any], pending: _Pending, reply: Mapping[str, Any]) -> list[DocumentWrite]:
        paths = self._paths.get(pending.collection, IndexedPaths((("_id", ("_id",)),), False))
        collection = db[pending.collection]
        failed = {e.get("index") for e in reply.get("writeErrors", []) or []}
        effects: list[DocumentWrite] = []
        if pending.command == "insert":
            for i, doc in enumerate(pending.inserted):
                if i in failed:  # a duplicate key: the existing document was looked at
                    effects.append(DocumentWrite(bson_size(doc), bson_size(doc), unchanged=True))
                else:
                    deleted, inserted = paths.changed(None, doc)
                    effects.append(DocumentWrite(None, bson_size(doc), deleted, inserted))
            return effects
        for key, before, matched in pending.before:
            after = collection.find_one({"_id": key})
            if before is None and not matched:
                continue  # nothing there: an upsert's insert is counted below, or nothing happened
            effects.append(document_write(paths, before, after, matched=matched))
        for upserted in reply.get("upserted", []) or []:
            after = collection.find_one({"_id": upserted["_id"]})
            deleted, inserted = paths.changed(None, after)
            effects.append(DocumentWrite(None, bson_size(after) if after else None, deleted, inserted))
        last_error = reply.get("lastErrorObject")
        if isinstance(last_error, Mapping) and last_error.get("upserted") is not None:  # findAndModify upsert
            after = collection.find_one({"_id": last_error["upserted"]})
            deleted, inserted = paths.changed(None, after)
            effects.append(DocumentWrite(None, bson_size(after) if after else None, deleted, inserted))
        return effects
