"""After a silence longer than MAX_GAP_HOURS a heartbeat request goes the slow way: the heartbeat document is read
and its ring written whole (shared/ingestion/storing.py, store_heartbeats). A device back from such a silence may
resend a heartbeat from before it (its answer was lost): the ring still has it, so the request's answer counts it
as a duplicate, as the fast way would."""

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared.devices.heartbeat_document import MAX_GAP_HOURS
from tests.api import heartbeat, post_events
from tests.checking import World
from tests.heartbeats import counted, slot

T0 = datetime(2026, 5, 4, 6, 1, tzinfo=UTC)


@pytest.fixture
def world(mock_db: Any) -> Iterator[World]:
    bench = World(mock_db, T0 - timedelta(hours=1))
    yield bench
    bench.stop()


def test_a_heartbeat_from_before_a_long_silence_resent_with_a_new_one_is_a_duplicate(world):
    world.provision()
    world.at(T0).heartbeat()
    back = world.after(hours=MAX_GAP_HOURS + 1).now

    response = post_events("bottle-1", world.keys["bottle-1"], {"events": [heartbeat(T0), heartbeat(back)]})

    assert (response.status, response.body) == (202, {"stored": 1, "duplicates": 1, "expired": 0})
    assert counted(world.db) == [slot(T0), slot(back)]
