"""Edges of the left-open and silent episodes the other check tests leave open: a resolved bottle leaves both
sweeps' ranges (its marker is unset, so no later run reads it again), and a bottle whose old episode the resolve
sweep ends is notified of its new one only once that one is longer than the limit, as the detect sweep would."""

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from shared.store import schema
from tests.checking import World, sweep_all

START = datetime(2026, 5, 4, 9, 0, tzinfo=UTC)


@pytest.fixture
def world(mock_db: Any) -> Iterator[World]:
    bench = World(mock_db, START)
    bench.provision()
    yield bench
    bench.stop()


def test_a_resolved_left_open_bottle_is_not_read_again_by_later_runs(world: World) -> None:
    world.open()
    world.after(minutes=6).check("left_open")
    world.after(minutes=1).close()
    world.after(minutes=1).check("left_open")

    bottle = world.db[schema.BOTTLES].find_one({"_id": "bottle-1"})
    assert "open_episode" not in bottle  # the marker the resolve sweep selects on is gone
    later = sweep_all(world.db, "left_open", now=world.after(minutes=1).now, send=world.queue)
    assert (later.examined, later.resolved) == (0, 0)
    [notification] = world.notifications("left_open")
    assert notification["resolved_at"] is not None


def test_a_reopening_is_notified_only_once_open_longer_than_the_limit_though_the_old_episode_ends_first(
    world: World,
) -> None:
    """The check runs exactly LEFT_OPEN_MINUTES (5) after the reopening, and not before: its resolve sweep ends
    the old episode, and the new one is not yet more than 5 minutes old."""
    first = world.now
    world.open()
    world.after(minutes=6).check("left_open")
    world.after(minutes=1).close()
    second = world.after(minutes=1).now
    world.open()

    assert world.after(minutes=5).check("left_open") == []
    assert world.episodes("left_open") == [first]
    [old] = world.notifications("left_open")
    assert old["resolved_at"] == world.now

    [message] = world.after(seconds=1).check("left_open")
    assert world.episodes("left_open") == [first, second]
    assert message["episode_start"] == "2026-05-04T09:08:00.000Z"


def test_a_heartbeat_after_a_silence_starts_a_new_one_only_once_silent_longer_than_the_limit(world: World) -> None:
    """The check runs exactly SILENT_MINUTES (60) after the heartbeat that ended a notified silence, and not
    before: its resolve sweep ends the old episode, and the new silence is not yet more than 60 minutes long."""
    world.after(minutes=61).check("silent")  # silent since provisioning
    back = world.after(minutes=10).now
    world.heartbeat()

    assert world.after(minutes=60).check("silent") == []
    assert world.episodes("silent") == [START]
    [old] = world.notifications("silent")
    assert old["resolved_at"] == world.now

    [message] = world.after(seconds=1).check("silent")
    assert world.episodes("silent") == [START, back]
    assert message["episode_start"] == "2026-05-04T10:11:00.000Z"
