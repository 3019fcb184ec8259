"""The runs of the ingestion benchmark (`python -m benchmarks.ingestion`, and `./dev bench`'s first part): what they
measure and how, benchmarks/ingestion/__init__.py."""

import json
import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Any

import azure.functions as func
from pymongo import InsertOne
from pymongo.collection import Collection
from pymongo.database import Database

from benchmarks.harness import (
    Measurement,
    installed_store,
    measure,
    print_table,
    secantus_server,
    secantus_store,
    seeding_database,
)
from functions.bottles import provision_bottle
from functions.device_events import post_events
from functions.responses import handles_errors, json_response
from shared.api.ids import check_id
from shared.api.payloads import check_media_type, check_size, decode_json
from shared.bottles.entries import BOTTLE_FIELDS, RegistryEntry
from shared.devices.device_keys import hash_key, same_hash
from shared.devices.heartbeat_document import (
    ALIVE_AT,
    LAST,
    RING,
    RING_TIME,
    SLOT_MINUTES,
    USER_BUCKET,
    Window,
    key_digest,
    place,
    rewritten_ring,
    ring_write,
)
from shared.ingestion.authentication import authenticate, check_key_shape
from shared.ingestion.events import DeviceEvent, parse_events
from shared.ingestion.storing import action_document, computed_status_write, status_writes
from shared.instants import clock_restored, set_clock, utc_now
from shared.settings import get_settings
from shared.store import schema
from shared.store.client import get_database
from shared.store.partitioning import BUCKET_FIELD, bucket_of
from shared.store.retries import RetryPolicy, write_idempotent
from shared.store.schema import CollectionSpec, IndexSpec
from shared.telemetry.observability import log_invocation
from tools.command_tally import CommandTally

BATCH = 100
HEARD_EVERY = timedelta(minutes=30)  # each bottle's heartbeat, at steady state
SEED_CHUNK = 2_000
# The goals of single events at steady state (the package's docstring: benchmarks/ingestion/__init__.py).
FLAT_GOAL = 1.3  # the largest fleet's events/s within this factor of the smallest's
FLOOR_GOAL = 1.5  # the app's events/s within this factor of the store floor's

# The seeds stored each event as its own document: sharded by bottle, with the index its per-bottle queries
# (a bottle's latest heartbeat, its latest action) need.
SEEDS_EVENTS = CollectionSpec("naive_events", "bottle_id", (IndexSpec("bottle_time", (("bottle_id", 1), ("time", 1))),))

# The app's POST /api/bottles/{id}/events as the host calls it (the benchmarks of ingestion and of its cost).
post_device_events = post_events.build().get_user_function()
_provision = provision_bottle.build().get_user_function()
log = logging.getLogger(__name__)


def provision(bottles: int) -> dict[str, str]:
    keys = {}
    for i in range(bottles):
        bottle_id = f"bench-{i}"
        body = {"user_id": f"user-{i // 3}", "medication": "Cordrazine", "schedule": {"every_hours": 8}}
        response = _provision(bottle_request("PUT", bottle_id, json.dumps(body).encode()))
        keys[bottle_id] = json.loads(response.get_body())["device_key"]
    return keys


def bottle_request(method: str, bottle_id: str, body: bytes, key: str | None = None) -> func.HttpRequest:
    """A request to a bottle's route: PUT /api/bottles/{id} (provisioning) or POST .../events with its device key."""
    suffix = "/events" if method == "POST" else ""
    return func.HttpRequest(
        method=method,
        url=f"/api/bottles/{bottle_id}{suffix}",
        headers={"X-Device-Key": key} if key else {},
        route_params={"bottle_id": bottle_id},
        body=body,
    )


def device_event(i: int, at: datetime) -> dict[str, Any]:
    """The i-th event of a realistic mix: mostly heartbeats, an opened/closed pair (a dose) now and then."""
    if i % 12 == 10:
        return {"type": "opened", "time": at.isoformat(), "mass_of_contents": 15.0, "number_of_pills": 30}
    if i % 12 == 11:
        return {
            "type": "closed",
            "time": at.isoformat(),
            "mass_of_contents": 14.5,
            "number_of_pills": 29,
            "pills_taken": 1,
        }
    return {"type": "heartbeat", "time": at.isoformat()}


def device_events(count: int, start: datetime) -> list[dict[str, Any]]:
    """The mix, one event a second from `start` (17 K : 1.4 K heartbeats to actions)."""
    return [device_event(i, start + timedelta(seconds=i)) for i in range(count)]


def post_one_by_one(post: Callable[[func.HttpRequest], func.HttpResponse], keys: dict[str, str],
                    events: list[dict[str, Any]]) -> None:  # fmt: skip
    """Each event as a request of its own, the bottles taking turns (warming up: nothing measured)."""
    bottles = list(keys)
    for n, event in enumerate(events):
        bottle_id = bottles[n % len(bottles)]
        response = post(bottle_request("POST", bottle_id, json.dumps(event).encode(), keys[bottle_id]))
        assert response.status_code == 202, response.get_body()


SLOT = timedelta(minutes=SLOT_MINUTES)  # a heartbeat is its bottle and its 5-minute slot: two in one are one


@dataclass(frozen=True)
class Upload:
    """One device request of a batch stream: a bottle's buffered events, sent at `at` (the server clock)."""

    bottle_id: str
    at: datetime
    events: list[dict[str, Any]]


def batch_stream(bottles: list[str], events: int, start: datetime, batch: int = BATCH) -> list[Upload]:
    """`events` events of the usual mix as requests of `batch`, the bottles taking turns: each bottle's events a
    SLOT apart from `start` on (no two in one slot: none is a repeat), each round of requests sent as its last
    slot ends, `batch` SLOTs (8 hours 20 minutes for 100) after the round before (within the 12 hours that keep a
    heartbeat document's ring write one update)."""
    uploads = []
    for n, first in enumerate(range(0, events, batch)):
        rounds_before = n // len(bottles)
        times = [start + (rounds_before * batch + j) * SLOT for j in range(min(batch, events - first))]
        sent = start + (rounds_before + 1) * batch * SLOT
        body = [device_event(first + j, at) for j, at in enumerate(times)]
        uploads.append(Upload(bottles[n % len(bottles)], sent, body))
    return uploads


def stream_span(bottles: int, events: int, batch: int = BATCH) -> timedelta:
    """How long a batch_stream of `events` takes on the server clock, from its start to its last request."""
    rounds = math.ceil(math.ceil(events / batch) / bottles)
    return rounds * batch * SLOT


@dataclass
class Stored:
    """What a stream's answers said: events stored, and events answered as repeats."""

    stored: int = 0
    duplicates: int = 0


def sending(
    post: Callable[[func.HttpRequest], func.HttpResponse],
    keys: dict[str, str],
    uploads: list[Upload],
    clock: "StepClock",
    *,
    one_by_one: bool = False,
) -> tuple[Callable[[], None], Stored]:
    """The uploads as `post` answers them, each at its time on `clock` (one request per event if `one_by_one`),
    and the tally of their answers, kept as the run goes."""
    stored = Stored()

    def run() -> None:
        for upload in uploads:
            clock.at = upload.at
            payloads = upload.events if one_by_one else [{"events": upload.events}]
            for payload in payloads:
                body = json.dumps(payload).encode()
                response = post(bottle_request("POST", upload.bottle_id, body, keys[upload.bottle_id]))
                assert response.status_code == 202, response.get_body()
                answer = json.loads(response.get_body())
                stored.stored += answer["stored"]
                stored.duplicates += answer["duplicates"]

    return run, stored


@handles_errors
def seeds_post_events(req: func.HttpRequest) -> func.HttpResponse:
    """The seeds' approach as a whole request (the module's docstring says what it pays and why): the app's
    function layer and body checks, the device key checked against the bottle's registry entry (held in
    memory: `_seeds_entry`), then one idempotent insert per event, retried within the request's deadline."""
    return _seeds_request(req, one_command=False)


@handles_errors
def seeds_post_batch(req: func.HttpRequest) -> func.HttpResponse:
    """`seeds_post_events` with one idempotent insert_many of the request's events instead of one insert each:
    the seeds' fair baseline for a batch."""
    return _seeds_request(req, one_command=True)


def _seeds_request(req: func.HttpRequest, *, one_command: bool) -> func.HttpResponse:
    bottle_id = check_id(req.route_params.get("bottle_id", ""), "bottle_id")
    body = check_size(req.get_body())
    check_media_type(req.headers.get("Content-Type"))
    key = check_key_shape(req.headers.get("X-Device-Key"))
    settings, now = get_settings(), utc_now()
    events = parse_events(decode_json(body), now, timedelta(days=settings.max_event_age_days))
    policy = RetryPolicy.for_request(settings)
    db = get_database()
    registry = _seeds_entry(db, bottle_id, key, policy)
    inserts = [InsertOne(seeds_document(registry, event, now)) for event in events]
    groups = [inserts] if one_command else [[insert] for insert in inserts]
    stored = sum(sum(write_idempotent(db[SEEDS_EVENTS.name], group, policy)) for group in groups)
    log_invocation(log, "post_events", bottle_id=bottle_id, stored=stored, duplicates=len(events) - stored)
    return json_response(202, {"stored": stored, "duplicates": len(events) - stored})


# The seeds' registry entries by bottle: read once, then held (the baseline's cheapest authentication).
_SEEDS_REGISTRY: dict[str, RegistryEntry] = {}


def _seeds_entry(db: Database[Any], bottle_id: str, key: str, policy: RetryPolicy) -> RegistryEntry:
    """The bottle's registry entry from the seeds' memory if it takes this key, else read (and then held)."""
    entry = _SEEDS_REGISTRY.get(bottle_id)
    if entry is None or not same_hash(entry.key_hash, hash_key(key)):
        entry, _bottle = authenticate(db, bottle_id, key, policy)
        _SEEDS_REGISTRY[bottle_id] = entry
    return entry


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


def _create_seeds_index(db: Database[Any]) -> None:
    spec = SEEDS_EVENTS.indexes[0]
    db[SEEDS_EVENTS.name].create_index(list(spec.keys), name=spec.name)


# --- batches ---------------------------------------------------------------------------------------------------


def batch_runs(events: int, bottles: int) -> list[tuple[Measurement, Stored]]:
    """The seeds' single inserts, their insert_many and the app's batches of the same stream's shape (each its
    own stream, one after the other on the server clock: the seeds' two share a collection), each measured with
    what its answers said it stored. The server clock plays them in the past, ending an hour before now."""
    span = stream_span(bottles, events)
    start = utc_now().replace(second=0, microsecond=0) - 3 * span - timedelta(hours=4)
    single, many, app = (start + timedelta(hours=1) + k * (span + timedelta(hours=1)) for k in range(3))
    clock = StepClock(start)
    runs: list[tuple[Measurement, Stored]] = []
    with secantus_store(get_settings().mongodb_database) as (db, tally):  # the database the app's functions use
        _create_seeds_index(db)
        with clock_restored():
            set_clock(clock)
            keys = provision(bottles)
            clock.at = start + timedelta(minutes=30)  # the seeds hold every bottle's registry entry
            post_one_by_one(seeds_post_events, keys, device_events(bottles, start + timedelta(minutes=10)))
            names = list(keys)
            for name, post, at, one_by_one in [(SEEDS_SINGLE, seeds_post_events, single, True),
                                               (SEEDS_MANY, seeds_post_batch, many, False),
                                               (APP_BATCHES, post_device_events, app, False)]:  # fmt: skip
                if post is post_device_events:  # the heartbeat documents have a ring, written an hour before the stream
                    clock.at = at - timedelta(minutes=30)
                    post_one_by_one(post_device_events, keys, device_events(2 * bottles, at - timedelta(hours=1)))
                run, stored = sending(post, keys, batch_stream(names, events, at), clock, one_by_one=one_by_one)
                runs.append((measure(name, events, tally, run), stored))
    return runs


def batches(events: int, bottles: int) -> str:
    """Batches of 100 beside the seeds' single inserts and their insert_many of the same events; the table."""
    runs = batch_runs(events, bottles)
    one, many_ = runs[0][0], runs[1][0]
    table = [
        [
            m.name,
            f"{stored.stored:,}",
            f"{m.per_second:,.0f}",
            f"{m.per_second / one.per_second:.2f}x",
            f"{m.per_second / many_.per_second:.2f}x",
            f"{m.commands_per_unit:.3f}",
            f"{many_.commands_per_unit / m.commands_per_unit:.1f}x" if m.commands_per_unit else "-",
            f"{m.cpu_ms_per_unit:.3f}",
        ]
        for m, stored in runs
    ]
    header = ["approach", "stored", "events/s", "vs one insert", "vs insert_many", "commands/event", "fewer commands",
              "CPU ms/event"]  # fmt: skip
    title = f"Ingestion, batches of {BATCH} on SecantusDB in-process ({events} events, {bottles} bottles)"
    return print_table(title, table, header)


SEEDS_SINGLE = "seeds: one insert per event, one event per request"
SEEDS_MANY = f"seeds: insert_many of each request's {BATCH} events"
APP_BATCHES = f"app: batches of {BATCH}"


# --- single events at steady state ------------------------------------------------------------------------------


class StepClock:
    """The server clock of a steady-state run, moved on by the run (the events' arrival times)."""

    def __init__(self, at: datetime) -> None:
        self.at = at

    def __call__(self) -> datetime:
        return self.at


@dataclass(frozen=True)
class SteadyFleet:
    """A fleet at steady state: `bottles` bottles, every one with the device key `key`."""

    bottles: int
    start: datetime  # the first event of the stream; bottle n sends at start + n * spacing, then every 30 minutes
    key: str
    key_hash: str

    @property
    def spacing(self) -> timedelta:
        return HEARD_EVERY / self.bottles

    def bottle_id(self, n: int) -> str:
        return f"bench-{n:06d}"

    def user_id(self, n: int) -> str:
        return f"user-{n // 3:06d}"

    def stream(self, count: int, offset: int = 0) -> list[tuple[str, datetime, dict[str, Any]]]:
        """`count` events from the `offset`-th on: (bottle, arrival, event); each bottle every 30 minutes."""
        out = []
        for k in range(offset, offset + count):
            at = self.start + k * self.spacing
            out.append((self.bottle_id(k % self.bottles), at + timedelta(seconds=1), device_event(k, at)))
        return out


def seed_steady_fleet(uri: str, database: str, bottles: int, start: datetime) -> SteadyFleet:
    """`bottles` provisioned bottles whose heartbeat documents hold a full window (a heartbeat every 30 minutes
    for 24 hours, the last 30 minutes before the bottle's first event in the stream): a template bottle
    provisioned through the app, its documents copied under each bottle's id (by bulk inserts, through a client
    without the app's request timeouts), each with its own ring."""
    clock = StepClock(start - timedelta(days=1))
    with clock_restored():
        set_clock(clock)
        template_id = "bench-template"
        body = {"user_id": "user-template", "medication": "Cordrazine", "schedule": {"every_hours": 8}}
        response = _provision(bottle_request("PUT", template_id, json.dumps(body).encode()))
    key = json.loads(response.get_body())["device_key"]
    window = Window(get_settings().heartbeat_window_hours)
    with seeding_database(uri, database) as db:
        bottle = db[schema.BOTTLES].find_one({"_id": template_id})
        heartbeats = db[schema.BOTTLE_HEARTBEATS].find_one({"_id": template_id})
        assert bottle is not None
        assert heartbeats is not None
        fleet = SteadyFleet(bottles, start, key, bottle["key_hash"])
        for first in range(0, bottles, SEED_CHUNK):
            numbers = range(first, min(first + SEED_CHUNK, bottles))
            db[schema.BOTTLES].insert_many([_copy(bottle, fleet, n) for n in numbers], ordered=False)
            documents = [_steady_heartbeats(heartbeats, fleet, n, window) for n in numbers]
            db[schema.BOTTLE_HEARTBEATS].insert_many(documents, ordered=False)
    return fleet


def _copy(template: dict[str, Any], fleet: SteadyFleet, n: int) -> dict[str, Any]:
    bottle_id = fleet.bottle_id(n)
    return {
        **template,
        "_id": bottle_id,
        "bottle_id": bottle_id,
        "user_id": fleet.user_id(n),
        BUCKET_FIELD: bucket_of(bottle_id),
    }


def _steady_heartbeats(template: dict[str, Any], fleet: SteadyFleet, n: int, window: Window) -> dict[str, Any]:
    """Bottle n's heartbeat document as ingestion leaves it after 24 hours of a heartbeat every 30 minutes."""
    last = fleet.start + n * fleet.spacing - HEARD_EVERY
    times = [last - i * HEARD_EVERY for i in range(48)]
    placed = [p for p in (place(t, last, window) for t in times) if p is not None]
    copied = _copy(template, fleet, n)
    return {
        **copied,
        USER_BUCKET: bucket_of(copied["user_id"]),
        LAST: last,
        ALIVE_AT: last,
        RING_TIME: last,
        RING: rewritten_ring({}, placed, last, window),
    }


def _warm_registry(fleet: SteadyFleet) -> None:
    """Every bottle's registry entry in the seeds' memory, as a seeds worker serving the fleet would hold them."""
    _SEEDS_REGISTRY.clear()
    for n in range(fleet.bottles):
        bottle_id = fleet.bottle_id(n)
        _SEEDS_REGISTRY[bottle_id] = RegistryEntry(bottle_id, fleet.user_id(n), "Cordrazine", fleet.key_hash)


def posting(
    post: Callable[[func.HttpRequest], func.HttpResponse],
    fleet: SteadyFleet,
    stream: list[tuple[str, datetime, dict[str, Any]]],
) -> Callable[[], None]:
    """One request per event of `stream`, each at its arrival time on the server clock."""

    def run() -> None:
        clock = StepClock(stream[0][1])
        with clock_restored():
            set_clock(clock)
            for bottle_id, at, event in stream:
                clock.at = at
                response = post(bottle_request("POST", bottle_id, json.dumps(event).encode(), fleet.key))
                assert response.status_code == 202, response.get_body()

    return run


Step = Callable[[], None]


def _floor(db: Database[Any], fleet: SteadyFleet, stream: list[tuple[str, datetime, dict[str, Any]]]) -> Step:
    """The commands the app's requests of `stream` send, computed beforehand and sent bare (no HTTP layer, no
    parsing, no retries): a heartbeat, the update of its ring; an opened event, the insert of the action and the
    status update; a dose, the bottle's read, the insert and the status update computed from the read."""
    settings = get_settings()
    window, key = Window(settings.heartbeat_window_hours), key_digest(fleet.key_hash)
    heartbeats, bottles, actions = db[schema.BOTTLE_HEARTBEATS], db[schema.BOTTLES], db[schema.BOTTLE_ACTIONS]
    steps: list[Step] = []
    for bottle_id, at, payload in stream:
        [event] = parse_events(payload, at, timedelta(days=settings.max_event_age_days))
        if event.type == "heartbeat":
            placed = [p for p in [place(event.time, at, window)] if p is not None]
            write = ring_write(bottle_id, key, [event.time], placed, now=at, window=window)
            steps.append(partial(_updated, heartbeats, write))
            continue
        n = int(bottle_id.removeprefix("bench-"))
        action = action_document(RegistryEntry(bottle_id, fleet.user_id(n), "Cordrazine", fleet.key_hash), event, at)
        if event.is_dose:
            steps.append(partial(_dose, bottles, actions, action, event, settings.dose_history))
        else:
            steps.append(partial(_action, bottles, actions, action, status_writes(bottle_id, [event])[0]))

    def run() -> None:
        for step in steps:
            step()

    return run


def _updated(collection: Collection[Any], write: tuple[Mapping[str, Any], Mapping[str, Any]]) -> None:
    assert collection.update_one(*write).matched_count


def _action(bottles: Collection[Any], actions: Collection[Any], action: dict[str, Any], write: Any) -> None:
    actions.insert_one(action)
    _updated(bottles, write)


def _dose(
    bottles: Collection[Any], actions: Collection[Any], action: dict[str, Any], event: DeviceEvent, history: int
) -> None:
    key = {"_id": action["bottle_id"], "bottle_id": action["bottle_id"]}
    found = bottles.find_one(key, BOTTLE_FIELDS)
    assert found is not None
    actions.insert_one(action)
    write = computed_status_write(found, [event], dose_history=history)
    if write is not None:
        _updated(bottles, write)


def _inserts(db: Database[Any], count: int) -> Callable[[], None]:
    def run() -> None:
        for i in range(count):
            db["naive_floor"].insert_one({"bottle_id": f"bench-{i:06d}", "i": i})

    return run


def _find_and_modify(db: Database[Any], fleet: SteadyFleet, count: int) -> Callable[[], None]:
    collection = db[schema.BOTTLE_HEARTBEATS]

    def run() -> None:
        for i in range(count):
            bottle_id = fleet.bottle_id(i * 7919 % fleet.bottles)
            key = {"_id": bottle_id, "bottle_id": bottle_id}
            assert collection.find_one_and_update(key, {"$set": {"floor": i}}, projection={"_id": 1}) is not None

    return run


APP_SINGLE = "app: one event per request"
FLOOR = "store floor: the app's commands, sent bare"


def steady_state(bottles: int, events: int, start: datetime) -> list[Measurement]:
    """Single events on a fleet of `bottles` at steady state, on a fresh server: the seeds', the app's, and the
    store floor's (see the module's docstring)."""
    database = get_settings().mongodb_database
    tally = CommandTally()
    with secantus_server() as uri, installed_store(uri, database, listeners=[tally]) as db:
        _create_seeds_index(db)
        fleet = seed_steady_fleet(uri, database, bottles, start)
        seeds, app = fleet.stream(events), fleet.stream(events, offset=events)
        _warm_registry(fleet)
        rows = [measure(SEEDS_SINGLE, events, tally, posting(seeds_post_events, fleet, seeds))]
        rows.append(measure(APP_SINGLE, events, tally, posting(post_device_events, fleet, app)))
        rows.append(measure(FLOOR, events, tally, _floor(db, fleet, fleet.stream(events, offset=2 * events))))
        rows.append(measure("store floor: insert_one of a small document", events, tally, _inserts(db, events)))
        few = max(10, events // 40)  # it scans the collection: a few are enough to show it
        name = "store floor: findAndModify of a heartbeat document"
        rows.append(measure(name, few, tally, _find_and_modify(db, fleet, few)))
    _SEEDS_REGISTRY.clear()
    return rows


def singles(fleets: tuple[int, ...], events: int) -> str:
    """Single events at steady state at each fleet size; the table, then the goals."""
    start = utc_now().replace(second=0, microsecond=0)
    by_fleet = {bottles: steady_state(bottles, events, start) for bottles in fleets}
    table = []
    for bottles, rows in by_fleet.items():
        seeds = rows[0]
        for m in rows:
            table.append(
                [
                    f"{bottles:,}",
                    m.name,
                    f"{m.per_second:,.0f}",
                    f"{m.per_second / seeds.per_second:.2f}x",
                    f"{m.commands_per_unit:.3f}",
                    f"{m.cpu_ms_per_unit:.3f}",
                ]
            )
    header = ["bottles", "approach", "events/s", "vs seeds", "commands/event", "CPU ms/event"]
    title = (
        f"Ingestion, one event per request at steady state on SecantusDB in-process ({events} events a fleet, "
        "each bottle heard from every 30 minutes)"
    )
    text = print_table(title, table, header)
    return text + "\n" + "\n".join(goals(by_fleet))


def goals(by_fleet: dict[int, list[Measurement]]) -> list[str]:
    """The goals of single events, each with its measured figure (by the wall clock, the goal's terms, and by
    CPU per event, the steadier figure on a loaded machine) and whether it was met."""
    app = {bottles: next(m for m in rows if m.name == APP_SINGLE) for bottles, rows in by_fleet.items()}
    floor = {bottles: next(m for m in rows if m.name == FLOOR) for bottles, rows in by_fleet.items()}
    smallest, largest = min(app), max(app)
    slower = app[smallest].per_second / app[largest].per_second
    cpu = app[largest].cpu_ms_per_unit / app[smallest].cpu_ms_per_unit
    lines = [
        f"goal: the app at {largest:,} bottles within {FLAT_GOAL}x of its speed at {smallest:,}: {slower:.2f}x "
        f"slower ({_verdict(slower, FLAT_GOAL)}; CPU per event {cpu:.2f}x)"
    ]
    for bottles, measured in app.items():
        behind = floor[bottles].per_second / measured.per_second
        cpu = measured.cpu_ms_per_unit / floor[bottles].cpu_ms_per_unit
        lines.append(
            f"goal: the app within {FLOOR_GOAL}x of the store floor at {bottles:,} bottles: {behind:.2f}x "
            f"({_verdict(behind, FLOOR_GOAL)}; CPU per event {cpu:.2f}x)"
        )
    for bottles, rows in by_fleet.items():
        ratio = app[bottles].per_second / rows[0].per_second
        lines.append(f"the app's speed against the seeds' one insert per event at {bottles:,} bottles: {ratio:.2f}x")
    for line in lines:
        print(line)
    return lines


def _verdict(ratio: float, goal: float) -> str:
    return "met" if ratio <= goal else "NOT met"


def run(events: int, bottles: int, fleets: tuple[int, ...], steady: int) -> str:
    """Both tables: single events at steady state at each fleet size, then batches."""
    return singles(fleets, steady) + "\n\n" + batches(events, bottles)
