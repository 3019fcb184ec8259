"""check_silent_bottles: no heartbeat for more than SILENT_MINUTES (a bottle that never sent one counts from its
provisioning) is notified once per episode (episode = the last heartbeat, or provisioning); the next heartbeat
resolves it, also after a silence longer than the ring's gap (MAX_GAP_HOURS: ingestion's slow path rewrites the
ring whole). A heartbeat that ends a notified silence starts a new episode only once silent longer than the limit."""

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared.devices.heartbeat_document import MAX_GAP_HOURS
from shared.settings import get_settings
from shared.store import schema
from tests.checking import World

START = datetime(2026, 5, 4, 9, 0, tzinfo=UTC)


@pytest.fixture
def world(db) -> Iterator[World]:
    bench = World(db, START)
    yield bench
    bench.stop()


def test_a_bottle_that_never_sends_a_heartbeat_is_silent_from_its_provisioning(world):
    world.provision()
    assert world.after(minutes=60).check("silent") == []
    [message] = world.after(minutes=1).check("silent")
    assert message["kind"] == "silent"
    assert world.episodes("silent") == [START]


def test_silence_is_notified_once_resolved_by_the_next_heartbeat_and_notified_again_next_time(world):
    world.provision()
    for _ in range(4):
        world.after(minutes=30).heartbeat()
    last = world.now

    # Checks every 5 minutes through three silent hours: one notification.
    messages = world.every("silent", until=last + timedelta(hours=3))
    assert [m["episode_start"] for m in messages] == ["2026-05-04T11:00:00.000Z"]
    assert world.episodes("silent") == [last]

    world.heartbeat()
    back = world.now
    world.after(minutes=5).check("silent")
    [first] = world.notifications("silent")
    assert first["resolved_at"] == back + timedelta(minutes=5)

    # Silent again: a new episode from the heartbeat that ended the first one.
    world.every("silent", until=back + timedelta(hours=2))
    assert world.episodes("silent") == [last, back]
    assert len(world.sent) == 2


def test_a_bottle_heard_from_in_time_is_never_silent(world):
    """Heard from every 30 minutes, checked at each heartbeat and 5 minutes after: never silent. Two hours show it:
    a silence counted from provisioning, or from the first heartbeat, would be longer than the limit (60 minutes)
    by the check at 65, or at 95, minutes."""
    world.provision()
    end = world.now + timedelta(hours=2)
    while world.now < end:
        world.after(minutes=30).heartbeat()
        world.check("silent")
        world.after(minutes=5).check("silent")
        world.now -= timedelta(minutes=5)
    assert world.notifications("silent") == []


def test_an_old_buffered_heartbeat_neither_resolves_nor_repeats_the_episode(world):
    world.provision()
    world.after(minutes=30).heartbeat()
    last = world.now
    world.after(minutes=90).check("silent")
    world.heartbeat(at=last - timedelta(minutes=20))  # an older one arrives late
    world.after(minutes=5).check("silent")

    [notification] = world.notifications("silent")
    assert notification["episode_start"] == last
    assert notification["resolved_at"] is None


def test_heartbeats_buffered_while_offline_resolve_and_the_episode_is_the_last_heard(world):
    world.provision()
    world.after(minutes=10).heartbeat()
    last = world.now
    world.every("silent", until=last + timedelta(hours=3))
    # Back online: the buffered heartbeats arrive in one batch.
    world.post(
        "bottle-1",
        *({"type": "heartbeat", "time": (last + timedelta(minutes=30 * i)).isoformat()} for i in range(1, 7)),
    )
    world.after(minutes=5).check("silent")

    [notification] = world.notifications("silent")
    assert notification["episode_start"] == last
    assert notification["resolved_at"] == world.now


def test_silent_minutes_is_a_setting(world, monkeypatch):
    monkeypatch.setenv("SILENT_MINUTES", "120")
    get_settings.cache_clear()
    world.provision()
    world.heartbeat()
    assert world.after(minutes=120).check("silent") == []
    assert len(world.after(seconds=1).check("silent")) == 1


def test_the_heartbeat_document_carries_what_the_check_reads(world):
    world.provision()
    world.after(minutes=70).check("silent")
    document = world.db[schema.BOTTLE_HEARTBEATS].find_one({"_id": "bottle-1"})
    assert (document["silent_pending"], document["silent_episode"]) == (False, START)

    world.heartbeat()
    document = world.db[schema.BOTTLE_HEARTBEATS].find_one({"_id": "bottle-1"})
    assert (document["silent_pending"], document["alive_at"]) == (True, world.now)
    world.check("silent")
    assert "silent_episode" not in world.db[schema.BOTTLE_HEARTBEATS].find_one({"_id": "bottle-1"})


@pytest.fixture
def mock_world(mock_db: Any) -> Iterator[World]:
    """A world on mongomock alone: the sweeps' edges below need no second store."""
    bench = World(mock_db, START)
    yield bench
    bench.stop()


def test_a_heartbeat_after_a_silence_longer_than_the_ring_gap_resolves_the_silent_notification(
    mock_world: World,
) -> None:
    mock_world.provision()
    mock_world.after(minutes=10).heartbeat()
    mock_world.every("silent", until=mock_world.now + timedelta(hours=MAX_GAP_HOURS + 1))
    [notified] = mock_world.notifications("silent")
    assert notified.get("resolved_at") is None

    mock_world.heartbeat()
    back = mock_world.now
    mock_world.after(minutes=5).check("silent")

    [resolved] = mock_world.notifications("silent")
    assert resolved["resolved_at"] == back + timedelta(minutes=5)


def test_a_heartbeat_after_a_silence_starts_a_new_one_only_once_silent_longer_than_the_limit(mock_world: World) -> None:
    """The check runs exactly SILENT_MINUTES (60) after the heartbeat that ended a notified silence, and not
    before: its resolve sweep ends the old episode, and the new silence is not yet more than 60 minutes long."""
    mock_world.provision()
    mock_world.after(minutes=61).check("silent")  # silent since provisioning
    back = mock_world.after(minutes=10).now
    mock_world.heartbeat()

    assert mock_world.after(minutes=60).check("silent") == []
    assert mock_world.episodes("silent") == [START]
    [old] = mock_world.notifications("silent")
    assert old["resolved_at"] == mock_world.now

    [message] = mock_world.after(seconds=1).check("silent")
    assert mock_world.episodes("silent") == [START, back]
    assert message["episode_start"] == "2026-05-04T10:11:00.000Z"
