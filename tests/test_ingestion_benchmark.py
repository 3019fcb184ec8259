"""The ingestion benchmark's baseline is the seeds' approach as a whole request, held to the app's contract, and
the benchmark measures the app on its own database with its indexes (benchmarks/ingestion.py)."""

import json

import pytest

from benchmarks import ingestion
from tests.api import ago, closed, heartbeat, provisioned


def seeds_post(bottle_id: str, key: str, event: dict[str, object]) -> tuple[int, bytes]:
    response = ingestion.seeds_post_events(ingestion._request("POST", bottle_id, json.dumps(event).encode(), key))
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


@pytest.mark.integration
def test_the_benchmark_runs_the_app_and_the_floor_on_the_apps_indexed_database():
    # The store floor asserts that its updates matched a heartbeat document: they did not when the benchmark set up
    # another database than the one the app's functions wrote to.
    text = ingestion.run(events=48, bottles=4)

    rows = [line.split("  ")[0] for line in text.splitlines()[3:]]
    assert rows[0].startswith("naive (seeds)")
    assert [r for r in rows if r.startswith("app: ")] == ["app: one event per request", "app: batches of 100"]
    assert "CPU ms/event" in text.splitlines()[1]
