"""Whose hourly report a bottle's heartbeats count for around a reassignment, and which hours a tally pass
recounts (shared/reports/documents.py). Pure functions on a heartbeat document built here: no store, no clock."""

from datetime import datetime, timedelta
from typing import Any

import pytest

from shared.devices.device_time import MAX_FUTURE_SKEW
from shared.devices.heartbeat_document import (
    LATE_AT,
)
from shared.feeds.sweeps import pass_hours
from shared.reports.documents import heartbeat_parts, merged_entry
from tests.reports.documents import at, heartbeat_doc


def test_a_reassignment_within_a_slot_gives_that_slot_heartbeat_to_the_new_owner() -> None:
    # Reassigned at 10:04:30.25, inside the 10:00-10:05 slot: that slot's heartbeat counts for the new owner.
    moved = at(10, 4) + timedelta(seconds=30, milliseconds=250)
    doc = heartbeat_doc(
        [(at(9, 50), False), (at(10, 3), False)],
        user_id="user-b",
        owners=[{"user_id": "user-a", "until": moved}],
        written=at(12),
    )

    parts = heartbeat_parts(doc)

    assert parts[("user-a", at(9))].heartbeats == 1
    assert parts[("user-b", at(10))].heartbeats == 1
    assert parts[("user-a", at(10))].heartbeats == 0


@pytest.mark.parametrize(
    ("owners", "user_id", "hour", "owner"),
    [
        # Reassigned exactly as the hour after ends: the hour was user-a's alone.
        ([{"user_id": "user-a", "until": at(9)}], "user-b", at(8), "user-a"),
        # Reassigned twice, both after the hour: the middle owner never held it.
        ([{"user_id": "user-a", "until": at(10)}, {"user_id": "user-b", "until": at(12)}], "user-c", at(8), "user-a"),
        # The earlier owner left just as far before the hour as a device clock may run ahead: not its hour.
        ([{"user_id": "user-a", "until": at(10) - MAX_FUTURE_SKEW}], "user-b", at(10), "user-b"),
    ],
)
def test_a_smaller_recount_of_an_hour_one_owner_held_does_not_lower_its_report(
    owners: list[dict[str, Any]], user_id: str, hour: datetime, owner: str
) -> None:
    # The ring holds 2 heartbeats of the hour, the report already counts 3 (read later by another worker).
    doc = heartbeat_doc(
        [(hour + timedelta(minutes=10), False), (hour + timedelta(minutes=20), False)],
        user_id=user_id,
        owners=owners,
        written=at(13),
    )
    stored = {"bottle_id": "bottle-1", "medication": "aspirin", "heartbeats": 3}

    parts = heartbeat_parts(doc)

    assert [u for u, h in parts if h == hour] == [owner]
    entry = merged_entry("bottle-1", stored, None, parts[(owner, hour)])
    assert entry is not None
    assert entry["heartbeats"] == 3


def test_after_a_reassignment_the_tally_recounts_every_earlier_hour() -> None:
    # Reassigned as the last pass began: the earlier hours may have moved to the new owner.
    last_began = at(11)
    doc = heartbeat_doc(
        [(at(5, 10), False), (at(10, 10), False)],
        user_id="user-b",
        owners=[{"user_id": "user-a", "until": last_began}],
        written=at(12),
    )

    assert pass_hours(doc, (at(10), at(11)), late_since=last_began) == {at(5), at(10)}
    # Reassigned before that pass began: it counted them already.
    assert pass_hours(doc, (at(10), at(11)), late_since=last_began + timedelta(seconds=1)) == {at(10)}


def test_a_late_heartbeat_marked_as_the_last_pass_began_is_counted() -> None:
    last_began = at(11)
    doc = heartbeat_doc(
        [(at(5, 10), True), (at(6, 10), False), (at(10, 10), False)], user_id="user-a", owners=[], written=at(12)
    )
    doc[LATE_AT] = last_began

    assert pass_hours(doc, (at(10), at(11)), late_since=last_began) == {at(5), at(10)}
    assert pass_hours(doc, (at(10), at(11)), late_since=last_began + timedelta(seconds=1)) == {at(10)}
