"""The commands that shape a collection, as Cosmos DB answers them: `customAction: CreateCollection` (its shard
key), `createIndexes` (a TTL index off `_ts` or a unique index Cosmos DB refuses is refused before it reaches the
backend; one it accepts starts its transformation), `currentOp` (the index builds in progress), and the drops
that make the proxy forget a collection's partitions and indexes. The rules are indexes.py's and rules.py's."""

from collections.abc import Mapping
from typing import Any

from tools.cosmos_store import relay, rules, wire
from tools.cosmos_store.indexes import BAD_VALUE, ttl_problem
from tools.cosmos_store.state import StoreState

NAMESPACE_EXISTS = 48
Document = dict[str, Any]


def create_collection(state: StoreState, database: str, name: str, shard_key: Any) -> Document:
    """customAction CreateCollection: the collection, sharded by `shard_key` (none: unsharded); code 48 if it
    exists."""
    if name in state.observer[database].list_collection_names():
        return wire.error_document(NAMESPACE_EXISTS, f"Collection {database}.{name} already exists.")
    state.observer[database].create_collection(name)
    key = str(shard_key) if shard_key else None
    state.shard_keys.declare(database, name, key)
    state.partitions.set_shard_key(database, name, key)
    return {"ok": 1.0}


def create_indexes(
    state: StoreState,
    connection: relay.Connection,
    request: wire.Message,
    *,
    database: str,
    name: str,
    command: Document,
) -> tuple[float, Document]:
    """createIndexes: refused whole if one of its indexes is (a TTL index off `_ts`: code 2; a unique index
    without the shard key first, or on a collection holding documents: code 67), else run on the backend and,
    if it succeeded, its indexes' transformations begun."""
    indexes = [i for i in command.get("indexes", []) if isinstance(i, Mapping)]
    refusal = _index_refusal(state, database, name, indexes)
    if refusal is not None:
        return 0.0, refusal
    state.indexes.load(database, name)
    reply = relay.backend_reply(connection, request)
    if reply.get("ok"):
        state.indexes.created(database, name, indexes)
    return 0.0, reply


def _index_refusal(state: StoreState, database: str, name: str, indexes: list[Mapping[str, Any]]) -> Document | None:
    shard_key = state.partitions.collection(database, name).shard_key
    for index in indexes:
        problem = ttl_problem(index)
        if problem is not None:
            return wire.error_document(BAD_VALUE, problem)
        documents = int(state.observer[database][name].estimated_document_count()) if index.get("unique") else 0
        unique = rules.unique_index_problem(index, shard_key, documents)
        if unique is not None:
            return wire.error_document(rules.CANNOT_CREATE_INDEX, unique, "CannotCreateIndex")
    return None


def index_builds(state: StoreState, command: Document) -> Document:
    """`currentOp` as Cosmos DB answers it for index progress: with the filter `command.createIndexes` and
    `command.$db`, one entry per index of that collection still transforming, with its `progress`
    (https://learn.microsoft.com/azure/cosmos-db/mongodb/indexing#track-index-progress); nothing else."""
    collection, database = command.get("command.createIndexes"), command.get("command.$db")
    if not isinstance(collection, str) or not isinstance(database, str):
        return {"inprog": [], "ok": 1.0}
    inprog = [
        {
            "command": {
                "createIndexes": collection,
                "indexes": [{"key": dict(i.keys), "name": i.name}],
                "$db": database,
            },
            "msg": "Index Build (background) Index Build (background): 0/1 0%",
            "progress": {"done": 0, "total": 1},
        }
        for i in state.indexes.building(database, collection)
    ]
    return {"inprog": inprog, "ok": 1.0}


def note_drops(state: StoreState, name: str, command: Document, database: str) -> None:
    """Before a drop, dropDatabase or dropIndexes goes on to the backend: forget what it drops (a dropped
    index's removal begins its transformation)."""
    target = command.get(name)
    if name in {"drop", "dropDatabase"}:
        collection_name = target if isinstance(target, str) and name == "drop" else None
        state.partitions.forget(database, collection_name)
        state.indexes.forget(database, collection_name)
    if name == "dropIndexes" and isinstance(target, str):
        state.indexes.dropped(database, target, command.get("index"))
