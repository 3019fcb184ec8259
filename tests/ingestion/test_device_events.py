"""POST /api/bottles/{bottle_id}/events: what devices see and what gets stored."""

from datetime import datetime, timedelta
from functools import partial
from typing import Any

import bson
import pytest

from shared.devices.heartbeat_document import LATE_AT, LATE_FLAG, Window, hour_number, ring_hours, slot_start
from shared.instants import hour_of, set_clock, utc_now
from shared.store import schema
from shared.store.partitioning import bucket_of
from tests.api import SPEC, ago, closed, heartbeat, iso, opened, post_events, provisioned
from tests.heartbeats import counted, counted_everywhere, heartbeat_document, slot


def identity(moment: datetime) -> datetime:
    return moment


def stored_counts(db: Any) -> tuple[int, int]:
    """(actions stored, heartbeats counted) over every bottle."""
    return db[schema.BOTTLE_ACTIONS].count_documents({}), counted_everywhere(db)


def test_heartbeat_is_stored_in_the_bottles_heartbeat_document(db):
    key = provisioned()
    at = ago(minutes=3)

    response = post_events("bottle-1", key, heartbeat(at))

    assert (response.status, response.body) == (202, {"stored": 1, "duplicates": 0, "expired": 0})
    document = heartbeat_document(db)
    assert document["bottle_id"] == "bottle-1"
    assert document["user_id"] == SPEC["user_id"]
    assert document["medication"] == SPEC["medication"]
    assert document["last"] == at
    # Silence is counted from the later of the last heartbeat and provisioning.
    provisioned_at = db[schema.BOTTLES].find_one({"_id": "bottle-1"})["provisioned_at"]
    assert document["alive_at"] == max(at, provisioned_at)
    assert counted(db) == [slot(at)]


def test_heartbeats_are_counted_by_slot_and_last_is_the_newest(db):
    key = provisioned()
    times = [ago(minutes=10), ago(minutes=40), ago(minutes=25)]

    response = post_events("bottle-1", key, {"events": [heartbeat(t) for t in times]})

    assert response.body == {"stored": 3, "duplicates": 0, "expired": 0}
    assert heartbeat_document(db)["last"] == max(times)
    assert counted(db) == sorted(slot(t) for t in times)


def test_a_repeated_heartbeat_is_a_duplicate_and_counted_once(db):
    key = provisioned()
    at = ago(minutes=7)
    post_events("bottle-1", key, heartbeat(at))

    again = post_events("bottle-1", key, {"events": [heartbeat(at), heartbeat(ago(minutes=1))]})

    assert again.body == {"stored": 1, "duplicates": 1, "expired": 0}
    assert counted(db) == sorted([slot(at), slot(ago(minutes=1))])


def test_two_heartbeats_in_one_5_minute_slot_are_one_heartbeat(db):
    """A heartbeat is its bottle and its 5-minute slot: a second one in the same slot is a repeat, in the same
    request or a later one; one in the next slot is another heartbeat."""
    key = provisioned()
    start = slot_start(ago(minutes=20))
    first, second = start + timedelta(seconds=10), start + timedelta(minutes=4, seconds=50)

    response = post_events("bottle-1", key, {"events": [heartbeat(first), heartbeat(second)]})
    later = post_events("bottle-1", key, heartbeat(start + timedelta(minutes=2)))
    next_slot = post_events("bottle-1", key, heartbeat(start + timedelta(minutes=5)))

    assert response.body == {"stored": 1, "duplicates": 1, "expired": 0}
    assert later.body == {"stored": 0, "duplicates": 1, "expired": 0}
    assert next_slot.body == {"stored": 1, "duplicates": 0, "expired": 0}
    assert counted(db) == [start, start + timedelta(minutes=5)]


def test_heartbeats_older_than_the_window_are_accepted_but_not_counted(db, monkeypatch):
    from shared.settings import get_settings

    monkeypatch.setenv("HEARTBEAT_WINDOW_HOURS", "3")
    get_settings.cache_clear()
    # The server clock stopped inside an hour: read twice, once by the server and once here, a running clock could
    # give two hours, and two windows.
    now = hour_of(ago(hours=1)) + timedelta(minutes=40)
    set_clock(lambda: now)
    try:
        key = provisioned()
        times = [now - timedelta(minutes=30 * i) for i in range(10)]  # five hours
        response = post_events("bottle-1", key, {"events": [heartbeat(t) for t in times]})
    finally:
        set_clock(None)

    # The whole 4-hour ring fields that hold the three hours, the current one included.
    oldest_counted = Window(3).start(hour_number(now))
    assert oldest_counted <= hour_of(now) - timedelta(hours=2)
    kept = [t for t in times if t >= oldest_counted]
    assert response.body == {"stored": len(kept), "duplicates": 0, "expired": len(times) - len(kept)}
    assert counted(db) == sorted(slot(t) for t in kept)


def test_a_late_heartbeat_never_moves_last_backwards(db):
    key = provisioned()
    newest = ago(minutes=5)
    post_events("bottle-1", key, heartbeat(newest))
    post_events("bottle-1", key, heartbeat(ago(hours=6)))
    assert heartbeat_document(db)["last"] == newest


def test_a_late_heartbeat_marks_its_hour_and_its_arrival_for_the_report_consumer(db):
    key = provisioned()
    prompt, buffered = ago(minutes=2), ago(hours=6, minutes=10)
    before = utc_now()

    post_events("bottle-1", key, {"events": [heartbeat(prompt), heartbeat(buffered)]})

    document = heartbeat_document(db)
    late = [hour for hour, value in ring_hours(document).items() if value & LATE_FLAG]
    assert late == [hour_number(buffered)]  # the prompt heartbeat's hour is not marked
    assert before <= document[LATE_AT] <= utc_now()
    assert counted(db) == sorted([slot(prompt), slot(buffered)])


def test_the_heartbeat_document_stays_small_however_long_the_bottle_reports(db):
    """Steady state: a heartbeat every 30 minutes for three days, some of them late, some repeated. The
    document keeps its window (24 hours, as the seven 4-hour ring fields that hold them) and no more, within 336
    bytes of BSON with these 17-character ids (320 when measured: 7 ring fields of 11 bytes, 85 for the ring)."""
    bottle, start = "bottle-0000000001", ago(hours=72)
    set_clock(lambda: start)
    key = provisioned(bottle, {**SPEC, "user_id": "user-0000000001", "medication": "Cordrazine XR 20"})
    sent, sizes, received = [], [], start
    try:
        for i in range(144):
            at = start + timedelta(minutes=30 * i, seconds=13)
            received = at + (timedelta(minutes=40) if i % 7 == 0 else timedelta(seconds=2))
            set_clock(partial(identity, received))
            assert post_events(bottle, key, heartbeat(at)).status == 202
            if i % 5 == 0:
                assert post_events(bottle, key, heartbeat(at)).body == {"stored": 0, "duplicates": 1, "expired": 0}
            sent.append(at)
            sizes.append(len(bson.encode(heartbeat_document(db, bottle))))
    finally:
        set_clock(None)

    assert max(sizes) <= 336
    assert max(sizes[-48:]) <= max(sizes[48:96])  # a day later no larger: bounded, not growing
    window_start = Window(24).start(hour_number(received))  # 24 hours, the current one included, as whole fields
    assert window_start <= hour_of(received) - timedelta(hours=23)
    assert counted(db, bottle) == [slot(t) for t in sent if t >= window_start]


def test_actions_are_stored_with_owner_and_medication_from_the_registry(db):
    key = provisioned()
    t_open, t_close = ago(minutes=10), ago(minutes=9)

    response = post_events(
        "bottle-1",
        key,
        {"events": [opened(t_open, pills=30, mass=15.0), closed(t_close, taken=2, pills=28, mass=14.0)]},
    )

    assert response.body == {"stored": 2, "duplicates": 0, "expired": 0}
    docs = {d["action"]: d for d in db[schema.BOTTLE_ACTIONS].find()}
    assert (
        docs["opened"] | {"received_at": None}
        == {
            "_id": f"bottle-1|opened@{iso(t_open)[:-1]}.000Z",
            "bottle_id": "bottle-1",
            "bucket": bucket_of("bottle-1"),  # the report feed's partitions select by it
            "user_id": "willcross1024",
            "medication": "Cordrazine",
            "mass_of_contents": 15.0,
            "number_of_pills": 30,
            "time": t_open,
            "action": "opened",
            "event_id": f"opened@{iso(t_open)[:-1]}.000Z",
            "received_at": None,
        }
    )
    assert docs["closed"]["pills_taken"] == 2
    assert "pills_taken" not in docs["opened"]
    assert docs["closed"]["received_at"] >= t_close


def test_device_cannot_choose_owner_or_medication(db):
    key = provisioned()
    response = post_events("bottle-1", key, opened(ago(minutes=1), user_id="mallory"))
    assert response.status == 400
    assert response.body["details"] == [{"index": 0, "field": "user_id", "message": "unknown field"}]


def test_retried_request_is_stored_once(db):
    key = provisioned()
    batch = {"events": [heartbeat(ago(minutes=30)), opened(ago(minutes=20)), closed(ago(minutes=19))]}

    first = post_events("bottle-1", key, batch)
    again = post_events("bottle-1", key, batch)

    assert first.body == {"stored": 3, "duplicates": 0, "expired": 0}
    assert again.body == {"stored": 0, "duplicates": 3, "expired": 0}
    assert stored_counts(db) == (2, 1)


def test_explicit_event_ids_deduplicate_across_requests(db):
    key = provisioned()
    at = ago(minutes=5)
    post_events("bottle-1", key, opened(at, event_id="evt-1"))

    # The same id, even with a different time, is the same event; a new id is a new event.
    response = post_events(
        "bottle-1", key, {"events": [opened(at, event_id="evt-1"), opened(ago(minutes=4), event_id="evt-2")]}
    )

    assert response.body == {"stored": 1, "duplicates": 1, "expired": 0}
    assert sorted(d["event_id"] for d in db[schema.BOTTLE_ACTIONS].find()) == ["evt-1", "evt-2"]


def test_repeats_within_one_request_count_as_duplicates(db):
    key = provisioned()
    hb, act = heartbeat(ago(minutes=2)), opened(ago(minutes=1))
    response = post_events("bottle-1", key, {"events": [hb, act, hb, act]})
    assert response.body == {"stored": 2, "duplicates": 2, "expired": 0}
    assert stored_counts(db) == (1, 1)


def test_offset_times_are_stored_in_utc(db):
    key = provisioned()
    local = ago(minutes=7).astimezone()
    text = local.isoformat()
    from datetime import timedelta, timezone

    plus_five = local.astimezone(timezone(timedelta(hours=5))).isoformat()
    response = post_events(
        "bottle-1", key, {"events": [{"type": "heartbeat", "time": text}, {"type": "heartbeat", "time": plus_five}]}
    )
    # The same instant in two offsets is one heartbeat.
    assert response.body == {"stored": 1, "duplicates": 1, "expired": 0}


def test_batch_of_500_is_accepted(db):
    key = provisioned()
    events = [heartbeat(ago(minutes=5 * i)) for i in range(500)]  # each in its own 5-minute slot, over 41 hours
    response = post_events("bottle-1", key, {"events": events})
    assert response.status == 202
    # Those older than the heartbeat window (at most 27 hours back) are accepted but not kept.
    assert response.body["duplicates"] == 0
    assert response.body["stored"] + response.body["expired"] == 500
    assert 500 - 27 * 12 - 1 <= response.body["expired"] <= 500 - 23 * 12  # 12 a hour kept, 23 to 27 hours back


@pytest.mark.parametrize(
    "make_body",
    [
        lambda: {"events": [heartbeat(ago(minutes=i)) for i in range(501)]},
        lambda: {"events": [opened(ago(seconds=1), event_id="x" * 64, pad="y" * 1000) for _ in range(300)]},
    ],
    ids=["501 events", "body over 256 KiB"],
)
def test_oversize_requests_are_413_and_store_nothing(db, make_body):
    key = provisioned()
    response = post_events("bottle-1", key, make_body())
    assert response.status == 413
    assert "error" in response.body
    assert stored_counts(db) == (0, 0)


def test_events_older_than_the_configured_age_are_rejected(db, monkeypatch):
    from shared.settings import get_settings

    monkeypatch.setenv("MAX_EVENT_AGE_DAYS", "2")
    get_settings.cache_clear()
    key = provisioned()
    assert post_events("bottle-1", key, heartbeat(ago(days=1, hours=23))).status == 202
    response = post_events("bottle-1", key, heartbeat(ago(days=2, minutes=1)))
    assert response.status == 400
    assert response.body["details"][0]["field"] == "time"
    assert "older than the 2 days" in response.body["details"][0]["message"]
