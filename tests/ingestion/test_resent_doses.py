"""A device resends what it is not sure was stored (its answer was lost): the dose in it is already in the bottle's
`doses`, so it changes nothing of the dose tracking (shared/ingestion/storing.py, computed_status_write). Whatever
else the request brings still moves the status; a request that brings nothing new writes nothing to the bottle
(Cosmos DB charges every write of a document as a replace of the whole document)."""

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared.instants import format_instant
from shared.store import schema
from tests.api import closed, opened
from tests.checking import World

# In May, Europe/Rome is UTC+2: the default schedule's 08:00 and 20:00 are 06:00 and 18:00 UTC.
DAY = datetime(2026, 5, 4, tzinfo=UTC)
MORNING = DAY + timedelta(hours=6)


@pytest.fixture
def world(mock_db: Any) -> Iterator[World]:
    bench = World(mock_db, MORNING)
    yield bench
    bench.stop()


def stored_bottle(world: World) -> dict[str, Any]:
    return dict(world.db[schema.BOTTLES].find_one({"_id": "bottle-1"}) or {})


def test_a_resent_dose_with_a_new_open_leaves_the_bottle_open(world):
    world.provision()
    dose = closed(MORNING, taken=1, event_id="c-1")
    world.post("bottle-1", dose)
    later = MORNING + timedelta(minutes=20)

    world.after(minutes=20).post("bottle-1", dose, opened(later, event_id="o-2"))

    status = world.status()
    assert (status["last_action"], status["open_since"]) == ("opened", format_instant(later))
    assert status["last_dose_time"] == format_instant(MORNING)
    assert stored_bottle(world)["doses"] == [MORNING]


def test_a_resent_dose_request_writes_nothing_to_the_bottle(world):
    world.provision()
    request = (opened(MORNING - timedelta(seconds=30), event_id="o-1"), closed(MORNING, taken=1, event_id="c-1"))
    world.post("bottle-1", *request)
    before = stored_bottle(world)

    world.after(minutes=2).post("bottle-1", *request)

    assert stored_bottle(world) == before
