"""Create every collection and index the app needs (sharded through Cosmos' `customAction` on Cosmos DB), replacing
an index whose keys changed only once its successor is built; idempotent. And check what a deployment of infra/
would change. Why and how: docs/operations.md, "Changing an index's keys"; usage: docs/local-development.md.
The command, `./dev setup-store`: shared/store/setup_command.py.
"""

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from dataclasses import field as default
from datetime import datetime
from typing import Any

from bson import SON
from pymongo import IndexModel, UpdateOne
from pymongo.database import Database

from shared.devices.heartbeat_document import LATE_AT, RING, RING_TIME, USER_BUCKET, late_flags
from shared.instants import utc_now
from shared.settings import Settings
from shared.store import cosmos, schema
from shared.store.partitioning import BUCKET_FIELD, bucket_of
from shared.store.retries import RetryPolicy, with_retries, write_idempotent
from shared.store.schema import CollectionSpec, IndexSpec, collection_specs

log = logging.getLogger(__name__)

ALTERNATE = "_alt"  # an index's other name: a change of keys is built under it before the old one goes
INDEX_BUILD_WAIT_S = 3600.0  # longest the setup waits for Cosmos DB to build an index, per collection
INDEX_BUILD_POLL_S = 10.0


class IndexBuildPending(Exception):
    """Cosmos DB is still building an index after the wait: the old one is kept; run the setup again later."""


@dataclass(frozen=True)
class BuildWait:
    """How the setup waits for Cosmos DB's index builds (tests pass a fake clock and sleep)."""

    timeout_s: float = INDEX_BUILD_WAIT_S
    poll_s: float = INDEX_BUILD_POLL_S
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep


@dataclass
class IndexPlan:
    """What one collection's declared indexes need: models to create, then (once built) names to drop."""

    create: list[IndexModel] = default(default_factory=list)
    drop: list[str] = default(default_factory=list)
    replaced: list[str] = default(default_factory=list)  # declared names whose keys change


def ensure_store(db: Database[Any], settings: Settings, *, on_cosmos: bool, wait: BuildWait | None = None) -> list[str]:
    """Create what is missing and replace indexes whose keys changed (built before the old ones go); return a line
    per collection saying what it has. IndexBuildPending if Cosmos DB is still building one after the wait."""
    existing = set(db.list_collection_names())
    report = []
    for spec in collection_specs(settings):
        if spec.name not in existing:
            _create_collection(db, spec, on_cosmos=on_cosmos)
        _drop_changed_expiry(db, spec, on_cosmos=on_cosmos)
        plan = _index_plan(spec, db[spec.name].index_information(), on_cosmos=on_cosmos)
        if plan.create:
            db[spec.name].create_indexes(plan.create)
        # An index replacing another, or added to a collection that holds documents, serves queries only once its
        # transformation ends; on an empty collection it ends at once, and a new deployment need not wait for it.
        if on_cosmos and (plan.drop or (plan.create and db[spec.name].estimated_document_count() > 0)):
            wait_for_index_builds(db, spec.name, wait or BuildWait())
        for name in plan.drop:
            log.warning("setup: %s: the index %s is replaced by its new keys, built; dropping it", spec.name, name)
            db[spec.name].drop_index(name)
        names = ", ".join(index.name for index in spec.indexes) or "_id only"
        line = f"{spec.name}: shard key {spec.shard_key or '(unsharded)'}; indexes: {names}"
        report.append(line + (f" (rebuilt with new keys: {', '.join(plan.replaced)})" if plan.replaced else ""))
    return report


def _index_plan(spec: CollectionSpec, existing: Mapping[str, Any], *, on_cosmos: bool) -> IndexPlan:
    """Per declared index: nothing if an index has its keys (its two names, if they have old keys, are dropped
    once built); created under its name if neither exists; under its free name if the other holds old
    keys, which are dropped once the new ones are built. A TTL index is created under its name (its changes are
    `_drop_changed_expiry`'s)."""
    plan = IndexPlan()
    for index in spec.indexes:
        keys = list(index.keys_for(on_cosmos))
        if index.expire_after_seconds is not None:
            if not _expiry_indexes(existing, index, on_cosmos=on_cosmos):
                plan.create.append(_index_model(index, index.name, on_cosmos=on_cosmos))
            continue
        held = [name for name in (index.name, index.name + ALTERNATE) if name in existing]
        # Any name with the declared keys will do: an index ARM deployed (infra/, which cannot name indexes) too.
        current = [name for name, info in existing.items() if _keys_of(info) == keys]
        if current:
            plan.drop += [name for name in held if name not in current]
        elif not held:
            plan.create.append(_index_model(index, index.name, on_cosmos=on_cosmos))
        elif len(held) == 2:
            log.error(
                "setup: %s: both %s and %s exist with other keys than declared; drop the one no running code needs, "
                "then run the setup again",
                spec.name,
                *held,
            )
        else:
            free = index.name + ALTERNATE if held == [index.name] else index.name
            log.warning(
                "setup: %s: index %s has other keys than declared; building them as %s", spec.name, held[0], free
            )
            plan.create.append(_index_model(index, free, on_cosmos=on_cosmos))
            plan.drop += held
            plan.replaced.append(index.name)
    return plan


def _keys_of(info: Mapping[str, Any]) -> list[tuple[str, int]]:
    return [(key, int(direction)) for key, direction in info["key"]]


def index_builds(db: Database[Any], collection: str) -> list[dict[str, Any]]:
    """The collection's index builds Cosmos DB reports as running (`currentOp`); the command and its reply
    (`inprog`, each build's `progress.done` of `total`) are
    https://learn.microsoft.com/azure/cosmos-db/mongodb/indexing#track-index-progress."""
    command = SON([("currentOp", 1), ("command.createIndexes", collection), ("command.$db", db.name)])
    return list(db.client.admin.command(command).get("inprog", []))


def _progress(build: Mapping[str, Any]) -> str:
    progress = build.get("progress", {})
    return f"{progress.get('done', '?')} of {progress.get('total', '?')}"


def wait_for_index_builds(db: Database[Any], collection: str, wait: BuildWait) -> None:
    """Poll Cosmos DB's `currentOp` for the collection's index builds until there are none (index_builds);
    IndexBuildPending past `wait.timeout_s`."""
    give_up = wait.clock() + wait.timeout_s
    while True:
        building = index_builds(db, collection)
        if not building:
            return
        done = _progress(building[0])
        if wait.clock() >= give_up:
            raise IndexBuildPending(
                f"{collection}: Cosmos DB is still building an index ({done}) after {wait.timeout_s:g} s; the old "
                "index is kept: run the setup again later to finish"
            )
        log.info("setup: %s: Cosmos DB is building an index (%s); waiting", collection, done)
        wait.sleep(wait.poll_s)


def deploy_problems(db: Database[Any], settings: Settings, *, on_cosmos: bool) -> list[str]:
    """What deploying infra/ would do to the indexes the running code has, one line each, naming the collection,
    the index and its keys; empty when it changes none. A collection the account lacks is not a problem: the
    deployment creates it with every index, built at once on an empty collection."""
    existing = set(db.list_collection_names())
    problems: list[str] = []
    for spec in collection_specs(settings):
        if spec.name in existing:
            problems += _index_changes(spec, db[spec.name].index_information(), on_cosmos=on_cosmos)
            if on_cosmos:
                building = index_builds(db, spec.name)
                problems += [f"{spec.name}: Cosmos DB is still building an index ({_progress(b)})" for b in building]
    return problems


def _index_changes(spec: CollectionSpec, existing: Mapping[str, Any], *, on_cosmos: bool) -> list[str]:
    """The indexes a deployment would drop from the collection or build in it, TTL indexes aside. An index is
    known by its keys' names, as ARM declares it (no direction, no name)."""
    declared = {_names(index.keys_for(on_cosmos)): index.name for index in spec.indexes if not _expires(index)}
    live = {name: _names(_keys_of(info)) for name, info in existing.items() if "expireAfterSeconds" not in info}
    dropped = [
        f"{spec.name}: the deployment would drop the index {name} {list(keys)}, which the running code may use "
        "(infra/ no longer declares it)"
        for name, keys in sorted(live.items())
        if keys != ("_id",) and keys not in declared
    ]
    built = [
        f"{spec.name}: the deployment would build the index {name} {list(keys)} in place; code that needs it fails "
        "until it is built"
        for keys, name in declared.items()
        if keys not in live.values()
    ]
    return dropped + built


def _names(keys: Any) -> tuple[str, ...]:
    return tuple(str(key) for key, _direction in keys)


def _expires(index: IndexSpec) -> bool:
    return index.expire_after_seconds is not None


def _drop_changed_expiry(db: Database[Any], spec: CollectionSpec, *, on_cosmos: bool) -> None:
    """Drop each TTL index whose days changed (a retention setting), to be created again with them: an index's
    options cannot be changed in place on Cosmos DB, and MongoDB refuses to create it differently (no query needs
    it meanwhile; Cosmos DB allows one TTL index a collection). Recognised by its keys, not its name: the Bicep's
    TTL index on `_ts` (ARM names it itself) is ours too."""
    existing = db[spec.name].index_information()
    for index in spec.indexes:
        if index.expire_after_seconds is None:
            continue
        keys = list(index.keys_for(on_cosmos))
        for name, found in existing.items():
            same_keys = _keys_of(found) == keys
            if (same_keys or name == index.name) and (
                not same_keys or found.get("expireAfterSeconds") != index.expire_after_seconds
            ):
                log.info("%s: index %s changed, creating it again", spec.name, name)
                db[spec.name].drop_index(name)


def _expiry_indexes(existing: Mapping[str, Any], index: IndexSpec, *, on_cosmos: bool) -> list[str]:
    """The names of the existing indexes that are the declared TTL index: its keys and its days, whatever the
    name (ours, or the one ARM gave the Bicep's)."""
    keys = list(index.keys_for(on_cosmos))
    return [
        name
        for name, info in existing.items()
        if _keys_of(info) == keys and info.get("expireAfterSeconds") == index.expire_after_seconds
    ]


def _create_collection(db: Database[Any], spec: CollectionSpec, *, on_cosmos: bool) -> None:
    if on_cosmos:
        cosmos.create_sharded_collection(db, spec.name, spec.shard_key)
    else:
        db.create_collection(spec.name)


def _index_model(index: IndexSpec, name: str, *, on_cosmos: bool) -> IndexModel:
    options: dict[str, Any] = {"name": name}
    if index.unique:
        options["unique"] = True
    if index.expire_after_seconds is not None:
        options["expireAfterSeconds"] = index.expire_after_seconds
    return IndexModel(list(index.keys_for(on_cosmos)), **options)


# The collections whose documents carry the bucket of a key (the partitioned report feeds and check sweeps
# select by it), and that key.
# (collection, the field holding a bucket, the field it is the bucket of)
BUCKETED = (
    (schema.BOTTLES, BUCKET_FIELD, "bottle_id"),
    (schema.BOTTLE_ACTIONS, BUCKET_FIELD, "bottle_id"),
    (schema.BOTTLE_HEARTBEATS, BUCKET_FIELD, "bottle_id"),
    (schema.BOTTLE_HEARTBEATS, USER_BUCKET, "user_id"),
    (schema.NOTIFICATIONS, BUCKET_FIELD, "bottle_id"),
    (schema.USER_HOURLY_REPORTS, BUCKET_FIELD, "user_id"),
)


def backfill_buckets(
    db: Database[Any], policy: RetryPolicy, batch: int = 500, *, now: datetime | None = None
) -> dict[str, int]:
    """Give every document stored before documents carried `bucket` (and heartbeat documents `ub`, their
    owner's bucket) its bucket, which no partition would otherwise ever read; per collection and field, how
    many were updated. A scan of each collection for documents without one (on Cosmos DB a cross-partition
    query): run it once, not on every setup. Idempotent.

    A heartbeat document given its `ub` joins the heartbeat tally's sweep after passes that went on without it:
    every hour its ring holds is flagged as a late heartbeat's is, and `la` moved on to `now`, so the tally's
    next pass counts them all (shared/feeds/sweeps.py: pass_hours). The write is guarded by the ring's
    clock `r` as read: a heartbeat written meanwhile leaves the document for the next round."""
    now = now or utc_now()
    updated: dict[str, int] = {}
    for name, field, key in BUCKETED:
        collection, count = db[name], 0
        tally = name == schema.BOTTLE_HEARTBEATS and field == USER_BUCKET
        while True:
            found = _without_bucket(collection, field, key, batch, policy, ring=tally)
            ops = [_given_bucket(d, field, key, now=now if tally else None) for d in found if key in d]
            if not ops:
                break
            count += sum(write_idempotent(collection, list(ops), policy))
        updated[name if field == BUCKET_FIELD else f"{name}.{field}"] = count
    return updated


def _given_bucket(document: dict[str, Any], field: str, key: str, *, now: datetime | None) -> UpdateOne:
    """The write that gives a document its bucket; with `now`, a heartbeat document's ring flagged for the tally."""
    guard = {"_id": document["_id"], key: document[key], field: {"$exists": False}}
    update: dict[str, Any] = {"$set": {field: bucket_of(str(document[key]))}}
    if now is not None:
        guard[RING_TIME] = document.get(RING_TIME)
        flags = late_flags(document)
        if flags:
            update["$bit"] = {f"{RING}.{name}": {"or": value} for name, value in flags.items()}
            update["$max"] = {LATE_AT: now}
    return UpdateOne(guard, update)


def _without_bucket(
    collection: Any, field: str, key: str, batch: int, policy: RetryPolicy, *, ring: bool
) -> list[dict[str, Any]]:
    query = {field: {"$exists": False}}
    projection = dict.fromkeys((key, RING, RING_TIME) if ring else (key,), 1)
    return with_retries(lambda: list(collection.find(query, projection).limit(batch)), policy)
