"""Cosmos DB for MongoDB's rules on what a write or an index may be, as pure functions of a command: the shard
key a document must carry and may not change (61, 66), the unique indexes a sharded or non-empty collection may
get (67), and which filters an index removal makes incomplete. The proxy calls them before it forwards a command.
The rules and their pages: docs/cosmos-store.md, "What it models" (A document's shard key, Unique indexes)."""

from collections.abc import Iterator, Mapping
from typing import Any

# https://learn.microsoft.com/azure/cosmos-db/mongodb/error-codes-solutions
SHARD_KEY_NOT_FOUND = 61
IMMUTABLE_FIELD = 66
CANNOT_CREATE_INDEX = 67  # CannotCreateIndex: "The request to create an index can't be completed."
Document = dict[str, Any]


def filter_paths(query: Any) -> set[str]:
    """The field paths a filter names (through $and, $or and $nor)."""
    paths: set[str] = set()
    if not isinstance(query, Mapping):
        return paths
    for key, value in query.items():
        if key in {"$and", "$or", "$nor"} and isinstance(value, list):
            for part in value:
                paths |= filter_paths(part)
        elif not str(key).startswith("$"):
            paths.add(str(key))
    return paths


def pinned(query: Any, path: str) -> tuple[bool, Any]:
    """(True, value) if the filter fixes `path` to one value by equality, else (False, None)."""
    if not isinstance(query, Mapping) or path not in query:
        return False, None
    value = query[path]
    if isinstance(value, Mapping):
        if set(value) == {"$eq"}:
            return True, value["$eq"]
        if any(str(k).startswith("$") for k in value):
            return False, None
    return True, value


def _statements(name: str, command: Mapping[str, Any]) -> Iterator[tuple[Any, Any, bool]]:
    """(filter, update, upsert) per statement of an update or findAndModify."""
    if name == "update":
        for statement in command.get("updates", []):
            yield statement.get("q", {}), statement.get("u", {}), bool(statement.get("upsert"))
    elif name == "findAndModify" and not command.get("remove"):
        yield command.get("query", {}), command.get("update", {}), bool(command.get("upsert"))


def updates(name: str, command: Mapping[str, Any]) -> list[Any]:
    """The update documents (or pipelines) of an update or findAndModify command."""
    return [update for _, update, _ in _statements(name, command)]


def _set_by(update: Any, path: str) -> tuple[bool, Any]:
    """Whether an update gives `path` a value, and which: a replacement's field, `$set`/`$setOnInsert`, or a
    pipeline's `$set`/`$addFields` (the last one wins)."""
    stages = update if isinstance(update, list) else [update]
    found: tuple[bool, Any] = (False, None)
    for stage in stages:
        if not isinstance(stage, Mapping):
            continue
        if not any(str(k).startswith("$") for k in stage):  # a replacement document
            found = (path in stage, stage.get(path))
            continue
        for operator in ("$set", "$setOnInsert", "$addFields"):
            fields = stage.get(operator)
            if isinstance(fields, Mapping) and path in fields:
                found = (True, fields[path])
    return found


def _changed_by_operator(update: Any, path: str) -> str | None:
    """The operator (other than `$set`/`$setOnInsert`) that changes `path`, if one does."""
    if not isinstance(update, Mapping):
        return None
    for operator, fields in update.items():
        if operator in {"$set", "$setOnInsert"} or not str(operator).startswith("$"):
            continue
        if isinstance(fields, Mapping) and path in fields:
            return str(operator)
        if operator == "$rename" and isinstance(fields, Mapping) and path in fields.values():
            return str(operator)
    return None


def missing_shard_key(name: str, command: Mapping[str, Any], shard_key: str) -> str | None:
    """Why a write leaves a document without its shard key (code 61): an inserted document without it, or an
    upsert whose filter does not fix it by equality and whose update does not set it. The least forgiving
    reading for an upsert: refused even when it would have matched a document (it names no shard key).
    61 ShardKeyNotFound: "The document in your request didn't contain the collection's shard key (Azure Cosmos DB
    partition key)." (the error codes page)"""
    if name == "insert":
        for index, document in enumerate(command.get("documents", [])):
            if isinstance(document, Mapping) and shard_key not in document:
                return f"document {index} of the insert has no shard key '{shard_key}'"
        return None
    for query, update, upsert in _statements(name, command):
        if upsert and not pinned(query, shard_key)[0] and not _set_by(update, shard_key)[0]:
            return f"an upsert whose filter {dict(query)} and update do not give the shard key '{shard_key}'"
    return None


def shard_key_change(name: str, command: Mapping[str, Any], shard_key: str, current: Any) -> str | None:
    """Why a write would change a document's shard key value (code 66), or None. `current(query)` is the shard
    key value of the document the statement would update now (None if none matches). 66 ImmutableField: "The
    request is attempting to change an immutable field" ... "Ensure that your request doesn't attempt to update
    that field or the shard key field." (the error codes page)"""
    for query, update, _ in _statements(name, command):
        operator = _changed_by_operator(update, shard_key)
        if operator is not None:
            return f"{operator} on the shard key '{shard_key}'"
        sets, value = _set_by(update, shard_key)
        if not sets:
            continue
        fixed, fixed_value = pinned(query, shard_key)
        before = fixed_value if fixed else current(query)
        if before is not None and before != value:
            return f"the shard key '{shard_key}' from {before!r} to {value!r}"
    return None


def unique_index_problem(index: Mapping[str, Any], shard_key: str | None, documents: int) -> str | None:
    """Why Cosmos DB refuses a unique index (code 67): on a sharded collection it must lead with the shard key,
    and any unique index needs an empty collection.
    https://learn.microsoft.com/azure/cosmos-db/mongodb/indexing#unique-indexes: "For sharded collections, you
    must provide the shard (partition) key to create a unique index. In other words, all unique indexes on a
    sharded collection are compound indexes where one of the fields is the shard key. The first field in the order
    should be the shard key." ... "Unique indexes need to be created while the collection is empty." """
    if not index.get("unique"):
        return None
    keys = list(dict(index.get("key", {})))
    if shard_key is not None and (not keys or keys[0] != shard_key):
        return f"cannot create unique index over {dict(index.get('key', {}))} with shard key pattern {{{shard_key}: 1}}"
    if documents > 0:
        return (
            f"unique index {index.get('name')!r} refused: the collection holds {documents} documents; unique "
            "indexes need to be created while the collection is empty"
        )
    return None
