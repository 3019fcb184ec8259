"""The indexes a collection has as Cosmos DB sees them: an index counts only once its transformation has ended (a
settable delay after `createIndexes`), a sort needs an index that matches it exactly (the project's rule,
tools/sort_audit.py), a TTL index may only be on `_ts`, and a dropped index's paths are being removed for a while.
How the store models them: docs/cosmos-store.md, "What it models" (Sorts, Index transformations, Filters while an
index is dropped, TTL)."""

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from shared.store.schema import CollectionSpec, IndexSpec
from tools.sort_audit import Query, serving_index

BAD_VALUE = 2
# https://learn.microsoft.com/azure/cosmos-db/mongodb/error-codes-solutions, code 2: "The index path corresponding to
# the specified order-by item is excluded / The order by query does not have a corresponding composite index that it
# can be served from."
SORT_UNSERVED = "The index path corresponding to the specified order-by item is excluded."
# https://learn.microsoft.com/azure/cosmos-db/mongodb/indexing: "A TTL index is an index on the _ts field with an
# "expireAfterSeconds" value." Cosmos DB answers one on any other field with code 2 and this message, as projects
# that met it quote it.
TTL_ONLY_ON_TS = "The 'expireAfterSeconds' option is supported on '_ts' field only."


@dataclass(frozen=True)
class Removal:
    """A dropped index whose transformation runs from `started` to `ends` (the proxy's clock); the proxy hides from
    filters on its `paths` (those whose last index is being dropped) what the removal has reached.
    https://learn.microsoft.com/azure/cosmos-db/mongodb/indexing#background-index-updates: "When adding new
    indexes, there is also no risk of incomplete or inconsistent query results." ... "When removing indexes and
    immediately running queries that have filters on the dropped indexes, results might be inconsistent and
    incomplete until the index transformation finishes." """

    name: str
    paths: frozenset[str]
    started: float
    ends: float

    def progress(self, now: float) -> float:
        return min(1.0, max(0.0, (now - self.started) / (self.ends - self.started)))


@dataclass(frozen=True)
class Index:
    name: str
    keys: tuple[tuple[str, int], ...]
    ready_at: float  # the proxy's clock when its transformation ends
    expire_after_seconds: int | None = None


def keys_of(raw: Mapping[str, Any]) -> tuple[tuple[str, int], ...]:
    return tuple((str(k), int(v) if isinstance(v, int | float) else 1) for k, v in raw.items())


def ttl_problem(index: Mapping[str, Any]) -> str | None:
    """Why Cosmos DB would refuse this index of a createIndexes command, or None."""
    if "expireAfterSeconds" in index and keys_of(index.get("key", {})) != (("_ts", 1),):
        return f"{TTL_ONLY_ON_TS} (index {index.get('name')!r} on {dict(index.get('key', {}))})"
    return None


class IndexCatalog:
    """Per collection, its indexes and when each became usable. A collection the proxy has not seen an index
    change on is loaded from the backend, every index ready."""

    def __init__(
        self, load: Callable[[str, str], list[Mapping[str, Any]]], clock: Callable[[], float], delay: float
    ) -> None:
        self._load = load
        self._clock = clock
        self.delay = delay
        self._indexes: dict[str, dict[str, Index]] = {}
        self._removals: dict[str, list[Removal]] = {}
        self._lock = threading.Lock()

    def _of(self, database: str, collection: str) -> dict[str, Index]:
        full = f"{database}.{collection}"
        found = self._indexes.get(full)
        if found is None:
            found = {
                str(i["name"]): Index(
                    str(i["name"]), keys_of(i.get("key", {})), 0.0, _seconds(i.get("expireAfterSeconds"))
                )
                for i in self._load(database, collection)
            }
            with self._lock:
                found = self._indexes.setdefault(full, found)
        return found

    def load(self, database: str, collection: str) -> None:
        """Know what the collection has before an index change (what is there now is ready)."""
        self._of(database, collection)

    def created(self, database: str, collection: str, indexes: list[Mapping[str, Any]]) -> None:
        ready_at = self._clock() + self.delay
        current = self._of(database, collection)
        with self._lock:
            for raw in indexes:
                name = str(raw.get("name"))
                if name not in current:  # creating an existing index again changes nothing
                    current[name] = Index(
                        name, keys_of(raw.get("key", {})), ready_at, _seconds(raw.get("expireAfterSeconds"))
                    )

    def dropped(self, database: str, collection: str, names: Any) -> None:
        current = self._of(database, collection)
        now = self._clock()
        with self._lock:
            if names == "*":
                gone = [current.pop(n) for n in [n for n in current if n != "_id_"]]
            else:
                found = [current.pop(str(n), None) for n in (names if isinstance(names, list) else [names])]
                gone = [index for index in found if index is not None]
            if self.delay > 0:
                removals = self._removals.setdefault(f"{database}.{collection}", [])
                removals += [Removal(i.name, frozenset(k for k, _ in i.keys), now, now + self.delay) for i in gone]

    def removing(self, database: str, collection: str) -> list[Removal]:
        """The drops still transforming, each with the paths no ready index keeps (a filter on them may miss
        documents until the transformation ends)."""
        now = self._clock()
        full = f"{database}.{collection}"
        with self._lock:
            running = [r for r in self._removals.get(full, []) if r.ends > now]
            if full in self._removals:
                self._removals[full] = running
        if not running:
            return []
        kept = {path for index in self.ready(database, collection) for path, _ in index.keys}
        return [Removal(r.name, r.paths - kept, r.started, r.ends) for r in running if r.paths - kept]

    def forget(self, database: str, collection: str | None = None) -> None:
        with self._lock:
            for catalog in (self._indexes, self._removals):
                for full in list(catalog):
                    if full == f"{database}.{collection}" or (collection is None and full.startswith(f"{database}.")):
                        del catalog[full]

    def building(self, database: str, collection: str) -> list[Index]:
        """The collection's indexes whose transformation has not ended yet."""
        now = self._clock()
        return [i for i in self._of(database, collection).values() if i.ready_at > now]

    def ready(self, database: str, collection: str) -> list[Index]:
        now = self._clock()
        return [i for i in self._of(database, collection).values() if i.ready_at <= now]

    def ttl_seconds(self, database: str, collection: str) -> int | None:
        """The collection's TTL (its ready `_ts` index's expireAfterSeconds), or None."""
        return next(
            (i.expire_after_seconds for i in self.ready(database, collection) if i.expire_after_seconds is not None),
            None,
        )

    def sort_problem(self, database: str, collection: str, command: str, sort: Mapping[str, Any]) -> str | None:
        """Why Cosmos DB would refuse this sort (no ready index matches it exactly), or None. An index still
        transforming does not serve it: the sort fails with code 2, as with no index.
        https://learn.microsoft.com/azure/cosmos-db/index-policy: "Index transformation is an asynchronous operation
        ... While re-indexing is in progress, queries may not return all the matching results, and will do so
        without returning any errors." """
        keys = keys_of(sort)
        if not keys:
            return None
        indexes = [i for i in self.ready(database, collection) if i.name != "_id_"]
        spec = CollectionSpec(collection, None, tuple(IndexSpec(i.name, i.keys) for i in indexes))
        if serving_index(Query(command, database, collection, {}, keys), [spec]) is not None:
            return None
        pending = [i.name for i in self._of(database, collection).values() if i not in indexes and i.name != "_id_"]
        waiting = f"; still transforming: {pending}" if pending else ""
        return f"{SORT_UNSERVED} ({command} on {collection} sorts by {dict(keys)}{waiting})"


def _seconds(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
