"""Cost goals, counted on a real server (SecantusDB): database commands per ingestion request."""

from datetime import timedelta

import pytest

from shared.heartbeat_document import MAX_GAP_HOURS
from shared.instants import set_clock, utc_now
from shared.store import schema
from tests.api import ago, closed, heartbeat, opened, post_events, provisioned
from tests.heartbeats import counted as counted_heartbeats
from tests.heartbeats import slot

pytestmark = pytest.mark.integration


def warm(key: str) -> None:
    """The first action request of a worker reads the registry; later ones are served from its cache."""
    assert post_events("bottle-1", key, opened(ago(hours=3))).status == 202


def test_a_heartbeat_is_one_write_and_no_read_even_on_a_cold_worker(counted):
    _db, counter = counted
    key = provisioned()
    counter.reset()

    assert post_events("bottle-1", key, heartbeat(ago(minutes=1))).body == {"stored": 1, "duplicates": 0}

    assert counter.writes == [("findAndModify", schema.BOTTLE_HEARTBEATS)]
    assert counter.reads == []


def test_a_retried_heartbeat_costs_the_same_one_write_and_is_not_counted_again(counted):
    db, counter = counted
    key = provisioned()
    at = ago(minutes=1)
    post_events("bottle-1", key, heartbeat(at))
    counter.reset()

    assert post_events("bottle-1", key, heartbeat(at)).body == {"stored": 0, "duplicates": 1}

    # The write's reply, the ring as it was, shows the slot already there: no read tells a repeat apart.
    assert counter.writes == [("findAndModify", schema.BOTTLE_HEARTBEATS)]
    assert counter.reads == []
    assert counted_heartbeats(db) == [slot(at)]


def test_several_heartbeats_are_one_write_whose_reply_tells_the_repeats_apart(counted):
    db, counter = counted
    key = provisioned()
    old, new = ago(minutes=31), ago(minutes=1)
    post_events("bottle-1", key, heartbeat(old))
    counter.reset()

    assert post_events("bottle-1", key, {"events": [heartbeat(old), heartbeat(new)]}).body == {
        "stored": 1,
        "duplicates": 1,
    }

    assert counter.writes == [("findAndModify", schema.BOTTLE_HEARTBEATS)]  # the ring as it was, in the reply
    assert counter.reads == []
    assert counted_heartbeats(db) == [slot(old), slot(new)]


def test_a_wrong_key_on_a_heartbeat_writes_nothing_and_costs_one_read(counted):
    db, counter = counted
    provisioned()
    before = db[schema.BOTTLE_HEARTBEATS].find_one({"_id": "bottle-1"})
    counter.reset()

    assert post_events("bottle-1", "not-the-key", heartbeat(ago(minutes=1))).status == 401

    assert counter.writes == [("findAndModify", schema.BOTTLE_HEARTBEATS)]  # matched nothing
    assert counter.reads == [("find", schema.BOTTLE_HEARTBEATS)]  # a wrong key, or a long silence? a wrong key
    assert db[schema.BOTTLE_HEARTBEATS].find_one({"_id": "bottle-1"}) == before


def test_the_first_heartbeat_after_a_long_silence_costs_one_more_read_and_write(counted):
    db, counter = counted
    key = provisioned()
    early = ago(minutes=1)
    post_events("bottle-1", key, heartbeat(early))
    back = utc_now() + timedelta(hours=MAX_GAP_HOURS + 2)
    set_clock(lambda: back)
    counter.reset()
    try:
        assert post_events("bottle-1", key, heartbeat(back - timedelta(minutes=5))).body == {
            "stored": 1,
            "duplicates": 0,
        }
        assert post_events("bottle-1", key, heartbeat(back)).status == 202
    finally:
        set_clock(None)

    # The ring was last written too long ago to be cleared in place: read, then written whole. Once.
    assert counter.writes == [
        ("findAndModify", schema.BOTTLE_HEARTBEATS),
        ("update", schema.BOTTLE_HEARTBEATS),
        ("findAndModify", schema.BOTTLE_HEARTBEATS),
    ]
    assert counter.reads == [("find", schema.BOTTLE_HEARTBEATS)]
    assert counted_heartbeats(db) == [slot(early), slot(back - timedelta(minutes=5)), slot(back)]


@pytest.mark.parametrize("make_event", [opened, closed], ids=["opened", "closed"])
def test_an_action_is_at_most_two_writes(counted, make_event):
    _db, counter = counted
    key = provisioned()
    warm(key)
    counter.reset()

    assert post_events("bottle-1", key, make_event(ago(minutes=1))).status == 202

    assert counter.writes == [("insert", schema.BOTTLE_ACTIONS), ("update", schema.BOTTLES)]
    assert counter.reads == []


def test_a_batch_of_100_costs_a_constant_number_of_round_trips(counted):
    db, counter = counted
    key = provisioned()
    warm(key)
    events = []
    for i in range(50):
        events.append(heartbeat(ago(minutes=60 + 5 * i)))  # each in its own 5-minute slot
    for i in range(25):
        events += [opened(ago(minutes=50 - i, seconds=30)), closed(ago(minutes=50 - i, seconds=10))]
    counter.reset()

    assert post_events("bottle-1", key, {"events": events}).body == {"stored": 100, "duplicates": 0}

    assert counter.writes == [
        ("findAndModify", schema.BOTTLE_HEARTBEATS),
        ("insert", schema.BOTTLE_ACTIONS),
        ("update", schema.BOTTLES),
    ]
    assert counter.reads == []
    assert db[schema.BOTTLE_ACTIONS].count_documents({}) == 51  # and the warm-up's


def test_the_first_action_request_of_a_worker_reads_the_registry_once(counted):
    _db, counter = counted
    key = provisioned()
    counter.reset()
    post_events("bottle-1", key, opened(ago(minutes=2)))
    post_events("bottle-1", key, closed(ago(minutes=1)))
    assert counter.reads == [("find", schema.BOTTLES)]
