"""A silent bottle that comes back after a silence longer than the ring's gap (MAX_GAP_HOURS): its heartbeat
takes ingestion's slow path, which rewrites the ring whole; the silent check must still see it, and resolve the
notification (shared/ingestion/storing.py, shared/notifications/checks/rules.py)."""

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from shared.heartbeat_document import MAX_GAP_HOURS
from tests.checking import World
from tests.notifications.test_silent import START


@pytest.fixture
def world(mock_db: Any) -> Iterator[World]:
    bench = World(mock_db, START)
    yield bench
    bench.stop()


def test_a_heartbeat_after_a_silence_longer_than_the_ring_gap_resolves_the_silent_notification(world: World) -> None:
    world.provision()
    world.after(minutes=10).heartbeat()
    world.every("silent", until=world.now + timedelta(hours=MAX_GAP_HOURS + 1))
    [notified] = world.notifications("silent")
    assert notified.get("resolved_at") is None

    world.heartbeat()
    back = world.now
    world.after(minutes=5).check("silent")

    [resolved] = world.notifications("silent")
    assert resolved["resolved_at"] == back + timedelta(minutes=5)
