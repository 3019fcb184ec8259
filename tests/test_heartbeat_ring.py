"""The heartbeat document's ring (shared/heartbeat_document.py): what it counts after any sequence of writes,
however far apart; the window setting changed under it; a write racing another after a long silence; and what
which hours it gives the heartbeat tally to count."""

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared.device_keys import hash_key
from shared.heartbeat_document import (
    LATE_AT,
    MAX_GAP_HOURS,
    OWNERS,
    RING,
    RING_TIME,
    Window,
    heartbeat_minutes,
    hour_number,
    key_digest,
    slot_name,
)
from shared.ingestion import storing
from shared.instants import set_clock
from shared.reports.documents import tally_hours
from shared.store import retries, schema
from shared.store.retries import RetryPolicy
from tests.api import SPEC, provisioned, put_bottle

T0 = datetime(2026, 11, 20, 6, 0, 30, tzinfo=UTC)
POLICY = RetryPolicy(max_retries=0, base_ms=1)


class Bottle:
    """One provisioned bottle whose heartbeats are stored straight through ingestion's write, at a chosen
    server time and with a chosen window."""

    def __init__(self, db: Any, window_hours: int = 24) -> None:
        self.db = db
        self.window = Window(window_hours)
        set_clock(lambda: T0 - timedelta(hours=1))  # provisioned an hour before the first heartbeat
        try:
            self.key = key_digest(hash_key(provisioned("bottle-1", SPEC)))
        finally:
            set_clock(None)

    def send(self, *times: datetime, now: datetime) -> int:
        """Store heartbeats of these times, received at `now`; how many were new."""
        return storing.store_heartbeats(
            self.db, "bottle-1", self.key, list(times), now=now, window=self.window, policy=POLICY
        )

    @property
    def document(self) -> dict[str, Any]:
        found: dict[str, Any] = self.db[schema.BOTTLE_HEARTBEATS].find_one({"_id": "bottle-1"})
        return found

    @property
    def counted(self) -> list[datetime]:
        return heartbeat_minutes(self.document)


def every_half_hour(start: datetime, hours: int) -> list[datetime]:
    return [start + timedelta(minutes=30 * i) for i in range(2 * hours)]


@pytest.fixture
def bottle(mock_db: Any) -> Bottle:
    return Bottle(mock_db)


def test_hours_that_leave_the_window_are_dropped_by_the_next_write(bottle):
    sent = every_half_hour(T0, 30)
    for moment in sent:
        bottle.send(moment, now=moment + timedelta(seconds=1))

    now = sent[-1] + timedelta(seconds=1)
    oldest = now.replace(minute=0, second=0) - timedelta(hours=23)
    assert bottle.counted == [t.replace(second=0) for t in sent if t >= oldest]
    assert len(bottle.document[RING]) == 24  # a field per hour of the window, no more


def test_a_bottle_silent_for_longer_than_the_gap_keeps_what_is_still_in_its_window(bottle):
    before = every_half_hour(T0, 6)
    for moment in before:
        bottle.send(moment, now=moment)
    back = before[-1] + timedelta(hours=MAX_GAP_HOURS + 3)  # 15 hours on: the first six hours are still counted

    assert bottle.send(back, now=back) == 1
    assert bottle.send(before[-1], back + timedelta(minutes=1), now=back + timedelta(minutes=1)) == 1  # one repeat

    assert bottle.counted == [t.replace(second=0) for t in [*before, back, back + timedelta(minutes=1)]]


def test_after_a_silence_longer_than_the_window_nothing_old_is_counted_again(bottle):
    for moment in every_half_hour(T0, 3):
        bottle.send(moment, now=moment)
    back = T0 + timedelta(days=5)  # the hours of five days ago have the same field names as some of today's

    sent = [back, *every_half_hour(back + timedelta(minutes=30), 30)]
    for moment in sent:
        bottle.send(moment, now=moment)

    oldest = sent[-1].replace(minute=0, second=0) - timedelta(hours=23)
    assert bottle.counted == [t.replace(second=0) for t in sent if t >= oldest]


def test_a_late_heartbeat_is_counted_in_its_own_hour_once(bottle):
    for moment in every_half_hour(T0, 10):
        bottle.send(moment, now=moment)
    buffered = T0 + timedelta(hours=3, minutes=17)
    now = T0 + timedelta(hours=10)

    assert bottle.send(buffered, now=now) == 1
    assert bottle.send(buffered, now=now + timedelta(minutes=5)) == 0  # the device's retry

    counted = bottle.counted
    assert counted.count(buffered.replace(second=0)) == 1
    assert len([m for m in counted if m.hour == buffered.hour]) == 3  # :00, :17 and :30 of that hour


@pytest.mark.parametrize(("first", "then"), [(24, 6), (6, 24)])
def test_changing_the_window_setting_never_counts_a_heartbeat_in_another_hour(mock_db, first, then):
    bottle = Bottle(mock_db, window_hours=first)
    sent = every_half_hour(T0, 30)
    for moment in sent[:30]:
        bottle.send(moment, now=moment)
    bottle.window = Window(then)
    for moment in sent[30:]:
        bottle.send(moment, now=moment)

    counted = bottle.counted
    minutes = [t.replace(second=0) for t in sent]
    assert set(counted) <= set(minutes)  # every minute counted is one that was sent, in its own hour
    oldest = max(sent[30], sent[-1] - timedelta(hours=then - 1)).replace(minute=0, second=0)
    assert [m for m in counted if m >= oldest] == [m for m in minutes if m >= oldest]


def test_a_ring_write_that_races_another_after_a_long_silence_starts_again(bottle, monkeypatch):
    bottle.send(T0, now=T0)
    back = T0 + timedelta(hours=MAX_GAP_HOURS + 1)
    real = retries.with_retries
    raced: list[bool] = []

    def racing(operation: Any, policy: Any, *args: Any) -> Any:
        result = real(operation, policy, *args)
        if isinstance(result, dict) and "k" in result and not raced:  # the slow path's read: another write lands
            raced.append(True)
            bottle.send(back + timedelta(minutes=1), now=back + timedelta(seconds=1))
        return result

    monkeypatch.setattr(storing, "with_retries", racing)
    assert bottle.send(back, now=back) == 1

    assert raced
    assert bottle.counted == [
        T0.replace(second=0),
        back.replace(second=0),
        (back + timedelta(minutes=1)).replace(second=0),
    ]


def test_a_tally_pass_counts_the_hours_closed_since_the_last_and_those_a_heartbeat_reached_late(bottle):
    for moment in every_half_hour(T0, 6):
        bottle.send(moment, now=moment + timedelta(seconds=2))
    hours = [T0.replace(minute=0, second=0) + timedelta(hours=h) for h in range(8)]
    last_pass = T0 + timedelta(hours=6)  # counted the hours up to hours[5] and began then

    # The hours that closed since: exactly those, of the ones the ring holds.
    assert tally_hours(bottle.document, (hours[5], hours[7]), late_since=last_pass) == {hours[5]}

    # A late heartbeat since the last pass began: its earlier hour too, found by its flag and the arrival.
    late = T0 + timedelta(hours=2, minutes=44)
    bottle.send(late, now=last_pass + timedelta(minutes=3))
    assert bottle.document[LATE_AT] == last_pass + timedelta(minutes=3)
    assert tally_hours(bottle.document, (hours[5], hours[7]), late_since=last_pass) == {hours[5], hours[2]}
    # ...which the pass after, begun later, no longer counts again.
    assert tally_hours(bottle.document, (hours[7], hours[7]), late_since=last_pass + timedelta(minutes=10)) == set()
    assert tally_hours(bottle.document, (hours[5], hours[7]), late_since=None) == {hours[5]}


def test_the_ring_names_each_hour_by_one_character_and_the_write_time_maps_it_back(bottle):
    bottle.send(T0, now=T0)
    document = bottle.document
    assert list(document[RING]) == [slot_name(hour_number(T0))]
    assert len(slot_name(hour_number(T0))) == 1
    assert document[RING_TIME] == T0


def test_an_earlier_owner_is_kept_while_its_heartbeats_are_in_the_window_and_dropped_after(bottle):
    for moment in every_half_hour(T0, 2):
        bottle.send(moment, now=moment)
    reassigned = T0 + timedelta(hours=2)
    set_clock(lambda: reassigned)
    try:
        assert put_bottle("bottle-1", {**SPEC, "user_id": "newowner"}).status == 200
    finally:
        set_clock(None)
    assert bottle.document[OWNERS] == [{"user_id": SPEC["user_id"], "until": reassigned}]

    for moment in every_half_hour(reassigned + timedelta(minutes=1), 30):
        bottle.send(moment, now=moment)

    assert bottle.document.get(OWNERS) == []  # its heartbeats all left the window: nothing kept of it
    assert bottle.document["user_id"] == "newowner"
