"""Create every collection and index the app needs. Idempotent: safe to run any number of times.

    python -m shared.store.setup            # uses MONGODB_CONNECTION_STRING / MONGODB_DATABASE

On Cosmos DB the sharded collections are created with their shard keys first (Cosmos' `customAction`);
on any other MongoDB they are plain collections. Azure deployments get the same from infra/ (Bicep).
"""

import argparse
import logging
from typing import Any

from pymongo import IndexModel
from pymongo.database import Database

from shared.settings import Settings, get_settings
from shared.store import cosmos
from shared.store.command_line import add_store_arguments, command_line_database
from shared.store.schema import CollectionSpec, collection_specs

log = logging.getLogger(__name__)


def ensure_store(db: Database[Any], settings: Settings, *, on_cosmos: bool) -> list[str]:
    """Create what is missing; return a line per collection saying what it has."""
    existing = set(db.list_collection_names())
    report = []
    for spec in collection_specs(settings):
        if spec.name not in existing:
            _create_collection(db, spec, on_cosmos=on_cosmos)
        _drop_changed_expiry(db, spec, on_cosmos=on_cosmos)
        models = [_index_model(index, on_cosmos=on_cosmos) for index in spec.indexes]
        if models:
            db[spec.name].create_indexes(models)
        names = ", ".join(index.name for index in spec.indexes) or "_id only"
        report.append(f"{spec.name}: shard key {spec.shard_key or '(unsharded)'}; indexes: {names}")
    return report


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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="./dev setup-store", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_store_arguments(parser)
    args = parser.parse_args(argv)
    with command_line_database(parser, args) as (db, uri):
        for line in ensure_store(db, get_settings(), on_cosmos=cosmos.is_cosmos_uri(uri)):
            print(line)


if __name__ == "__main__":
    main()
