"""The ingestion benchmark's baseline is the seeds' approach as a whole request, held to the app's contract, and
the benchmark measures the app on its own database with its indexes (benchmarks/ingestion/runs.py)."""

import itertools
import json
from datetime import datetime, timedelta

import pytest

from benchmarks.harness import installed_store, secantus_server
from benchmarks.ingestion import runs as ingestion
from shared.devices.heartbeat_document import MAX_GAP_HOURS, Window, heartbeat_slots, place, slot_start
from shared.instants import utc_now
from shared.settings import get_settings
from shared.store import schema
from tests.api import ago, closed, heartbeat, provisioned
from tests.fake_time import QUIET_HOUR

# A benchmark's figures may not depend on when it runs: its clock runs from a fixed quiet hour.
pytestmark = pytest.mark.own_clock(QUIET_HOUR)


def seeds_post(bottle_id: str, key: str, event: dict[str, object]) -> tuple[int, bytes]:
    response = ingestion.seeds_post_events(ingestion.bottle_request("POST", bottle_id, json.dumps(event).encode(), key))
    return response.status_code, response.get_body()


def test_the_seeds_baseline_checks_the_key_and_stores_each_event_once_with_its_owner(db):
    key = provisioned()
    stored = db[ingestion.SEEDS_EVENTS.name]

    assert seeds_post("bottle-1", "not-its-key", heartbeat(ago(minutes=2)))[0] == 401
    assert seeds_post("bottle-404", key, heartbeat(ago(minutes=2)))[0] == 401
    assert stored.count_documents({}) == 0

    event = closed(ago(minutes=1), event_id="c-1")
    assert seeds_post("bottle-1", key, event) == (202, b'{"stored":1,"duplicates":0}')
    assert seeds_post("bottle-1", key, event) == (202, b'{"stored":0,"duplicates":1}')  # a retry stores nothing
    [document] = stored.find()
    assert (document["_id"], document["user_id"], document["medication"]) == (
        "bottle-1|c-1",
        "willcross1024",
        "Cordrazine",
    )
    assert seeds_post("bottle-1", key, {"type": "nonsense"})[0] == 400


def test_the_seeds_batch_baseline_is_one_idempotent_insert_many_of_the_request(db):
    key = provisioned()
    events = {"events": [heartbeat(ago(minutes=3)), closed(ago(minutes=1), event_id="c-1")]}
    request = ingestion.bottle_request("POST", "bottle-1", json.dumps(events).encode(), key)

    assert ingestion.seeds_post_batch(request).get_body() == b'{"stored":2,"duplicates":0}'
    assert ingestion.seeds_post_batch(request).get_body() == b'{"stored":0,"duplicates":2}'  # a retry
    assert db[ingestion.SEEDS_EVENTS.name].count_documents({"bottle_id": "bottle-1"}) == 2


@pytest.mark.integration
def test_the_benchmark_runs_single_events_at_three_fleet_sizes_and_batches_against_insert_many(capsys):
    # The store floor asserts that its updates matched a heartbeat document: they did not when the benchmark set up
    # another database than the one the app's functions wrote to.
    text = ingestion.run(events=200, bottles=2, fleets=(3, 6, 12), steady=24)

    single, batches = text.split("\n\n")
    lines = single.splitlines()
    rows = [[cell.strip() for cell in line.split("  ") if cell.strip()] for line in lines[3:] if "  " in line]
    assert {row[0] for row in rows} == {"3", "6", "12"}
    for size in ("3", "6", "12"):
        assert [row[1] for row in rows if row[0] == size] == [
            ingestion.SEEDS_SINGLE,
            ingestion.APP_SINGLE,
            ingestion.FLOOR,
            "store floor: insert_one of a small document",
            "store floor: findAndModify of a heartbeat document",
        ]
        # A heartbeat is one write; an opened event, and a closed one with its dose, a read (the bottle: the key is
        # checked against it) and two writes: no fallback.
        assert next(row for row in rows if row[0] == size and row[1] == ingestion.APP_SINGLE)[4] == "1.333"
    goals = [line for line in lines if line.startswith("goal: ")]
    assert goals[0].startswith("goal: the app at 12 bottles within 1.3x of its speed at 3: ")
    assert [g.split(" bottles:")[0] for g in goals[1:]] == [
        f"goal: the app within 1.5x of the store floor at {n}" for n in (3, 6, 12)
    ]
    batch_rows = [line.split("  ")[0] for line in batches.splitlines()[3:]]
    assert batch_rows == [ingestion.SEEDS_SINGLE, ingestion.SEEDS_MANY, "app: batches of 100"]
    assert "vs insert_many" in batches.splitlines()[1]
    assert "goal: the app at 12 bottles" in capsys.readouterr().out


@pytest.mark.integration
def test_the_steady_fleet_is_heard_from_every_30_minutes_inside_its_heartbeat_window():
    """Each heartbeat of the stream is new and sets a bit of its bottle's ring, beside a full window of them."""
    start = utc_now().replace(second=0, microsecond=0)
    database = get_settings().mongodb_database
    with secantus_server() as uri, installed_store(uri, database) as db:
        fleet = ingestion.seed_steady_fleet(uri, database, 4, start)
        stream = fleet.stream(9)
        first = db[schema.BOTTLE_HEARTBEATS].find_one({"_id": fleet.bottle_id(0)})
        ingestion.posting(ingestion.post_device_events, fleet, stream)()
        after = db[schema.BOTTLE_HEARTBEATS].find_one({"_id": fleet.bottle_id(0)})

    sent = [slot_start(at) for bottle_id, at, _ in stream if bottle_id == fleet.bottle_id(0)]
    assert [b - a for a, b in itertools.pairwise(sent)] == [timedelta(minutes=30)] * 2
    # A heartbeat every 30 minutes for 24 hours up to 30 minutes before its first in the stream: all of them
    # that the window holds (the window is whole 4-hour fields: at least the 24 hours up to the server hour).
    last = sent[0] - timedelta(minutes=30)
    seeded = [last - timedelta(minutes=30 * i) for i in range(48)][::-1]
    window = Window(get_settings().heartbeat_window_hours)
    assert heartbeat_slots(first) == [slot_start(t) for t in seeded if place(t, last, window) is not None]
    assert len(heartbeat_slots(first)) >= 47
    assert set(sent) <= set(heartbeat_slots(after))


@pytest.mark.integration
def test_the_batch_benchmarks_sides_store_the_same_events_all_of_them():
    """Like with like: the stream was one event a second, so the app kept one heartbeat per 5-minute slot of a
    100-event request (`stored: 17, duplicates: 83`) while the seeds' insert_many stored all 100. Three requests
    of two bottles, the last one short."""
    runs = ingestion.batch_runs(events=250, bottles=2)

    assert [(m.name, m.units, s.stored, s.duplicates) for m, s in runs] == [
        (ingestion.SEEDS_SINGLE, 250, 250, 0),
        (ingestion.SEEDS_MANY, 250, 250, 0),
        (ingestion.APP_BATCHES, 250, 250, 0),
    ]


def test_a_batch_streams_events_are_each_new_and_sent_once_they_happened():
    start = utc_now().replace(second=0, microsecond=0)
    uploads = ingestion.batch_stream(["bottle-a", "bottle-b"], 450, start)

    assert [(u.bottle_id, len(u.events)) for u in uploads] == [
        ("bottle-a", 100), ("bottle-b", 100), ("bottle-a", 100), ("bottle-b", 100), ("bottle-a", 50)
    ]  # fmt: skip
    for bottle_id in ("bottle-a", "bottle-b"):
        mine = [u for u in uploads if u.bottle_id == bottle_id]
        times = [datetime.fromisoformat(e["time"]) for u in mine for e in u.events]
        assert len({slot_start(t) for t in times}) == len(times)  # no two in one slot: none a repeat
        assert all(max(datetime.fromisoformat(e["time"]) for e in u.events) < u.at for u in mine)
        sent = [start, *(u.at for u in mine)]
        assert all(timedelta(0) < b - a <= timedelta(hours=MAX_GAP_HOURS) for a, b in itertools.pairwise(sent))
    assert [u.at for u in uploads] == sorted(u.at for u in uploads)  # the server clock only moves on
    assert uploads[-1].at - start == ingestion.stream_span(2, 450)
