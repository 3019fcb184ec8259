"""Ingestion throughput and cost: events/s, database commands and CPU per event, through the real HTTP function,
for single events and batches of 100, beside the seeds' approach (one insert per event) as a whole request of its
own, measured on the same server in the same run.

    python -m benchmarks.ingestion [--events 4000] [--bottles 50]

The baseline is the seeds' approach as a whole request, paying what the app's request pays for the same contract:
the same HTTP function layer (the route's id check, the error mapping, the invocation log line, the JSON answer),
the same body checks (size, media type, key shape, every event validated), the device key checked against the
bottle's registry entry (the app's per-worker registry cache, warm from the first requests on: the cheapest way
the seeds could authenticate a device and copy the owner and medication onto each event, as their sample documents
carry them), and then one insert per event under the same retry policy and request deadline, idempotent (`_id` is
the bottle and the event id, so a retried request stores nothing twice), into a collection with the index the
seeds' per-bottle queries need (`(bottle_id, time)`). Until this version it was the seeds' storage behind part of
the request only (size, key-shape and event checks): no function layer, no media type check, no key check against
the bottle (any device could write any bottle), no owner or medication on the event, no retries or deadline, no
idempotent `_id` (a retried request stored its events twice) and an unindexed collection; so it measured less
than the seeds would have to do for the app's contract.

Both approaches, and the store floor, now run on the app's own database, set up with its indexes. Until this
version the set-up ran on another database than the one the app's functions wrote to: the app was measured without
its indexes (which every write on SecantusDB maintains), and the store floor's update matched no document.

The columns: events/s (wall clock; this machine is noisy, so compare the ratios of one run), database commands
per event, and CPU per event (the process's CPU time: the app's and the in-process server's together, the steadier
figure on a loaded machine). "store floor" rows time the least a request's write can cost on SecantusDB: one insert
of a small document (the seeds' write), one update of one field of a heartbeat document, and one findAndModify of
one field of it (a heartbeat request's one write is a findAndModify, whose reply tells new heartbeats from
repeats). On SecantusDB a findAndModify costs several times an insert, and grows with the collection (it scans the
collection for its write), so one heartbeat per request cannot reach the seeds' events/s there; batches can.
"""

import argparse
import json
import logging
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import azure.functions as func
from pymongo import InsertOne

from benchmarks.harness import Measurement, measure, print_table, secantus_store
from functions.bottles import provision_bottle
from functions.device_events import post_events
from functions.responses import handles_errors, json_response
from shared.bottles.entries import RegistryEntry
from shared.ids import check_id
from shared.ingestion.authentication import authenticate, check_key_shape
from shared.ingestion.events import DeviceEvent, parse_events
from shared.instants import utc_now
from shared.observability import log_invocation
from shared.payloads import check_media_type, check_size, decode_json
from shared.settings import get_settings
from shared.store import schema
from shared.store.client import get_database
from shared.store.retries import RetryPolicy, write_idempotent
from shared.store.schema import CollectionSpec, IndexSpec
from tools.arguments import int_between, positive_int

# Each approach's events are one a second within its own 6 hours, so the three streams never overlap.
MAX_EVENTS = 6 * 3600

# The seeds stored each event as its own document: sharded by bottle, with the index its per-bottle queries
# (a bottle's latest heartbeat, its latest action) need.
SEEDS_EVENTS = CollectionSpec("naive_events", "bottle_id", (IndexSpec("bottle_time", (("bottle_id", 1), ("time", 1))),))

_post = post_events.build().get_user_function()
_provision = provision_bottle.build().get_user_function()
log = logging.getLogger(__name__)


def provision(bottles: int) -> dict[str, str]:
    keys = {}
    for i in range(bottles):
        bottle_id = f"bench-{i}"
        body = {"user_id": f"user-{i // 3}", "medication": "Cordrazine", "schedule": {"every_hours": 8}}
        response = _provision(_request("PUT", bottle_id, json.dumps(body).encode()))
        keys[bottle_id] = json.loads(response.get_body())["device_key"]
    return keys


def _request(method: str, bottle_id: str, body: bytes, key: str | None = None) -> func.HttpRequest:
    suffix = "/events" if method == "POST" else ""
    return func.HttpRequest(
        method=method,
        url=f"/api/bottles/{bottle_id}{suffix}",
        headers={"X-Device-Key": key} if key else {},
        route_params={"bottle_id": bottle_id},
        body=body,
    )


def device_events(count: int, start: datetime) -> list[dict[str, Any]]:
    """A realistic mix: mostly heartbeats, with an opened/closed pair now and then (17 K : 1.4 K)."""
    events: list[dict[str, Any]] = []
    for i in range(count):
        at = (start + timedelta(seconds=i)).isoformat()
        if i % 12 == 10:
            events.append({"type": "opened", "time": at, "mass_of_contents": 15.0, "number_of_pills": 30})
        elif i % 12 == 11:
            events.append(
                {"type": "closed", "time": at, "mass_of_contents": 14.5, "number_of_pills": 29, "pills_taken": 1}
            )
        else:
            events.append({"type": "heartbeat", "time": at})
    return events


def seeds_post_all(keys: dict[str, str], events: list[dict[str, Any]]) -> None:
    for request in requests(keys, events, 1):
        response = seeds_post_events(request)
        assert response.status_code == 202, response.get_body()


def post_all(keys: dict[str, str], events: list[dict[str, Any]], batch: int) -> None:
    for request in requests(keys, events, batch):
        response = _post(request)
        assert response.status_code == 202, response.get_body()


def requests(keys: dict[str, str], events: list[dict[str, Any]], batch: int) -> Iterator[func.HttpRequest]:
    """The events as device requests of `batch` events each, the bottles taking turns."""
    bottles = list(keys)
    for n, first in enumerate(range(0, len(events), batch)):
        bottle_id = bottles[n % len(bottles)]
        chunk = events[first : first + batch]
        payload = chunk[0] if batch == 1 else {"events": chunk}
        yield _request("POST", bottle_id, json.dumps(payload).encode(), keys[bottle_id])


@handles_errors
def seeds_post_events(req: func.HttpRequest) -> func.HttpResponse:
    """The seeds' approach as a whole request (the module's docstring says what it pays and why): the app's
    function layer and body checks, the device key checked against the bottle's registry entry (cached per
    worker), then one idempotent insert per event, retried within the request's deadline."""
    bottle_id = check_id(req.route_params.get("bottle_id", ""), "bottle_id")
    body = check_size(req.get_body())
    check_media_type(req.headers.get("Content-Type"))
    key = check_key_shape(req.headers.get("X-Device-Key"))
    settings, now = get_settings(), utc_now()
    events = parse_events(decode_json(body), now, timedelta(days=settings.max_event_age_days))
    policy = RetryPolicy.for_request(settings)
    db = get_database()
    registry, _bottle = authenticate(db, bottle_id, key, settings.registry_cache_seconds, policy)
    stored = 0
    for event in events:
        insert = InsertOne(seeds_document(registry, event, now))
        stored += sum(write_idempotent(db[SEEDS_EVENTS.name], [insert], policy))
    log_invocation(log, "post_events", bottle_id=bottle_id, stored=stored, duplicates=len(events) - stored)
    return json_response(202, {"stored": stored, "duplicates": len(events) - stored})


def seeds_document(bottle: RegistryEntry, event: DeviceEvent, now: datetime) -> dict[str, Any]:
    """An event as the seeds stored it: one document, with its bottle's owner and medication."""
    document: dict[str, Any] = {
        "_id": f"{bottle.bottle_id}|{event.event_id}",
        "bottle_id": bottle.bottle_id,
        "user_id": bottle.user_id,
        "medication": bottle.medication,
        "type": event.type,
        "time": event.time,
        "event_id": event.event_id,
        "received_at": now,
    }
    for name in ("mass_of_contents", "number_of_pills", "pills_taken"):
        if getattr(event, name) is not None:
            document[name] = getattr(event, name)
    return document


def naive_post(db: Any, request: func.HttpRequest) -> None:
    """The seeds' storage alone, for the cost model (benchmarks/costs.py prices the write: one insert per event);
    the throughput baseline is `seeds_post_events`, the whole request."""
    body = request.get_body()
    check_size(body)
    check_key_shape(request.headers.get("X-Device-Key"))
    events = parse_events(decode_json(body), utc_now(), timedelta(days=get_settings().max_event_age_days))
    for event in events:
        db[SEEDS_EVENTS.name].insert_one({**vars(event), "bottle_id": request.route_params["bottle_id"]})


def store_floor(db: Any, tally: Any, keys: dict[str, str], count: int) -> list[Measurement]:
    """What the embedded store takes for the least an event's write can cost: one insert of a small document (the
    seeds' write), one update of a single field of a bottle's heartbeat document, and one findAndModify of it (a
    heartbeat request's one write is a findAndModify: less than a heartbeat's, which sets several fields)."""
    bottles = list(keys)
    collection = db[schema.BOTTLE_HEARTBEATS]

    def inserts() -> None:
        for i in range(count):
            db["naive_floor"].insert_one({"bottle_id": bottles[i % len(bottles)], "i": i})

    def updates() -> None:
        for i in range(count):
            bottle_id = bottles[i % len(bottles)]
            assert collection.update_one(
                {"_id": bottle_id, "bottle_id": bottle_id}, {"$set": {"floor": i}}
            ).matched_count

    def find_and_modify() -> None:
        for i in range(count):
            bottle_id = bottles[i % len(bottles)]
            key = {"_id": bottle_id, "bottle_id": bottle_id}
            assert collection.find_one_and_update(key, {"$set": {"floor": i}}, projection={"_id": 1}) is not None

    return [
        measure("store floor: insert_one of a small document", count, tally, inserts),
        measure("store floor: update_one of one heartbeat document field", count, tally, updates),
        measure("store floor: findAndModify of one heartbeat document field", count, tally, find_and_modify),
    ]


def run(events: int, bottles: int) -> str:
    start = utc_now() - timedelta(days=2)
    rows: list[Measurement] = []
    with secantus_store(get_settings().mongodb_database) as (db, tally):  # the database the app's functions use
        spec = SEEDS_EVENTS.indexes[0]
        db[SEEDS_EVENTS.name].create_index(list(spec.keys), name=spec.name)
        keys = provision(bottles)
        # Warm workers, both ways: the registry cache holds every bottle, the heartbeat documents have a ring.
        post_all(keys, device_events(2 * bottles, start - timedelta(hours=1)), 1)
        seeds_post_all(keys, device_events(bottles, start - timedelta(hours=2)))
        stream = device_events(events, start)
        seeds = "naive (seeds): one insert per event, a whole request each, one event per request"
        rows.append(measure(seeds, events, tally, lambda: seeds_post_all(keys, stream)))
        single = device_events(events, start + timedelta(hours=6))
        rows.append(measure("app: one event per request", events, tally, lambda: post_all(keys, single, 1)))
        batched = device_events(events, start + timedelta(hours=12))
        rows.append(measure("app: batches of 100", events, tally, lambda: post_all(keys, batched, 100)))
        rows += store_floor(db, tally, keys, events // 4)
    baseline = rows[0]
    table = [
        [
            m.name,
            f"{m.per_second:,.0f}",
            f"{m.per_second / baseline.per_second:.2f}x",
            f"{m.commands_per_unit:.3f}",
            f"{baseline.commands_per_unit / m.commands_per_unit:.1f}x" if m.commands_per_unit else "-",
            f"{m.cpu_ms_per_unit:.3f}",
        ]
        for m in rows
    ]
    header = ["approach", "events/s", "vs naive", "commands/event", "fewer commands", "CPU ms/event"]
    return print_table(f"Ingestion on SecantusDB in-process ({events} events, {bottles} bottles)", table, header)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.ingestion",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--events",
        type=int_between(1, MAX_EVENTS),
        default=4000,
        help=f"events per approach, at most {MAX_EVENTS:,} (default 4000)",
    )
    parser.add_argument("--bottles", type=positive_int, default=50, help="bottles sending them (default 50)")
    args = parser.parse_args(argv)
    run(args.events, args.bottles)


if __name__ == "__main__":
    main()
