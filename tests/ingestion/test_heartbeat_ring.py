"""The heartbeat document's ring (shared/devices/heartbeat_document.py): what it counts after any sequence of writes,
however far apart and whatever the alignment of the window on the ring's 4-hour fields; the window setting
changed under it; a write racing another after a long silence; and which hours it gives the heartbeat tally to
count. Over weeks its one-character field names come round again every FIELD_NAMES fields, so every write must
clear the fields a gap left behind (Window.cleared), and a ring write after a long silence that loses every round
to other writes gives up with a 503 the device retries in a second (shared/ingestion/storing.py)."""

from datetime import datetime, timedelta
from typing import Any

import mongomock
import pytest
from bson.int64 import Int64
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.devices.device_time import MAX_FUTURE_SKEW
from shared.devices.heartbeat_document import (
    ALIVE_AT,
    FIELD_NAMES,
    HOURS_PER_FIELD,
    KEY,
    LATE_AT,
    MAX_GAP_HOURS,
    OWNERS,
    RING,
    RING_TIME,
    SLOTS_PER_HOUR,
    Placement,
    Window,
    already_counted,
    field_name,
    field_of,
    heartbeat_slots,
    hour_number,
    hour_start,
    key_digest,
    ring_hours,
    slot_start,
)
from shared.feeds.sweeps import pass_hours
from shared.ingestion import storing
from shared.instants import set_clock
from shared.reports.documents import heartbeat_parts
from shared.store import optimistic, retries, schema
from shared.store.retries import StoreUnavailable
from tests.api import SPEC, put_bottle
from tests.ingestion.rings import POLICY, T0, Bottle
from tools.report_truth import source_totals


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
    assert oldest.hour % 4 == 0  # 24 hours from 12:00 UTC are six whole 4-hour fields
    assert bottle.counted == [slot_start(t) for t in sent if t >= oldest]
    fields = range(field_of(hour_number(oldest)), field_of(hour_number(now)) + 1)
    assert sorted(bottle.document[RING]) == sorted(field_name(f) for f in fields)  # a field per 4 hours, no more
    assert len(fields) == 6


@pytest.mark.parametrize("offset", range(4))
def test_the_window_is_whole_fields_holding_at_least_its_hours_whatever_the_alignment(bottle, offset):
    """The 24 hours up to the server hour, and the next, start anywhere in a 4-hour field: the ring keeps the
    whole fields that hold them (7 of them: from 24 to 27 hours up to the server hour) and nothing older."""
    sent = every_half_hour(T0 + timedelta(hours=offset), 40)
    for moment in sent:
        bottle.send(moment, now=moment)

    now = sent[-1]
    server_hour = hour_number(now)
    oldest = hour_start(field_of(server_hour - 23) * 4)
    assert hour_start(server_hour - 26) <= oldest <= hour_start(server_hour - 23)
    assert oldest == bottle.window.start(server_hour)
    assert bottle.counted == [slot_start(t) for t in sent if t >= oldest]
    assert len(bottle.document[RING]) <= 7


def test_a_bottle_silent_for_longer_than_the_gap_keeps_what_is_still_in_its_window(bottle):
    before = every_half_hour(T0, 6)
    for moment in before:
        bottle.send(moment, now=moment)
    back = before[-1] + timedelta(hours=MAX_GAP_HOURS + 3)  # 15 hours on: the first six hours are still counted

    assert bottle.send(back, now=back) == 1
    then = back + timedelta(minutes=5)  # the next 5-minute slot
    assert bottle.send(before[-1], then, now=then) == 1  # one repeat

    assert bottle.counted == [slot_start(t) for t in [*before, back, then]]


def test_after_a_silence_longer_than_the_window_nothing_old_is_counted_again(bottle):
    for moment in every_half_hour(T0, 3):
        bottle.send(moment, now=moment)
    back = T0 + timedelta(days=5)  # the hours of five days ago have the same field names as some of today's

    sent = [back, *every_half_hour(back + timedelta(minutes=30), 30)]
    for moment in sent:
        bottle.send(moment, now=moment)

    oldest = bottle.window.start(hour_number(sent[-1]))
    assert oldest <= sent[-1].replace(minute=0, second=0) - timedelta(hours=23)
    assert bottle.counted == [slot_start(t) for t in sent if t >= oldest]


def test_a_late_heartbeat_is_counted_in_its_own_hour_once(bottle):
    for moment in every_half_hour(T0, 10):
        bottle.send(moment, now=moment)
    buffered = T0 + timedelta(hours=3, minutes=17)
    now = T0 + timedelta(hours=10)

    assert bottle.send(buffered, now=now) == 1
    assert bottle.send(buffered, now=now + timedelta(minutes=5)) == 0  # the device's retry

    counted = bottle.counted
    assert counted.count(slot_start(buffered)) == 1
    assert len([m for m in counted if m.hour == buffered.hour]) == 3  # :00, :15 (:17's slot) and :30 of that hour


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
    slots = [slot_start(t) for t in sent]
    assert set(counted) <= set(slots)  # every slot counted is one that was sent, in its own hour
    oldest = max(sent[30], sent[-1] - timedelta(hours=then - 1)).replace(minute=0, second=0)
    assert [m for m in counted if m >= oldest] == [m for m in slots if m >= oldest]


def test_a_window_shrunk_from_the_widest_to_one_hour_leaves_no_field_behind(mock_db):
    """Every write clears from the widest window on, so the fields an earlier, wider window kept never come back
    as another field (its name, 62 fields on), at any write after the change."""
    bottle = Bottle(mock_db, window_hours=48)
    sent = every_half_hour(T0, 48)
    for moment in sent:
        bottle.send(moment, now=moment)
    bottle.window = Window(1)
    for moment in every_half_hour(sent[-1] + timedelta(minutes=30), 300):
        bottle.send(moment, now=moment)
        sent.append(moment)
        oldest = bottle.window.start(hour_number(moment))
        assert bottle.counted == [slot_start(t) for t in sent if t >= oldest]


def test_a_ring_write_that_races_another_after_a_long_silence_starts_again(bottle, monkeypatch):
    bottle.send(T0, now=T0)
    back = T0 + timedelta(hours=MAX_GAP_HOURS + 1)
    real = retries.with_retries
    raced: list[bool] = []

    def racing(operation: Any, policy: Any, *args: Any) -> Any:
        result = real(operation, policy, *args)
        if isinstance(result, dict) and "k" in result and not raced:  # the slow path's read: another write lands
            raced.append(True)
            bottle.send(back + timedelta(minutes=5), now=back + timedelta(minutes=5, seconds=1))
        return result

    monkeypatch.setattr(storing, "with_retries", racing)
    assert bottle.send(back, now=back) == 1

    assert raced
    assert bottle.counted == [slot_start(T0), slot_start(back), slot_start(back + timedelta(minutes=5))]


def test_a_tally_pass_counts_the_hours_closed_since_the_last_and_those_a_heartbeat_reached_late(bottle):
    for moment in every_half_hour(T0, 6):
        bottle.send(moment, now=moment + timedelta(seconds=2))
    hours = [T0.replace(minute=0, second=0) + timedelta(hours=h) for h in range(8)]
    last_pass = T0 + timedelta(hours=6)  # counted the hours up to hours[5] and began then

    # The hours that closed since: exactly those, of the ones the ring holds.
    assert pass_hours(bottle.document, (hours[5], hours[7]), late_since=last_pass) == {hours[5]}

    # A late heartbeat since the last pass began: its earlier hour too, found by its flag and the arrival.
    late = T0 + timedelta(hours=2, minutes=44)
    bottle.send(late, now=last_pass + timedelta(minutes=3))
    assert bottle.document[LATE_AT] == last_pass + timedelta(minutes=3)
    assert pass_hours(bottle.document, (hours[5], hours[7]), late_since=last_pass) == {hours[5], hours[2]}
    # ...which the pass after, begun later, no longer counts again.
    assert pass_hours(bottle.document, (hours[7], hours[7]), late_since=last_pass + timedelta(minutes=10)) == set()
    assert pass_hours(bottle.document, (hours[5], hours[7]), late_since=None) == {hours[5]}


def test_the_ring_names_each_4_hour_field_by_one_character_and_the_write_time_maps_it_back(bottle):
    bottle.send(T0, now=T0)
    document = bottle.document
    assert list(document[RING]) == [field_name(field_of(hour_number(T0)))]
    assert len(field_name(field_of(hour_number(T0)))) == 1
    assert document[RING_TIME] == T0
    # 06:00 is the third hour of the field 04:00-07:59: its slot 0 is bit 2 * 13.
    assert document[RING][field_name(field_of(hour_number(T0)))] == 1 << 26


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


@pytest.mark.parametrize(
    ("after_the_margin", "kept"),
    [(timedelta(0), False), (timedelta(milliseconds=1), True)],
    ids=["until at the window's start less the skew: dropped", "a millisecond later: kept"],
)
def test_an_earlier_owner_is_dropped_exactly_when_the_window_s_start_less_the_device_skew_passes_it(
    bottle, after_the_margin, kept
):
    """A heartbeat received before a reassignment may be dated up to MAX_FUTURE_SKEW after it, and the tally then
    recomputes that owner's part of the hour (shared/reports/documents.py: heartbeat_parts): a ring write keeps an
    earlier owner until its `until` is at least MAX_FUTURE_SKEW before the window's first hour, no longer. Both
    sides of the edge, so that any other margin (none, its sign turned, twice as wide) fails one of them."""
    day = T0.replace(hour=0, minute=0, second=0)
    last = day + timedelta(days=1, hours=7, minutes=30)  # the window (24 hours, whole fields) starts at 08:00
    start = bottle.window.start(hour_number(last))
    assert start == day + timedelta(hours=8)
    reassigned = start - MAX_FUTURE_SKEW + after_the_margin  # 07:55:00, or 07:55:00.001
    set_clock(lambda: reassigned)
    try:
        assert put_bottle("bottle-1", {**SPEC, "user_id": "newowner"}).status == 200
    finally:
        set_clock(None)
    assert bottle.document[OWNERS] == [{"user_id": SPEC["user_id"], "until": reassigned}]

    # Ring writes at most MAX_GAP_HOURS apart (a longer gap goes the slow way, which writes no `$pull`).
    for moment in (reassigned + timedelta(minutes=2), day + timedelta(hours=18), day + timedelta(hours=29), last):
        bottle.send(moment, now=moment)

    assert bottle.document[OWNERS] == ([{"user_id": SPEC["user_id"], "until": reassigned}] if kept else [])


def test_a_reassignment_on_an_instance_whose_clock_is_behind_never_moves_the_ring_s_clock_back(bottle, monkeypatch):
    """`r` is the server time of the ring's last write, the latest of every instance's: a reassignment on an
    instance 3 minutes behind the one that wrote the last heartbeat (clock skew between instances) keeps the
    later time. Moved back across the hour, it would refuse the in-place write of a heartbeat MAX_GAP_HOURS after
    the last one (`r` too old: the ring-write guard) and send it the slow way (a read and a second write)."""
    written = T0 + timedelta(hours=2, seconds=30)  # 08:01:00 on the instance ahead
    bottle.send(written - timedelta(seconds=20), now=written)
    reassigned = written - timedelta(minutes=3)  # 07:58:00 on the instance behind
    set_clock(lambda: reassigned)
    try:
        assert put_bottle("bottle-1", {**SPEC, "user_id": "newowner"}).status == 200
    finally:
        set_clock(None)

    assert bottle.document[RING_TIME] == written
    slow_ways: list[object] = []
    read_for_key = storing._read_for_key

    def the_slow_way(*args: Any) -> Any:  # the read after the in-place write matched nothing
        slow_ways.append(args)
        return read_for_key(*args)

    monkeypatch.setattr(storing, "_read_for_key", the_slow_way)
    twelve_hours_on = hour_start(hour_number(written) + MAX_GAP_HOURS) + timedelta(seconds=40)  # 20:00:40
    assert bottle.send(twelve_hours_on, now=twelve_hours_on) == 1
    assert slow_ways == []
    assert bottle.counted == [slot_start(written - timedelta(seconds=20)), slot_start(twelve_hours_on)]


def test_a_reassignment_counts_from_the_start_of_its_5_minute_slot(bottle):
    """Heartbeats are known by their slot: the slot a reassignment falls in counts for the new owner (as the
    minute of a reassignment did when heartbeats were known by their minute), in the reports and in their truth
    counted straight from the source (tools/report_truth.py)."""
    reassigned = T0 + timedelta(hours=2, minutes=2)  # 08:02:30
    for moment in (T0 + timedelta(hours=1, minutes=57), T0 + timedelta(hours=2, seconds=10)):  # 07:57:30, 08:00:40
        bottle.send(moment, now=moment)
    set_clock(lambda: reassigned)
    try:
        assert put_bottle("bottle-1", {**SPEC, "user_id": "newowner"}).status == 200
    finally:
        set_clock(None)
    bottle.send(reassigned + timedelta(minutes=3), now=reassigned + timedelta(minutes=3))  # 08:05:30

    h7, h8 = hour_start(hour_number(T0) + 1), hour_start(hour_number(T0) + 2)
    parts = {key: part.heartbeats for key, part in heartbeat_parts(bottle.document).items()}
    assert parts == {(SPEC["user_id"], h7): 1, (SPEC["user_id"], h8): 0, ("newowner", h8): 2}
    truth = {key: counts[-1] for key, counts in source_totals(bottle.db).items()}
    assert truth == {(SPEC["user_id"], h7): 1, ("newowner", h8): 2}


FULL_FIELD = (1 << HOURS_PER_FIELD * (SLOTS_PER_HOUR + 1)) - 1


@settings(max_examples=50, deadline=None)
@given(
    values=st.lists(st.integers(0, FULL_FIELD) | st.just(FULL_FIELD), min_size=FIELD_NAMES, max_size=FIELD_NAMES),
    written=st.integers(0, 10_000),
)
def test_a_slot_is_counted_exactly_when_the_decoded_ring_has_its_bit(values, written):
    """`already_counted` reads one bit of one field; `ring_hours` decodes them all. They agree on every slot of
    every hour of a full ring, in its reach and just outside it (the field before the oldest has the newest's
    name; the field after the newest, the oldest's)."""
    r = hour_start(hour_number(T0) + written)
    document = {RING: {field_name(f): Int64(v) for f, v in enumerate(values)}, RING_TIME: r}
    decoded = ring_hours(document)
    newest = field_of(hour_number(r) + 1)

    for hour in range((newest - FIELD_NAMES - 1) * HOURS_PER_FIELD, (newest + 2) * HOURS_PER_FIELD):
        for slot in range(SLOTS_PER_HOUR):
            placement = Placement(hour, slot, late=False)
            assert already_counted(document, placement) == bool(decoded.get(hour, 0) >> slot & 1), placement


@settings(max_examples=60, deadline=None)
@given(requests=st.lists(st.lists(st.integers(0, 11), min_size=1, max_size=3), min_size=1, max_size=8))
def test_each_heartbeat_is_new_or_a_repeat_exactly_whichever_write_stores_it(requests):
    """Heartbeats newer than any before are stored by an update that needs no reply; the rest (repeats, two in
    one slot, out of order) by the findAndModify whose reply is the ring as it was. Either way the answer is what
    a set of 5-minute slots says, and the ring holds that set."""
    db: Any = mongomock.MongoClient(tz_aware=True)["ring"]
    key = key_digest("ab" * 32)
    db[schema.BOTTLE_HEARTBEATS].insert_one(
        {"_id": "bottle-1", "bottle_id": "bottle-1", KEY: key, ALIVE_AT: T0, RING_TIME: T0}
    )
    start, now = hour_start(hour_number(T0) + 1), T0 + timedelta(hours=2)
    seen: set[datetime] = set()
    for request in requests:
        times = [start + timedelta(seconds=150 * i) for i in request]  # two a slot: at its start, 150 s in
        slots = {slot_start(t) for t in times}

        stored = storing.store_heartbeats(db, "bottle-1", key, times, now=now, window=Window(24), policy=POLICY)

        assert stored == len(slots - seen), (times, sorted(seen))
        seen |= slots
    assert heartbeat_slots(db[schema.BOTTLE_HEARTBEATS].find_one()) == sorted(seen)


def test_a_bottle_heard_every_7_hours_for_weeks_counts_no_heartbeat_it_never_sent(mock_db: Any) -> None:
    """With the widest window (48 h) and a heartbeat every 7 hours, each write moves the window by a field or two:
    the fields it leaves must be cleared, or once the names wrap (FIELD_NAMES fields, about 10 days) they read as
    phantom heartbeats in hours the bottle was silent."""
    bottle = Bottle(mock_db, window_hours=48)
    sent = [T0 + timedelta(hours=7 * n, minutes=5 * (n % 12)) for n in range(48)]  # 14 days
    assert sent[-1] - sent[0] > timedelta(hours=FIELD_NAMES * HOURS_PER_FIELD)  # the names have come round
    for moment in sent:
        bottle.send(moment, now=moment + timedelta(seconds=5))

    recent = [slot_start(t) for t in sent if t > sent[-1] - timedelta(hours=48)]
    assert set(bottle.counted) <= {slot_start(t) for t in sent}
    assert set(recent) <= set(bottle.counted)


def test_a_ring_write_after_a_long_silence_that_loses_every_round_is_a_503_to_retry_soon(
    mock_db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    bottle = Bottle(mock_db)
    bottle.send(T0, now=T0)
    back = T0 + timedelta(hours=MAX_GAP_HOURS + 1)
    real = retries.with_retries
    rounds: list[bool] = []

    def another_write_after_each_read(operation: Any, policy: Any, *args: Any) -> Any:
        result = real(operation, policy, *args)
        if isinstance(result, dict) and "k" in result:  # the slow path's read: another write moves the ring on
            rounds.append(True)
            written = result[RING_TIME] + timedelta(seconds=1)
            mock_db[schema.BOTTLE_HEARTBEATS].update_one({"_id": "bottle-1"}, {"$set": {RING_TIME: written}})
        return result

    monkeypatch.setattr(storing, "with_retries", another_write_after_each_read)

    with pytest.raises(StoreUnavailable) as gave_up:
        bottle.send(back, now=back)

    assert len(rounds) == optimistic.MAX_ROUNDS
    # A conflict's Retry-After is jittered (shared/store/retries.py): a second, plus up to the spread.
    assert 1 <= gave_up.value.retry_after_s <= 1 + retries.THROTTLED_SPREAD_S
