"""Calibration on a real account: the charge Cosmos DB reports for each kind of operation the cost model prices,
beside the model's figure for the same command, so ops can check tools/costs/request_units.py on their own account
in minutes.

    ./dev bench --mongodb-uri "<Cosmos DB connection string>" [--database NAME] [--allow-non-empty]

It sets the store up (collections, shard keys, indexes: shared/store/setup.py), provisions one bottle and sends
it a heartbeat and an opened event through the app's own code, then runs one command at a time (the app's
heartbeat write, a point read, an insert, a replace, a query inside one shard key value, one that fans out, a
delete), reading each command's charge with `getLastRequestStatistics` on the same connection. It writes test data,
so it refuses a database that holds documents unless --allow-non-empty, and it removes what it wrote (and the
collections it created) when it ends, however it ends. Any server that answers `getLastRequestStatistics` will do;
elsewhere the measured column says so.
"""

import argparse
import contextlib
import json
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pymongo import MongoClient
from pymongo.database import Database

from benchmarks.harness import print_table
from shared.bottles.provisioning import provision
from shared.bottles.spec import BottleSpec
from shared.ingestion.receive import receive
from shared.instants import utc_now
from shared.settings import Settings, get_settings
from shared.store import cosmos, schema
from shared.store.client import MAX_IDLE_TIME_MS
from shared.store.schema import collection_specs
from shared.store.setup import ensure_store
from tools.costs.meter import CostMeter
from tools.costs.request_units import Operation

BOTTLE = "calibration-bottle"
USER = "calibration-user"
ChargeOf = Callable[[Database[Any]], float | None]


class NotEmpty(Exception):
    """The database holds documents and --allow-non-empty was not given."""


@dataclass
class Measured:
    operation: str
    commands: int
    model: float | None
    charged: float | None


def calibration_client(uri: str, listeners: Sequence[Any]) -> MongoClient[dict[str, Any]]:
    """One connection (getLastRequestStatistics reports the connection's last request), with the meter."""
    return MongoClient(
        uri,
        tz_aware=True,
        retryWrites=False,
        maxPoolSize=1,
        maxIdleTimeMS=MAX_IDLE_TIME_MS,
        event_listeners=list(listeners),
    )


def holds_documents(db: Database[Any]) -> list[str]:
    """The collections of `db` that hold at least one document."""
    return [name for name in sorted(db.list_collection_names()) if db[name].find_one({}, {"_id": 1}) is not None]


class Calibration:
    """Runs the operations one command at a time, each measured by the meter (the model) and by the server."""

    def __init__(self, db: Database[Any], meter: CostMeter, settings: Settings, charge_of: ChargeOf) -> None:
        self.db, self.meter, self.settings, self.charge_of = db, meter, settings, charge_of
        self.results: list[Measured] = []
        self.partitions = {spec.name: self._partitions(spec.name) for spec in collection_specs(settings)}

    def _partitions(self, collection: str) -> int:
        tokens = cosmos.change_stream_tokens(self.db, collection)
        return len(tokens) if tokens else 1

    def measure(self, name: str, command: Callable[[], Any]) -> Any:
        """Run one command, then read its charge on the same connection."""
        self.meter.clear()
        self.meter.recording = True
        try:
            result = command()
        finally:
            self.meter.recording = False
        operations = self.meter.operations()
        charged = self.charge_of(self.db)
        model = self._model(operations[-1]) if operations else None
        self.results.append(Measured(name, len(operations), model, charged))
        return result

    def _model(self, operation: Operation) -> float:
        return operation.ru(self.partitions.get(operation.collection, 1))

    def run(self, now: datetime) -> list[Measured]:
        db, settings = self.db, self.settings
        spec = BottleSpec.model_validate({"user_id": USER, "medication": "Calibrine", "schedule": {"every_hours": 8}})
        # Provisioned an hour before its heartbeats, as a device's come after its provisioning: the heartbeat
        # write measured is then the common one (an update; a findAndModify follows only for a repeat).
        earlier = now - timedelta(hours=1)
        key = provision(db, BOTTLE, spec, rotate_key=False, now=earlier, settings=settings).device_key
        assert key is not None, "the calibration bottle existed already"
        # A heartbeat and an opened event first, so that the measured ones find documents at their usual size.
        self._send(key, {"type": "heartbeat", "time": (now - timedelta(minutes=30)).isoformat()}, now)
        opened = {"type": "opened", "time": (now - timedelta(minutes=20)).isoformat(), "mass_of_contents": 15.0}
        self._send(key, {**opened, "number_of_pills": 30}, now)
        beat = {"type": "heartbeat", "time": (now - timedelta(seconds=5)).isoformat()}
        heartbeat = "heartbeat: the app's update of its heartbeat document"
        self.measure(heartbeat, lambda: self._send(key, beat, now))
        one = {"_id": BOTTLE, "bottle_id": BOTTLE}
        bottles, actions = db[schema.BOTTLES], db[schema.BOTTLE_ACTIONS]
        self.measure("point read of a bottle", lambda: bottles.find_one(one))
        action = actions.find_one({"bottle_id": BOTTLE}) or {}
        copy = {**action, "_id": f"{action.get('_id')}-calibration"}
        self.measure("insert of an action (create)", lambda: actions.insert_one(copy))
        self.measure("update of a bottle (replace)", lambda: bottles.update_one(one, {"$set": {"calibrated_at": now}}))
        window = {"$gte": now - timedelta(days=1), "$lt": now + timedelta(days=1)}
        self.measure(
            "query inside one shard key value (a bottle's actions)",
            lambda: list(actions.find({"bottle_id": BOTTLE, "time": window})),
        )
        self.measure(
            "query that fans out (a user's actions, every partition)",
            lambda: list(actions.find({"user_id": USER, "time": window})),
        )
        self.measure("delete of an action", lambda: actions.delete_one({"_id": copy["_id"], "bottle_id": BOTTLE}))
        return self.results

    def _send(self, key: str, event: dict[str, Any], now: datetime) -> None:
        """The app's ingestion of one event."""
        body = json.dumps({"events": [event]}).encode()
        receive(self.db, BOTTLE, key, body, now=now, settings=self.settings)


@contextlib.contextmanager
def calibration_store(db: Database[Any], settings: Settings, *, on_cosmos: bool) -> Iterator[None]:
    """The store set up for the run, and afterwards everything the run wrote removed: the collections it created
    dropped, its documents deleted from the ones that were there."""
    before = set(db.list_collection_names())
    try:
        ensure_store(db, settings, on_cosmos=on_cosmos)
        yield
    finally:
        for spec in collection_specs(settings):
            if spec.name not in before:
                db.drop_collection(spec.name)
            elif spec.shard_key in ("bottle_id", "user_id"):
                db[spec.name].delete_many({spec.shard_key: BOTTLE if spec.shard_key == "bottle_id" else USER})


def calibrate(
    uri: str,
    database: str,
    *,
    allow_non_empty: bool = False,
    charge_of: ChargeOf = cosmos.last_request_charge,
    listeners: Sequence[Any] = (),
    settings: Settings | None = None,
    now: datetime | None = None,
) -> list[Measured]:
    """The calibration run (`listeners`: more pymongo command listeners on its client, for tests)."""
    settings = settings or get_settings()
    meter = CostMeter(settings, observe=uri)
    meter.recording = False
    client = calibration_client(uri, [meter, *listeners])
    try:
        db = client[database]
        full = holds_documents(db)
        if full and not allow_non_empty:
            raise NotEmpty(
                f"database '{database}' holds documents (in {', '.join(full)}): calibration writes test data; "
                "point it at an empty database, or pass --allow-non-empty"
            )
        with calibration_store(db, settings, on_cosmos=cosmos.is_cosmos_uri(uri)):
            return Calibration(db, meter, settings, charge_of).run(now or utc_now())
    finally:
        client.close()
        meter.close()


def table(results: list[Measured]) -> str:
    rows = []
    for r in results:
        model = f"{r.model:.2f}" if r.model is not None else "-"
        charged = f"{r.charged:.2f}" if r.charged is not None else "not reported"
        ratio = f"{r.charged / r.model:.2f}x" if r.charged is not None and r.model else "-"
        rows.append([r.operation, str(r.commands), model, charged, ratio])
    header = ["operation", "commands", "model RU", "charged RU (getLastRequestStatistics)", "charged / model"]
    return print_table("Calibration: the model beside the account's charge, one command at a time", rows, header)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="./dev bench --mongodb-uri", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mongodb-uri", required=True, help="the Cosmos DB for MongoDB (RU) connection string")
    parser.add_argument("--database", default=None, help="database to use (default: MONGODB_DATABASE's)")
    parser.add_argument(
        "--allow-non-empty", action="store_true", help="run even if the database holds documents (removes only its own)"
    )
    args = parser.parse_args(argv)
    database = args.database or get_settings().mongodb_database
    try:
        results = calibrate(args.mongodb_uri, database, allow_non_empty=args.allow_non_empty)
    except NotEmpty as refused:
        print(f"./dev bench: {refused}", file=sys.stderr)
        return 2
    table(results)
    if all(r.charged is None for r in results):
        print("the server reported no charges (getLastRequestStatistics is Cosmos DB's): the model column only")
    return 0


if __name__ == "__main__":
    sys.exit(main())
