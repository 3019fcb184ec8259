"""A device's retry is told from an event_id reused for another event by the stored event of that bottle and
that id alone (shared/ingestion/storing.py): whatever the id holds, and whatever other bottles sent under it, a
true retry repairs the status a failed request left behind. tests/ingestion/test_repeats_and_races.py holds the plain
cases."""

from typing import Any

import pytest

from shared.store import schema
from tests.api import ago, closed, get_bottle, opened, post_events, provisioned


def lose_the_status(db: Any, bottle_id: str) -> None:
    """As if the request had died after storing its action and before updating the bottle's status."""
    db[schema.BOTTLES].update_one(
        {"_id": bottle_id}, {"$unset": {"last_action": "", "last_action_time": "", "last_dose_time": ""}}
    )


@pytest.mark.parametrize("event_id", ["a|b", "a|b|c", "|"])
def test_a_retry_of_an_event_whose_id_holds_a_bar_repairs_the_status(mock_db: Any, event_id: str) -> None:
    key = provisioned()
    event = closed(ago(minutes=5), event_id=event_id)
    post_events("bottle-1", key, event)
    lose_the_status(mock_db, "bottle-1")

    assert post_events("bottle-1", key, event).body == {"stored": 0, "duplicates": 1, "expired": 0}
    status = get_bottle("bottle-1").body["status"]
    assert status["last_action"] == "closed"
    assert status["last_dose_time"] is not None


def test_another_bottles_event_under_the_same_id_does_not_make_a_retry_a_reuse(mock_db: Any) -> None:
    keys = {bottle_id: provisioned(bottle_id) for bottle_id in ("bottle-1", "bottle-2")}
    event = closed(ago(minutes=5), event_id="e-1")
    post_events("bottle-1", keys["bottle-1"], event)
    post_events("bottle-2", keys["bottle-2"], opened(ago(minutes=3), event_id="e-1"))  # its own e-1
    lose_the_status(mock_db, "bottle-1")

    assert post_events("bottle-1", keys["bottle-1"], event).body == {"stored": 0, "duplicates": 1, "expired": 0}
    assert get_bottle("bottle-1").body["status"]["last_action"] == "closed"


def test_a_retried_request_with_a_dose_changes_nothing_stored(mock_db: Any) -> None:
    """The dose was counted by the first request: its retry finds it in the bottle's doses and writes nothing
    (the next dose due is not moved twice, the check is not asked to look again)."""
    key = provisioned()
    request = {"events": [opened(ago(minutes=6), event_id="o-1"), closed(ago(minutes=5), taken=1, event_id="c-1")]}
    assert post_events("bottle-1", key, request).status == 202
    before = mock_db[schema.BOTTLES].find_one({"_id": "bottle-1"})

    assert post_events("bottle-1", key, request).body == {"stored": 0, "duplicates": 2, "expired": 0}

    assert mock_db[schema.BOTTLES].find_one({"_id": "bottle-1"}) == before


def test_a_retried_dose_is_known_after_more_doses_than_the_history_holds(mock_db: Any) -> None:
    """The bottle keeps its newest doses: a retry of the latest is known however many came before."""
    key = provisioned()
    requests = [{"events": [closed(ago(minutes=200 - 5 * n), taken=1, event_id=f"c-{n}")]} for n in range(36)]
    for request in requests:
        assert post_events("bottle-1", key, request).status == 202
    before = mock_db[schema.BOTTLES].find_one({"_id": "bottle-1"})

    assert post_events("bottle-1", key, requests[-1]).body == {"stored": 0, "duplicates": 1, "expired": 0}

    assert mock_db[schema.BOTTLES].find_one({"_id": "bottle-1"}) == before


def test_a_dose_is_written_to_its_own_bottle_when_another_has_the_same_schedule_and_times(mock_db: Any) -> None:
    keys = {bottle_id: provisioned(bottle_id) for bottle_id in ("bottle-1", "bottle-2")}
    twin = mock_db[schema.BOTTLES].find_one({"_id": "bottle-1"})
    fields = ("schedule_from", "dose_due", "dose_late_at")
    mock_db[schema.BOTTLES].update_one({"_id": "bottle-2"}, {"$set": {name: twin.get(name) for name in fields}})

    assert post_events("bottle-2", keys["bottle-2"], closed(ago(minutes=5), taken=1, event_id="c")).status == 202

    assert get_bottle("bottle-1").body["status"]["last_dose_time"] is None
    assert get_bottle("bottle-2").body["status"]["last_dose_time"] is not None
