"""What a read meets from the index catalog before it runs: a sort no ready index serves exactly is refused
(code 2), and a filter on a path whose index is being dropped misses what that removal has reached (the command
is rewritten to exclude those documents). The catalog (readiness, removals) and the pages it follows are
indexes.py's."""

import hashlib
from collections.abc import Mapping
from typing import Any

from tools.cosmos_store import rules
from tools.cosmos_store.indexes import IndexCatalog
from tools.cosmos_store.partitions import Collection, id_of
from tools.cosmos_store.state import StoreState
from tools.cosmos_store.targeting import filter_of

Document = dict[str, Any]


def sort_problem(indexes: IndexCatalog, database: str, collection: str, name: str, command: Document) -> str | None:
    """Why Cosmos DB would refuse a find's, findAndModify's or aggregate's sort(s), or None."""
    sorts: list[Any] = []
    if name in {"find", "findAndModify"}:
        sorts = [command.get("sort")]
    elif name == "aggregate":
        sorts = [s["$sort"] for s in command.get("pipeline", []) if isinstance(s, Mapping) and "$sort" in s]
    for sort in sorts:
        if isinstance(sort, Mapping) and sort:
            problem = indexes.sort_problem(database, collection, name, sort)
            if problem is not None:
                return problem
    return None


def hidden_by_drops(state: StoreState, collection: Collection, name: str, command: Document) -> Document | None:
    """The command rewritten to miss what a running index removal has reached, if its filter names a path
    being removed (indexes.py quotes the page), else None. The removal walks the documents indexed before
    it began in a fixed order, in proportion to its time; documents written since it began are not in the
    index it reads at all. The least forgiving reading of "inconsistent and incomplete"."""
    if not state.options.incomplete_during_index_drops:
        return None
    database, target = collection.name.split(".", 1)
    paths = rules.filter_paths(filter_of(name, command))
    removals = [r for r in state.indexes.removing(database, target) if r.paths & paths] if paths else []
    if not removals:
        return None
    now = state.options.clock()
    hidden: set[bytes] = set()
    documents = state.partitions.documents_of(collection)
    for removal in removals:
        before = sorted((k for k, d in documents if d.written_at <= removal.started), key=_removal_order)
        hidden |= {k for k, d in documents if d.written_at > removal.started}
        hidden |= set(before[: int(len(before) * removal.progress(now))])
    if not hidden:
        return None
    excluded = {"_id": {"$nin": [id_of(k) for k in hidden]}}
    if name == "aggregate":
        return {**command, "pipeline": [{"$match": excluded}, *command.get("pipeline", [])]}
    key = "filter" if name == "find" else "query"
    return {**command, key: {"$and": [command.get(key) or {}, excluded]}}


def _removal_order(key: bytes) -> bytes:
    return hashlib.md5(key).digest()
