"""What a bottle's entry in an hourly report and a daily report say (shared/reports/documents.py): the medication
an entry names, the hours a range recount covers, and a day of several bottles. Pure functions, no store."""

from datetime import UTC, datetime, timedelta
from typing import Any

from shared.devices.heartbeat_document import (
    RING,
    RING_TIME,
    SLOT_MINUTES,
    Placement,
    field_name,
    hour_number,
    ring_bits,
)
from shared.reports.documents import ActionPart, daily_document, heartbeat_parts, hourly_document, merged_entry

HOUR = datetime(2027, 3, 10, 8, tzinfo=UTC)


def heartbeat_doc(*beats: datetime, medication: str = "aspirin") -> dict[str, Any]:
    """Bottle-1's heartbeat document, owned by user-1 throughout, holding heartbeats at `beats`."""
    placements = [Placement(hour_number(m), m.minute // SLOT_MINUTES, False) for m in beats]
    return {
        "_id": "bottle-1",
        "user_id": "user-1",
        "medication": medication,
        RING: {field_name(f): bits for f, bits in ring_bits(placements).items()},
        RING_TIME: HOUR + timedelta(hours=6),
    }


def opened_only(medication: str) -> ActionPart:
    return ActionPart(medication, 1, 0, 0, 0, last_number_of_pills=30, last_mass_of_contents=15.0)


def test_an_hour_of_heartbeats_only_names_the_bottles_medication() -> None:
    doc = heartbeat_doc(HOUR + timedelta(minutes=12), medication="ibuprofen")

    entry = merged_entry("bottle-1", None, None, heartbeat_parts(doc)[("user-1", HOUR)])

    assert entry is not None
    assert (entry["medication"], entry["heartbeats"]) == ("ibuprofen", 1)


def test_an_hour_with_an_event_names_the_events_medication_not_the_bottles_current_one() -> None:
    # The bottle was only opened that hour, and its medication has changed since.
    doc = heartbeat_doc(HOUR + timedelta(minutes=12), medication="ibuprofen")

    entry = merged_entry("bottle-1", None, opened_only("aspirin"), heartbeat_parts(doc)[("user-1", HOUR)])

    assert entry is not None
    assert (entry["medication"], entry["opened"], entry["heartbeats"]) == ("aspirin", 1, 1)


def test_a_recount_of_a_range_covers_its_first_hour_and_not_the_next() -> None:
    doc = heartbeat_doc(*(HOUR + timedelta(hours=h, minutes=7) for h in (-1, 0, 1, 2)))

    parts = heartbeat_parts(doc, (HOUR, HOUR + timedelta(hours=2)))

    assert sorted(hour for _, hour in parts) == [HOUR, HOUR + timedelta(hours=1)]


def test_a_day_of_two_bottles_reports_each_bottle() -> None:
    first = merged_entry("bottle-1", None, opened_only("aspirin"), None)
    second = merged_entry("bottle-2", None, opened_only("ibuprofen"), None)
    assert first is not None
    assert second is not None
    later = HOUR + timedelta(hours=1)
    hours = [hourly_document("user-1", HOUR, [first], HOUR), hourly_document("user-1", later, [first, second], later)]

    day = daily_document("user-1", HOUR, hours)

    assert day is not None
    assert day["opened"] == 3
    assert [(b["bottle_id"], b["medication"], b["opened"]) for b in day["bottles"]] == [
        ("bottle-1", "aspirin", 2),
        ("bottle-2", "ibuprofen", 1),
    ]


def test_a_recount_of_an_hour_of_heartbeats_only_names_the_medication_the_bottle_has_then() -> None:
    # Counted under "aspirin"; the bottle's medication changed, and the hour is counted again (same count).
    stored = merged_entry("bottle-1", None, None, heartbeat_parts(heartbeat_doc(HOUR))[("user-1", HOUR)])
    recount = heartbeat_parts(heartbeat_doc(HOUR, medication="ibuprofen"))[("user-1", HOUR)]

    entry = merged_entry("bottle-1", stored, None, recount)

    assert entry is not None
    assert (entry["medication"], entry["heartbeats"]) == ("ibuprofen", 1)
