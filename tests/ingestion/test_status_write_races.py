"""A status write with a dose is computed from the bottle as read and guarded by it: when another ingestion write
changes the bottle first, the write matches nothing, and the bottle is read again and the write computed again
(shared/ingestion/storing.py: store_status). The dose must still be recorded; a bottle that keeps changing is a
503 the device retries."""

from typing import Any

import pytest

from shared.ingestion import storing
from shared.store import schema
from shared.store.retries import THROTTLED_SPREAD_S
from tests.api import ago, closed, get_bottle, post_events, provisioned


def test_a_dose_whose_status_write_loses_a_race_is_written_from_the_bottle_read_again(
    mock_db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = provisioned()
    real_applied = storing._applied
    raced: list[bool] = []

    def another_write_first(collection: Any, write: Any, policy: Any) -> bool:
        if not raced:  # another request's status write lands between this one's read and its write
            raced.append(True)
            mock_db[schema.BOTTLES].update_one({"_id": "bottle-1"}, {"$inc": {"dose_seq": 1}})
        return real_applied(collection, write, policy)

    monkeypatch.setattr(storing, "_applied", another_write_first)
    moment = ago(minutes=5)

    assert post_events("bottle-1", key, closed(moment, taken=1, event_id="c")).status == 202

    assert raced
    status = get_bottle("bottle-1").body["status"]
    assert (status["last_action"], status["last_dose_time"] is not None) == ("closed", True)


def test_a_dose_whose_status_write_loses_every_race_is_a_503_to_retry(
    mock_db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = provisioned()
    real_applied = storing._applied

    def another_write_always_first(collection: Any, write: Any, policy: Any) -> bool:
        mock_db[schema.BOTTLES].update_one({"_id": "bottle-1"}, {"$inc": {"dose_seq": 1}})
        return real_applied(collection, write, policy)

    monkeypatch.setattr(storing, "_applied", another_write_always_first)

    response = post_events("bottle-1", key, closed(ago(minutes=5), taken=1, event_id="c"))

    assert response.status == 503
    # A conflict's Retry-After is jittered (shared/store/retries.py): a second, plus up to the spread.
    assert 1 <= int(response.headers["Retry-After"]) <= 1 + THROTTLED_SPREAD_S
    assert response.body == {"error": "the database is busy or unavailable; retry later", "details": []}
