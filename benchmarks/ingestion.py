"""Ingestion throughput and cost: events/s and database commands per event, through the real HTTP
function, for single events and batches of 100, beside the seeds' naive one-insert-per-event storage behind
the same request handling, measured on the same server in the same run.

    python -m benchmarks.ingestion [--events 4000] [--bottles 50]
"""

import argparse
import json
from collections.abc import Iterator
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from typing import Any

import azure.functions as func

from benchmarks.harness import Measurement, measure, print_table, secantus_store
from functions.bottles import provision_bottle
from functions.device_events import post_events
from shared.ingestion.authentication import check_key_shape
from shared.ingestion.events import parse_events
from shared.instants import utc_now
from shared.payloads import check_size, decode_json
from shared.settings import get_settings
from shared.store import schema
from tools.arguments import int_between, positive_int

# Each approach's events are one a second within its own 6 hours, so the three streams never overlap.
MAX_EVENTS = 6 * 3600

_post = post_events.build().get_user_function()
_provision = provision_bottle.build().get_user_function()


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


def naive_post_all(db: Any, keys: dict[str, str], events: list[dict[str, Any]]) -> None:
    for request in requests(keys, events, 1):
        naive_post(db, request)


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


def naive_post(db: Any, request: func.HttpRequest) -> None:
    """The seeds' storage behind the app's own request handling (the same size, key-shape and event
    checks): each event becomes one document, inserted on its own. Only the storage differs, so events/s
    compare like with like."""
    body = request.get_body()
    check_size(body)
    check_key_shape(request.headers.get("X-Device-Key"))
    events = parse_events(decode_json(body), utc_now(), timedelta(days=get_settings().max_event_age_days))
    for event in events:
        db["naive_events"].insert_one({**asdict(event), "bottle_id": request.route_params["bottle_id"]})


def store_floor(db: Any, tally: Any, keys: dict[str, str], count: int) -> list[Measurement]:
    """What the embedded store takes for the least an event can cost: one insert (the seeds' write), and one
    update of a bottle's heartbeat document that sets a single field (less than a heartbeat's write). An
    update costs SecantusDB about twice an insert, which bounds what one heartbeat per request can reach."""
    bottles = list(keys)
    collection = db[schema.BOTTLE_HEARTBEATS]

    def inserts() -> None:
        for i in range(count):
            db["naive_floor"].insert_one({"bottle_id": bottles[i % len(bottles)], "i": i})

    def updates() -> None:
        for i in range(count):
            bottle_id = bottles[i % len(bottles)]
            collection.update_one({"_id": bottle_id, "bottle_id": bottle_id}, {"$set": {"floor": i}})

    return [
        measure("store floor: insert_one of a small document", count, tally, inserts),
        measure("store floor: update_one of one heartbeat document field", count, tally, updates),
    ]


def run(events: int, bottles: int) -> str:
    start = datetime.now(UTC) - timedelta(days=2)
    rows: list[Measurement] = []
    with secantus_store() as (db, tally):
        keys = provision(bottles)
        post_all(keys, device_events(50, start - timedelta(hours=1)), 1)  # warm the worker's registry cache
        stream = device_events(events, start)
        naive = "naive: insert_one per event (seeds), one event per request"
        rows.append(measure(naive, events, tally, lambda: naive_post_all(db, keys, stream)))
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
        ]
        for m in rows
    ]
    header = ["approach", "events/s", "vs naive", "commands/event", "fewer commands"]
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
