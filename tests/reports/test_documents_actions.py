"""What an hour's opened/closed events say in a report (shared/reports/documents.py): the last readings are
those of the latest event, whatever order the store returns the events in; and report ids read back."""

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared.reports.documents import action_parts, hourly_id, parse_hourly_id

HOUR = datetime(2027, 3, 10, 8, tzinfo=UTC)


def action(event_id: str, minute: int, kind: str, pills: int) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "user_id": "user-1",
        "event_id": event_id,
        "action": kind,
        "time": HOUR + timedelta(minutes=minute),
        "medication": "aspirin",
        "number_of_pills": pills,
        "mass_of_contents": pills * 0.5,
    }
    if kind == "closed":
        doc["pills_taken"] = 1
    return doc


@pytest.mark.parametrize("reverse", [False, True])
def test_the_last_readings_are_the_latest_events_whatever_the_read_order(reverse: bool) -> None:
    # The later event has the smaller id: time decides, not the id.
    events = [action("e-9", 10, "opened", 30), action("e-1", 20, "opened", 20)]

    part = action_parts(reversed(events) if reverse else events)["user-1"]

    assert (part.last_number_of_pills, part.last_mass_of_contents) == (20, 10.0)


@pytest.mark.parametrize("reverse", [False, True])
def test_events_of_one_instant_give_the_same_last_readings_whatever_the_read_order(reverse: bool) -> None:
    # Two opens of one instant (a retry under a new id): the greater event id settles which is last.
    events = [action("e-1", 10, "opened", 30), action("e-2", 10, "opened", 20)]

    part = action_parts(reversed(events) if reverse else events)["user-1"]

    assert part.last_number_of_pills == 20


def test_an_hourly_report_id_reads_back_as_its_user_and_hour() -> None:
    assert parse_hourly_id(hourly_id("user-1", HOUR + timedelta(minutes=59))) == ("user-1", HOUR)
    assert parse_hourly_id(hourly_id("user-1", HOUR))[1].tzinfo is UTC
