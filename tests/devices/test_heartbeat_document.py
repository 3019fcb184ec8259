"""The heartbeat document at its edges (shared/devices/heartbeat_document.py): a reassignment that falls inside a
5-minute slot, a heartbeat time with a fraction of a second, a buffered heartbeat after a long silence, a ring write
exactly MAX_GAP_HOURS after the last, an earlier owner on the window's edge, and a ring flagged by the bucket
backfill. Each reads what a user would: the reports the tally writes, how many heartbeats a request stored,
which heartbeats the ring holds."""

from datetime import timedelta
from typing import Any

import pytest

from shared.devices.heartbeat_document import MAX_GAP_HOURS, USER_BUCKET, slot_start
from shared.settings import Settings
from shared.store import schema
from shared.store.setup import backfill_buckets
from tests.ingestion.rings import POLICY, T0, Bottle
from tests.tally_fleet import CLOCK, DAY, HOUR, Fleet

# The tests play their instants from a fixed day: the clock runs from a week after it (tests/tally_fleet.py).
pytestmark = pytest.mark.own_clock(CLOCK)

MINUTE = timedelta(minutes=1)
SECOND = timedelta(seconds=1)


@pytest.mark.parametrize(
    ("reassigned_after", "owner"),
    [
        (4 * MINUTE + 30 * SECOND, "new"),  # inside the heartbeat's slot (minutes 0-4): the new owner's
        (5 * MINUTE + 30 * SECOND, "old"),  # in the next slot: the heartbeat was the old owner's
    ],
)
def test_a_heartbeat_counts_for_whoever_owned_the_bottle_when_its_5_minute_slot_ended(
    mock_db: Any, reassigned_after: timedelta, owner: str
) -> None:
    """A heartbeat at 08:02 is known by its slot (08:00-08:04): it counts for the owner at the slot's last minute,
    so a reassignment at 08:04:30 gives it to the new owner, one at 08:05:30 leaves it with the old."""
    fleet = Fleet(mock_db, Settings())
    hour = DAY + 8 * HOUR
    fleet.provision("b1", "old", DAY)
    fleet.beat("b1", hour + 2 * MINUTE)
    fleet.provision("b1", "new", hour + reassigned_after)
    fleet.tally(hour + HOUR + 15 * MINUTE)

    other = "old" if owner == "new" else "new"
    assert fleet.hourly(owner) == {hour: 1}
    assert fleet.hourly(other) == {}


def test_an_earlier_owner_of_the_first_slot_of_the_window_keeps_its_heartbeat_when_the_hour_is_counted_again(
    mock_db: Any,
) -> None:
    """The bottle moves from `old` to `new` at 08:05:00, so `old` owned the heartbeat of 08:02 (slot 08:00-08:04).
    A day later 08:00 is the first hour of the window (24 hours, whole 4-hour fields) and a heartbeat of 08:40
    arrives late: the hour is counted again, and the 08:02 heartbeat must still be `old`'s, so `old` must still
    be among the bottle's earlier owners after that write."""
    fleet = Fleet(mock_db, Settings())
    hour = DAY + 8 * HOUR  # the first hour of a 4-hour field
    fleet.provision("b1", "old", DAY)
    fleet.beat("b1", hour + 2 * MINUTE)
    fleet.provision("b1", "new", hour + 5 * MINUTE)
    fleet.beat("b1", hour + 30 * MINUTE)
    fleet.tally(hour + HOUR + 15 * MINUTE)
    assert (fleet.hourly("old"), fleet.hourly("new")) == ({hour: 1}, {hour: 1})
    for later in (6, 12, 18):  # ring writes at most MAX_GAP_HOURS apart
        fleet.beat("b1", hour + later * HOUR)

    fleet.beat("b1", hour + 40 * MINUTE, received=hour + 23 * HOUR + 30 * MINUTE)  # late: its window's first hour
    fleet.tally(hour + 24 * HOUR + 15 * MINUTE)

    assert fleet.hourly("old") == {hour: 1}
    assert fleet.hourly("new")[hour] == 2


def test_a_second_reassignment_keeps_an_earlier_owner_of_the_first_slot_of_the_window(mock_db: Any) -> None:
    """As above, but the write that comes a day later is a second reassignment (`new` to `third` at 07:30, when
    08:00 is the first hour of the window): it must keep `old`, who owned the 08:02 heartbeat until 08:05:00 and
    so owns that hour's first slot, among the earlier owners. Counted again after a late heartbeat, the hour is
    still `old`'s 1 and `new`'s 2, not `new`'s 3."""
    fleet = Fleet(mock_db, Settings())
    hour = DAY + 8 * HOUR  # the first hour of a 4-hour field
    fleet.provision("b1", "old", DAY)
    fleet.beat("b1", hour + 2 * MINUTE)
    fleet.provision("b1", "new", hour + 5 * MINUTE)
    fleet.beat("b1", hour + 30 * MINUTE)
    fleet.tally(hour + HOUR + 15 * MINUTE)
    for later in (6, 12, 18):  # ring writes at most MAX_GAP_HOURS apart
        fleet.beat("b1", hour + later * HOUR)

    fleet.provision("b1", "third", hour + 23 * HOUR + 30 * MINUTE)
    fleet.beat("b1", hour + 40 * MINUTE, received=hour + 23 * HOUR + 40 * MINUTE)  # late: its window's first hour
    fleet.tally(hour + 24 * HOUR + 15 * MINUTE)

    assert fleet.hourly("old") == {hour: 1}
    assert fleet.hourly("new")[hour] == 2
    assert hour not in fleet.hourly("third")


def test_a_heartbeat_with_a_fraction_of_a_second_in_a_slot_already_stored_is_a_repeat(mock_db: Any) -> None:
    bottle = Bottle(mock_db)
    first = T0.replace(minute=5, second=0, microsecond=0)
    assert bottle.send(first, now=first + SECOND) == 1

    again = first + 2 * MINUTE + 500 * timedelta(milliseconds=1)  # 06:07:00.500, the same slot (06:05-06:09)
    assert bottle.send(again, now=again + SECOND) == 0
    assert bottle.counted == [first]


def test_a_buffered_heartbeat_after_a_long_silence_keeps_the_heartbeats_of_its_4_hour_field(mock_db: Any) -> None:
    """After a silence longer than MAX_GAP_HOURS the ring is written whole: a heartbeat buffered from 07:00 joins
    06:00's in their 4-hour field (04:00-07:59), which must keep 06:00's."""
    bottle = Bottle(mock_db)
    assert bottle.send(T0, now=T0) == 1  # 06:00:30
    back = T0 + timedelta(hours=MAX_GAP_HOURS + 1)
    buffered = T0 + HOUR

    assert bottle.send(buffered, back, now=back) == 2
    assert bottle.counted == [slot_start(t) for t in (T0, buffered, back)]
    assert bottle.send(T0, now=back + SECOND) == 0  # still known: a repeat


def test_a_write_exactly_max_gap_hours_after_the_last_drops_what_the_widest_window_had_kept(mock_db: Any) -> None:
    """With the widest window (48 hours), a write at 18:00 keeps the field from 47 hours before (16:00-19:59 two
    days earlier), holding a heartbeat buffered from then; the next write, 12 hours later at 06:00 (the longest
    gap the fast way), has a window starting at 04:00 the day before, and must clear that field: the ring holds
    its window's heartbeats only."""
    bottle = Bottle(mock_db, window_hours=48)
    assert bottle.send(T0, now=T0) == 1  # 11-20 06:00:30
    at_18 = T0 + 12 * HOUR
    buffered = at_18 - 47 * HOUR + 30 * MINUTE  # 11-18 19:30:30, in the first field of at_18's window
    assert bottle.send(buffered, at_18, now=at_18) == 2
    assert bottle.counted == [slot_start(t) for t in (buffered, T0, at_18)]

    at_06 = at_18 + MAX_GAP_HOURS * HOUR  # 11-21 06:00:30: the window starts at 11-19 04:00
    assert bottle.send(at_06, now=at_06) == 1

    assert bottle.counted == [slot_start(t) for t in (T0, at_18, at_06)]


def test_a_backfilled_document_is_counted_with_exactly_the_heartbeats_its_ring_holds(mock_db: Any) -> None:
    """The bucket backfill flags every hour of the ring for the tally to count again (tests/reports/test_tally.py has
    the whole story); flagging must add no heartbeat, whichever slots the ring's hours hold (here :12 and :42, none
    in a field's first slot)."""
    fleet = Fleet(mock_db, Settings())
    fleet.provision("b1", "u1", DAY)
    mock_db[schema.BOTTLE_HEARTBEATS].update_one({"_id": "b1"}, {"$unset": {USER_BUCKET: ""}})  # stored before
    for minutes in range(12, 180, 30):
        fleet.beat("b1", DAY + minutes * MINUTE)
    fleet.tally(DAY + 3 * HOUR + 10 * MINUTE)

    backfill_buckets(mock_db, POLICY, now=DAY + 3 * HOUR + 30 * MINUTE)
    fleet.tally(DAY + 4 * HOUR + 10 * MINUTE)

    assert fleet.hourly("u1") == {DAY + h * HOUR: 2 for h in range(3)}
