"""Cost goals, counted on a real server (SecantusDB): database commands per ingestion request."""

from datetime import timedelta

import pytest

from shared.devices.heartbeat_document import MAX_GAP_HOURS
from shared.doses.schedules import TimesSchedule
from shared.instants import set_clock, utc_now
from shared.store import schema
from tests.api import SPEC, ago, closed, heartbeat, opened, post_events, provisioned
from tests.heartbeats import counted as counted_heartbeats
from tests.heartbeats import slot

pytestmark = pytest.mark.integration


def warm(key: str) -> None:
    """An earlier opened event: the bottle is in use, its status written once."""
    assert post_events("bottle-1", key, opened(ago(hours=3))).status == 202


def provisioned_earlier(hours: float = 1) -> str:
    """A bottle provisioned `hours` ago: its heartbeats come after it, as a device's do. Its device key."""
    earlier = utc_now() - timedelta(hours=hours)
    set_clock(lambda: earlier)
    try:
        return provisioned()
    finally:
        set_clock(None)


def test_a_heartbeat_is_one_update_and_no_read_even_on_a_cold_worker(counted):
    db, counter = counted
    key = provisioned_earlier()
    counter.reset()

    at = ago(minutes=1)
    assert post_events("bottle-1", key, heartbeat(at)).body == {"stored": 1, "duplicates": 0, "expired": 0}

    # Newer than any heartbeat before: the update's filter says so, and needs no reply to tell a repeat.
    assert counter.writes == [("update", schema.BOTTLE_HEARTBEATS)]
    assert counter.reads == []
    assert counted_heartbeats(db) == [slot(at)]


def test_a_retried_heartbeat_is_told_apart_by_the_find_and_modify_after_the_update_and_not_counted_again(counted):
    db, counter = counted
    key = provisioned_earlier()
    at = ago(minutes=1)
    post_events("bottle-1", key, heartbeat(at))
    counter.reset()

    assert post_events("bottle-1", key, heartbeat(at)).body == {"stored": 0, "duplicates": 1, "expired": 0}

    # The update matches nothing (not newer than the last); the findAndModify's reply, the ring as it was,
    # shows the slot already there: no read.
    assert counter.writes == [("update", schema.BOTTLE_HEARTBEATS), ("findAndModify", schema.BOTTLE_HEARTBEATS)]
    assert counter.reads == []
    assert counted_heartbeats(db) == [slot(at)]


def test_a_heartbeat_sent_out_of_order_is_new_and_counted_in_its_own_slot(counted):
    db, counter = counted
    key = provisioned_earlier()
    old, new = ago(minutes=31), ago(minutes=1)
    post_events("bottle-1", key, heartbeat(new))
    counter.reset()

    assert post_events("bottle-1", key, heartbeat(old)).body == {"stored": 1, "duplicates": 0, "expired": 0}

    assert counter.writes == [("update", schema.BOTTLE_HEARTBEATS), ("findAndModify", schema.BOTTLE_HEARTBEATS)]
    assert counter.reads == []
    assert counted_heartbeats(db) == [slot(old), slot(new)]


def test_several_heartbeats_are_one_write_when_all_new_and_a_reply_tells_the_repeats_apart(counted):
    db, counter = counted
    key = provisioned_earlier()
    old, new, newer = ago(minutes=31), ago(minutes=16), ago(minutes=1)
    post_events("bottle-1", key, heartbeat(old))
    counter.reset()

    assert post_events("bottle-1", key, {"events": [heartbeat(new), heartbeat(newer)]}).body == {
        "stored": 2,
        "duplicates": 0,
        "expired": 0,
    }
    assert counter.writes == [("update", schema.BOTTLE_HEARTBEATS)]
    counter.reset()

    assert post_events("bottle-1", key, {"events": [heartbeat(old), heartbeat(newer + timedelta(seconds=1))]}).body == {
        "stored": 0,
        "duplicates": 2,
        "expired": 0,
    }
    assert counter.writes == [("update", schema.BOTTLE_HEARTBEATS), ("findAndModify", schema.BOTTLE_HEARTBEATS)]
    assert counter.reads == []
    assert counted_heartbeats(db) == [slot(old), slot(new), slot(newer)]


def test_a_wrong_key_on_a_heartbeat_writes_nothing_and_costs_one_read(counted):
    db, counter = counted
    provisioned_earlier()
    before = db[schema.BOTTLE_HEARTBEATS].find_one({"_id": "bottle-1"})
    counter.reset()

    assert post_events("bottle-1", "not-the-key", heartbeat(ago(minutes=1))).status == 401

    # Both writes matched nothing.
    assert counter.writes == [("update", schema.BOTTLE_HEARTBEATS), ("findAndModify", schema.BOTTLE_HEARTBEATS)]
    assert counter.reads == [("find", schema.BOTTLE_HEARTBEATS)]  # a wrong key, or a long silence? a wrong key
    assert db[schema.BOTTLE_HEARTBEATS].find_one({"_id": "bottle-1"}) == before


def test_the_first_heartbeat_after_a_long_silence_costs_one_more_read_and_write(counted):
    db, counter = counted
    key = provisioned_earlier()
    early = ago(minutes=1)
    post_events("bottle-1", key, heartbeat(early))
    back = utc_now() + timedelta(hours=MAX_GAP_HOURS + 2)
    set_clock(lambda: back)
    counter.reset()
    try:
        assert post_events("bottle-1", key, heartbeat(back - timedelta(minutes=5))).body == {
            "stored": 1,
            "duplicates": 0,
            "expired": 0,
        }
        assert post_events("bottle-1", key, heartbeat(back)).status == 202
    finally:
        set_clock(None)

    # The ring was last written too long ago to be cleared in place: neither write matches; read, then written
    # whole. Once: the next heartbeat is one update.
    assert counter.writes == [
        ("update", schema.BOTTLE_HEARTBEATS),
        ("findAndModify", schema.BOTTLE_HEARTBEATS),
        ("update", schema.BOTTLE_HEARTBEATS),
        ("update", schema.BOTTLE_HEARTBEATS),
    ]
    assert counter.reads == [("find", schema.BOTTLE_HEARTBEATS)]
    assert counted_heartbeats(db) == [slot(early), slot(back - timedelta(minutes=5)), slot(back)]


def test_an_opened_event_is_one_insert_and_one_single_statement_status_update(counted):
    _db, counter = counted
    key = provisioned()
    warm(key)
    counter.reset()

    assert post_events("bottle-1", key, opened(ago(minutes=1))).status == 202

    assert counter.write_statements == [("insert", schema.BOTTLE_ACTIONS, 1), ("update", schema.BOTTLES, 1)]
    assert counter.reads == [("find", schema.BOTTLES)]  # its key, owner and medication; the status write reads nothing


def test_a_close_without_a_dose_is_one_status_statement_and_a_second_only_after_an_open_at_its_instant(counted):
    db, counter = counted
    key = provisioned()
    warm(key)
    moment = ago(minutes=2)
    counter.reset()

    assert post_events("bottle-1", key, closed(moment, taken=0)).status == 202
    assert counter.write_statements == [("insert", schema.BOTTLE_ACTIONS, 1), ("update", schema.BOTTLES, 1)]

    counter.reset()
    later = moment + timedelta(seconds=30)
    assert post_events("bottle-1", key, {"events": [opened(later), closed(later, taken=0)]}).status == 202
    # The close sorts after the open of its instant: the status is closed, by one statement.
    assert counter.write_statements == [("insert", schema.BOTTLE_ACTIONS, 2), ("update", schema.BOTTLES, 1)]

    counter.reset()
    then = moment + timedelta(minutes=1)
    post_events("bottle-1", key, opened(then))
    assert post_events("bottle-1", key, closed(then, taken=0)).status == 202
    # The close of an open at its own instant: the first filter (an older last action) matches nothing.
    assert counter.write_statements == [
        ("insert", schema.BOTTLE_ACTIONS, 1),
        ("update", schema.BOTTLES, 1),
        ("insert", schema.BOTTLE_ACTIONS, 1),
        ("update", schema.BOTTLES, 1),
        ("update", schema.BOTTLES, 1),
    ]
    bottle = db[schema.BOTTLES].find_one({"_id": "bottle-1"})
    assert (bottle["last_action"], bottle["open_since"]) == ("closed", None)
    assert bottle["last_action_time"] == then


def test_a_dose_is_one_insert_one_read_and_one_single_statement_update_of_its_bottle(counted):
    """The status, the last dose, the dose history and the next dose due: one statement, so Cosmos DB charges
    one replace of the bottle, not one per change; computed from the bottle as read."""
    db, counter = counted
    key = provisioned()
    warm(key)
    before = db[schema.BOTTLES].find_one({"_id": "bottle-1"})
    due = before["dose_due"]
    set_clock(lambda: due + timedelta(minutes=10))
    counter.reset()
    try:
        assert post_events("bottle-1", key, closed(due + timedelta(minutes=5))).status == 202  # the due slot's dose
    finally:
        set_clock(None)

    assert counter.write_statements == [("insert", schema.BOTTLE_ACTIONS, 1), ("update", schema.BOTTLES, 1)]
    assert counter.reads == [("find", schema.BOTTLES)]
    after = db[schema.BOTTLES].find_one({"_id": "bottle-1"})
    assert after["last_action"] == "closed"
    assert after["doses"] == [due + timedelta(minutes=5)]
    assert after["dose_due"] == TimesSchedule.model_validate(SPEC["schedule"]).slot_after(due)
    assert after["dose_seq"] == before["dose_seq"] + 1


def test_a_dose_on_a_cold_worker_reads_its_bottle_once(counted):
    _db, counter = counted
    key = provisioned()
    counter.reset()

    assert post_events("bottle-1", key, closed(ago(minutes=1))).status == 202

    # One read serves the key check, the owner and medication of the action, and the status write.
    assert counter.reads == [("find", schema.BOTTLES)]
    assert counter.write_statements == [("insert", schema.BOTTLE_ACTIONS, 1), ("update", schema.BOTTLES, 1)]


def test_a_retried_dose_already_applied_costs_no_status_write(counted):
    _db, counter = counted
    key = provisioned()
    event = closed(ago(minutes=1))
    assert post_events("bottle-1", key, event).status == 202
    counter.reset()

    assert post_events("bottle-1", key, event).body == {"stored": 0, "duplicates": 1, "expired": 0}

    # The action's insert answers duplicate, its content is compared (one read), and the bottle shows it all.
    assert counter.write_statements == [("insert", schema.BOTTLE_ACTIONS, 1)]
    assert counter.reads == [("find", schema.BOTTLES), ("find", schema.BOTTLE_ACTIONS)]


def test_a_batch_of_100_costs_a_constant_number_of_round_trips(counted):
    db, counter = counted
    key = provisioned_earlier(hours=6)
    warm(key)
    events = []
    for i in range(50):
        events.append(heartbeat(ago(minutes=60 + 5 * i)))  # each in its own 5-minute slot
    for i in range(25):
        events += [opened(ago(minutes=50 - i, seconds=30)), closed(ago(minutes=50 - i, seconds=10))]
    counter.reset()

    assert post_events("bottle-1", key, {"events": events}).body == {"stored": 100, "duplicates": 0, "expired": 0}

    assert counter.write_statements == [
        ("update", schema.BOTTLE_HEARTBEATS, 1),
        ("insert", schema.BOTTLE_ACTIONS, 50),
        ("update", schema.BOTTLES, 1),
    ]
    assert counter.reads == [("find", schema.BOTTLES)]  # the bottle, for its doses
    assert db[schema.BOTTLE_ACTIONS].count_documents({}) == 51  # and the warm-up's


def test_every_action_request_reads_its_bottle_once_never_a_cached_copy(counted):
    """A copy kept by a worker would accept a key rotated out on another worker until it expired."""
    _db, counter = counted
    key = provisioned()
    counter.reset()
    post_events("bottle-1", key, opened(ago(minutes=2)))
    post_events("bottle-1", key, opened(ago(minutes=1), event_id="again"))
    assert counter.reads == [("find", schema.BOTTLES), ("find", schema.BOTTLES)]
