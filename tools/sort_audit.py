"""Every query the app sends (`find` and `findAndModify` sorts, `aggregate` `$sort` stages), seen by a pymongo
CommandListener, and whether an index serves its sort as Cosmos DB for MongoDB requires (`serving_index`). The tests
audit every query with it (tests/conftest.py: `sort_audit`); the Cosmos-faithful store refuses a sort by the same
rule (tools/cosmos_store/indexes.py). The rule and why: docs/cosmos-db.md, "Every sort is an index's keys, exactly"."""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pymongo import monitoring

from shared.store.schema import CollectionSpec

Sort = tuple[tuple[str, int], ...]
ID_INDEX = "_id_"


@dataclass(frozen=True)
class Query:
    command: str  # find, findAndModify or aggregate
    database: str
    collection: str
    filter: Mapping[str, Any]
    sort: Sort  # () when unsorted


def _sort_of(raw: Any) -> Sort:
    return tuple((str(name), int(direction)) for name, direction in (raw or {}).items())


def queries_of(event: monitoring.CommandStartedEvent) -> list[Query]:
    """The queries a command makes (one, or one per `$sort` stage of a pipeline; none for other commands)."""
    command, name = event.command, event.command_name
    collection = command.get(name)
    if not isinstance(collection, str):
        return []
    if name == "find":
        return [Query(name, event.database_name, collection, command.get("filter", {}), _sort_of(command.get("sort")))]
    if name == "findAndModify":
        return [Query(name, event.database_name, collection, command.get("query", {}), _sort_of(command.get("sort")))]
    if name == "aggregate":
        pipeline = command.get("pipeline", [])
        match: Mapping[str, Any] = next((stage["$match"] for stage in pipeline if "$match" in stage), {})
        sorts = [_sort_of(stage["$sort"]) for stage in pipeline if "$sort" in stage]
        return [Query(name, event.database_name, collection, match, sort) for sort in sorts or [()]]
    return []


def serving_index(query: Query, specs: Iterable[CollectionSpec]) -> str | None:
    """The name of the index that serves the query's sort (`_id_` for the default index; an unsorted query needs
    none and gets ""), or None when no index does. The rule, strict as Cosmos DB is (filters do not matter to it):
    - a sort on `_id` alone, either way, is served by the `_id` index every collection has;
    - otherwise its fields must be exactly the key fields of one index `specs` declares (`collection_specs`, the
      keys Cosmos DB gets): the same fields in the same order, none left out and none added, with every direction
      as declared or every direction reversed."""
    if not query.sort:
        return ""
    if len(query.sort) == 1 and query.sort[0][0] == "_id":
        return ID_INDEX
    spec = next((s for s in specs if s.name == query.collection), None)
    if spec is None:
        return None
    for index in spec.indexes:
        keys = index.keys_for(cosmos=True)
        if [name for name, _ in keys] != [name for name, _ in query.sort]:
            continue
        directions = [(declared, asked) for (_, declared), (_, asked) in zip(keys, query.sort, strict=True)]
        if all(declared == asked for declared, asked in directions) or all(
            declared == -asked for declared, asked in directions
        ):
            return index.name
    return None


class SortAudit(monitoring.CommandListener):
    """The queries (find, findAndModify, aggregate) of every client it listens to, in order."""

    def __init__(self) -> None:
        self.queries: list[Query] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.queries.extend(queries_of(event))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass

    def clear(self) -> None:
        self.queries.clear()

    def sorted_reads(self, specs: Iterable[CollectionSpec]) -> set[tuple[str, str | None]]:
        """(collection, serving index or None) of every sorted query."""
        specs = tuple(specs)
        return {(q.collection, serving_index(q, specs)) for q in self.queries if q.sort}

    def unserved(self, specs: Iterable[CollectionSpec]) -> list[str]:
        """A line per distinct sorted query no index serves, naming what the collection does have."""
        specs = tuple(specs)
        problems: dict[str, None] = {}
        for query in self.queries:
            if serving_index(query, specs) is not None:
                continue
            spec = next((s for s in specs if s.name == query.collection), None)
            declared = [dict(i.keys_for(cosmos=True)) for i in spec.indexes] if spec else "(no declared collection)"
            asked = f"{query.command} on {query.collection} filtered on {sorted(query.filter)}"
            problems[f"{asked} sorts by {dict(query.sort)}; no index matches it exactly: _id, {declared}"] = None
        return list(problems)
