"""Create every collection and index the app needs. Idempotent: safe to run any number of times.

    python -m shared.store.setup                      # uses MONGODB_CONNECTION_STRING / MONGODB_DATABASE
    python -m shared.store.setup --backfill-buckets   # once, for data stored before documents carried `bucket`

On Cosmos DB the sharded collections are created with their shard keys first (Cosmos' `customAction`);
on any other MongoDB they are plain collections. Azure deployments get the same from infra/ (Bicep).
"""

import argparse
import logging
from datetime import datetime
from typing import Any

from pymongo import IndexModel, UpdateOne
from pymongo.database import Database

from shared.heartbeat_document import LATE_AT, RING, RING_TIME, USER_BUCKET, late_flags
from shared.instants import utc_now
from shared.settings import Settings, get_settings
from shared.store import cosmos, schema
from shared.store.command_line import add_store_arguments, command_line_database
from shared.store.partitioning import BUCKET_FIELD, bucket_of
from shared.store.retries import RetryPolicy, with_retries, write_idempotent
from shared.store.schema import CollectionSpec, collection_specs

log = logging.getLogger(__name__)


def ensure_store(db: Database[Any], settings: Settings, *, on_cosmos: bool) -> list[str]:
    """Create what is missing; return a line per collection saying what it has."""
    existing = set(db.list_collection_names())
    report = []
    for spec in collection_specs(settings):
        if spec.name not in existing:
            _create_collection(db, spec, on_cosmos=on_cosmos)
        replaced = _drop_changed_indexes(db, spec, on_cosmos=on_cosmos)
        _drop_changed_expiry(db, spec, on_cosmos=on_cosmos)
        models = [_index_model(index, on_cosmos=on_cosmos) for index in spec.indexes]
        if models:
            db[spec.name].create_indexes(models)
        names = ", ".join(index.name for index in spec.indexes) or "_id only"
        line = f"{spec.name}: shard key {spec.shard_key or '(unsharded)'}; indexes: {names}"
        report.append(line + (f" (rebuilt with new keys: {', '.join(replaced)})" if replaced else ""))
    return report


def _drop_changed_indexes(db: Database[Any], spec: CollectionSpec, *, on_cosmos: bool) -> list[str]:
    """Drop the indexes that exist under a declared name with other keys (a schema change, e.g. the checks'
    sweep indexes gaining `bucket`), so that they are created again with the declared ones; the names dropped.
    A store whose index keeps its name and changes keys would otherwise refuse the create (IndexKeySpecsConflict).
    """
    declared = {index.name: list(index.keys_for(on_cosmos)) for index in spec.indexes}
    existing = db[spec.name].index_information()
    changed = [
        name
        for name, info in existing.items()
        if name in declared and [(field, int(order)) for field, order in info["key"]] != declared[name]
    ]
    for name in changed:
        log.warning("setup: index %s.%s has other keys than declared; dropping it to create it anew", spec.name, name)
        db[spec.name].drop_index(name)
    return changed


def _drop_changed_expiry(db: Database[Any], spec: CollectionSpec, *, on_cosmos: bool) -> None:
    """A TTL index whose days changed (a retention setting) is dropped, to be created again with them: an
    index's options cannot be changed in place on Cosmos DB, and MongoDB refuses to create it differently."""
    existing = db[spec.name].index_information()
    for index in spec.indexes:
        found = existing.get(index.name)
        if found is None or index.expire_after_seconds is None:
            continue
        keys = [(key, int(direction)) for key, direction in found["key"]]
        if found.get("expireAfterSeconds") != index.expire_after_seconds or keys != list(index.keys_for(on_cosmos)):
            log.info("%s: index %s changed, creating it again", spec.name, index.name)
            db[spec.name].drop_index(index.name)


def _create_collection(db: Database[Any], spec: CollectionSpec, *, on_cosmos: bool) -> None:
    if on_cosmos:
        cosmos.create_sharded_collection(db, spec.name, spec.shard_key)
    else:
        db.create_collection(spec.name)


def _index_model(index: Any, *, on_cosmos: bool) -> IndexModel:
    options: dict[str, Any] = {"name": index.name}
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
    next pass counts them all (shared/reports/documents.py: tally_hours). The write is guarded by the ring's
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="./dev setup-store", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_store_arguments(parser)
    parser.add_argument(
        "--backfill-buckets",
        action="store_true",
        help="also give documents stored before they carried `bucket` their bucket (scans each collection once)",
    )
    args = parser.parse_args(argv)
    with command_line_database(parser, args) as (db, uri):
        for line in ensure_store(db, get_settings(), on_cosmos=cosmos.is_cosmos_uri(uri)):
            print(line)
        if args.backfill_buckets:
            for name, count in backfill_buckets(db, RetryPolicy.from_settings(get_settings())).items():
                print(f"{name}: {count} documents given their bucket")


if __name__ == "__main__":
    main()
