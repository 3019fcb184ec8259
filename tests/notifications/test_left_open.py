"""check_open_bottles: a bottle whose last action is `opened`, open longer than LEFT_OPEN_MINUTES, is notified
once per episode (episode = when it was opened); a later close resolves it. At the edges: a resolved bottle leaves
the sweeps' range (no later run reads it again), and a reopening whose old episode the resolve sweep ends is
notified only once open longer than the limit, as the detect sweep would."""

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared.instants import format_instant
from shared.settings import get_settings
from shared.store import schema
from shared.store.partitioning import bucket_of
from tests.checking import World, sweep_all

START = datetime(2026, 5, 4, 9, 0, tzinfo=UTC)


@pytest.fixture
def world(db) -> Iterator[World]:
    bench = World(db, START)
    bench.provision()
    yield bench
    bench.stop()


def test_a_bottle_left_open_is_notified_once_and_the_close_resolves_it(world):
    opened_at = world.now
    world.open()

    assert world.after(minutes=5).check("left_open") == []  # open for 5 minutes: not yet more than 5
    messages = world.after(seconds=1).check("left_open")
    seen = world.now
    # Re-runs, every minute, while it stays open: nothing new.
    for _ in range(10):
        assert world.after(minutes=1).check("left_open") == []

    [notification] = world.notifications("left_open")
    notification_id = f"bottle-1|left_open|{format_instant(opened_at)}"
    assert notification == {
        "_id": notification_id,
        "user_id": "willcross1024",
        "bottle_id": "bottle-1",
        "medication": "Cordrazine",
        "kind": "left_open",
        "episode_start": opened_at,
        "created_at": seen,
        "resolved_at": None,
        "delivery": "queued",
        "queued_at": seen,
        "feed_key": f"{format_instant(seen)}|{notification_id}",
        "bucket": bucket_of("bottle-1"),  # the check partition that sends it is the one that swept the bottle
    }
    assert messages == [
        {
            "notification_id": notification_id,
            "user_id": "willcross1024",
            "bottle_id": "bottle-1",
            "medication": "Cordrazine",
            "kind": "left_open",
            "episode_start": format_instant(opened_at),
            "created_at": format_instant(seen),
        }
    ]

    world.after(minutes=3).close()
    assert world.after(minutes=1).check("left_open") == []
    [resolved] = world.notifications("left_open")
    assert resolved["resolved_at"] == world.now


def test_the_next_opening_is_a_new_episode(world):
    first = world.now
    world.open()
    world.after(minutes=6).check("left_open")
    world.after(minutes=1).close()
    world.after(minutes=1).check("left_open")

    second = world.after(hours=2).now
    world.open()
    world.after(minutes=5, seconds=1).check("left_open")
    world.after(minutes=5).check("left_open")

    assert world.episodes("left_open") == [first, second]
    assert [m["episode_start"] for m in world.sent] == [format_instant(first), format_instant(second)]
    older, newer = world.notifications("left_open")
    assert older["resolved_at"] is not None
    assert newer["resolved_at"] is None


def test_reopened_before_the_check_saw_the_close_resolves_the_old_episode_and_starts_a_new_one(world):
    first = world.now
    world.open()
    world.after(minutes=6).check("left_open")
    world.after(minutes=1).close()
    second = world.after(seconds=30).now
    world.open()

    world.after(seconds=30).check("left_open")
    assert [n["resolved_at"] for n in world.notifications("left_open")] == [world.now]
    world.after(minutes=5, seconds=1).check("left_open")

    assert world.episodes("left_open") == [first, second]


def test_opened_and_closed_within_the_limit_is_not_left_open(world):
    """Opened, then closed 4 minutes later: no run finds it left open. The runs that could are checked: while it
    is open, at the limit (LEFT_OPEN_MINUTES after the opening), just past it (a bottle still open would be
    notified there) and an hour later (a close that was ignored, or an episode that outlived it, would show by
    then); from the close on the bottle is in neither sweep's range, so any other run reads nothing."""
    opened_at = world.now
    world.open()
    assert world.after(minutes=4).check("left_open") == []  # open for 4 minutes, then closed
    world.close(taken=1)

    for moment in (timedelta(minutes=5), timedelta(minutes=5, seconds=1), timedelta(hours=1)):
        assert world.at(opened_at + moment).check("left_open") == []

    assert world.notifications("left_open") == []
    assert world.status()["last_action"] == "closed"


def test_an_opened_event_that_arrives_after_a_later_close_leaves_the_bottle_closed(world):
    world.after(minutes=20).close(taken=1)
    world.open(at=world.now - timedelta(minutes=10))  # buffered, older than the close
    world.after(minutes=10).check("left_open")
    assert world.notifications("left_open") == []


def test_a_closed_bottle_opened_long_ago_is_never_left_open(world):
    """A check that only runs after the close sees a closed bottle: no episode, nothing stored."""
    world.open()
    world.after(minutes=30).close()
    world.after(minutes=1).check("left_open")
    assert world.notifications("left_open") == []


def test_left_open_minutes_is_a_setting(world, monkeypatch):
    monkeypatch.setenv("LEFT_OPEN_MINUTES", "15")
    get_settings.cache_clear()
    world.open()
    assert world.after(minutes=15).check("left_open") == []
    assert len(world.after(seconds=1).check("left_open")) == 1


def test_only_bottles_in_trouble_are_notified(world):
    world.provision("bottle-2")
    world.provision("bottle-3", user_id="someone-else")
    world.open("bottle-1")
    world.open("bottle-3")
    world.after(minutes=2).open("bottle-2")
    world.after(minutes=1).close("bottle-2")

    world.after(minutes=3, seconds=1).check("left_open")

    assert sorted((n["bottle_id"], n["user_id"]) for n in world.notifications("left_open")) == [
        ("bottle-1", "willcross1024"),
        ("bottle-3", "someone-else"),
    ]
    bottle = world.db[schema.BOTTLES].find_one({"_id": "bottle-2"})
    assert bottle["open_since"] is None


@pytest.fixture
def mock_world(mock_db: Any) -> Iterator[World]:
    """A world on mongomock alone, provisioned: the sweeps' edges below need no second store."""
    bench = World(mock_db, START)
    bench.provision()
    yield bench
    bench.stop()


def test_a_resolved_left_open_bottle_is_not_read_again_by_later_runs(mock_world: World) -> None:
    mock_world.open()
    mock_world.after(minutes=6).check("left_open")
    mock_world.after(minutes=1).close()
    mock_world.after(minutes=1).check("left_open")

    bottle = mock_world.db[schema.BOTTLES].find_one({"_id": "bottle-1"})
    assert "open_episode" not in bottle  # the marker the resolve sweep selects on is gone
    later = sweep_all(mock_world.db, "left_open", now=mock_world.after(minutes=1).now, send=mock_world.queue)
    assert (later.examined, later.resolved) == (0, 0)
    [notification] = mock_world.notifications("left_open")
    assert notification["resolved_at"] is not None


def test_a_reopening_is_notified_only_once_open_longer_than_the_limit_though_the_old_episode_ends_first(
    mock_world: World,
) -> None:
    """The check runs exactly LEFT_OPEN_MINUTES (5) after the reopening, and not before: its resolve sweep ends
    the old episode, and the new one is not yet more than 5 minutes old."""
    first = mock_world.now
    mock_world.open()
    mock_world.after(minutes=6).check("left_open")
    mock_world.after(minutes=1).close()
    second = mock_world.after(minutes=1).now
    mock_world.open()

    assert mock_world.after(minutes=5).check("left_open") == []
    assert mock_world.episodes("left_open") == [first]
    [old] = mock_world.notifications("left_open")
    assert old["resolved_at"] == mock_world.now

    [message] = mock_world.after(seconds=1).check("left_open")
    assert mock_world.episodes("left_open") == [first, second]
    assert message["episode_start"] == "2026-05-04T09:08:00.000Z"
