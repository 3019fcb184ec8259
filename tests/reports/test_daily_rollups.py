"""Daily roll-ups (shared/reports/aggregation.py: refresh_daily): each day recomputed from its hours, written or
deleted only where it changed, a write that lost its guard recomputed, and the count of what was written."""

from datetime import datetime, timedelta
from typing import Any

import pytest
from pymongo.database import Database

from shared.reports import aggregation
from shared.reports.aggregation import refresh_daily
from shared.reports.documents import daily_id, hourly_document
from shared.store import schema
from shared.store.retries import RetryPolicy, StoreUnavailable
from tests.reports.documents import AFTER_DAY, DAY, at, stale_entry

POLICY = RetryPolicy(max_retries=0, base_ms=1)
NEXT_DAY = DAY + timedelta(days=1)


pytestmark = pytest.mark.own_clock(AFTER_DAY)


def hour_counted(db: Database[Any], user_id: str, hour: datetime, heartbeats: int, written: datetime) -> None:
    """A stored user-hour: bottle-1's `heartbeats`, written at `written`."""
    document = hourly_document(user_id, hour, [stale_entry("bottle-1", heartbeats)], written)
    db[schema.USER_HOURLY_REPORTS].insert_one(document)


def day_heartbeats(db: Database[Any], user_id: str, day: datetime) -> int | None:
    found = db[schema.USER_DAILY_REPORTS].find_one({"_id": daily_id(user_id, day)})
    return None if found is None else int(found["heartbeats"])


def test_days_deleted_and_written_in_one_roll_up_are_all_counted(mock_db):
    """Two of user-a's days lost their hours and user-b's day gained one: two deletes and a write, three documents."""
    for user_id, hour in (("user-a", at(10)), ("user-a", at(34)), ("user-b", at(10))):
        hour_counted(mock_db, user_id, hour, 1, at(12))
    days = {("user-a", DAY), ("user-a", NEXT_DAY), ("user-b", DAY)}
    assert refresh_daily(mock_db, days, POLICY) == 3
    mock_db[schema.USER_HOURLY_REPORTS].delete_many({"user_id": "user-a"})
    hour_counted(mock_db, "user-b", at(11), 2, at(13))

    assert refresh_daily(mock_db, days, POLICY) == 3

    assert (day_heartbeats(mock_db, "user-a", DAY), day_heartbeats(mock_db, "user-a", NEXT_DAY)) == (None, None)
    assert day_heartbeats(mock_db, "user-b", DAY) == 3


def test_a_day_whose_hour_below_the_newest_went_is_rolled_up_again(mock_db):
    """The day's `updated_at` is its newest hour's: deleting an older hour leaves it as it was, and the day must
    still lose that hour's counts."""
    hour_counted(mock_db, "user-a", at(10), 1, at(12))
    hour_counted(mock_db, "user-a", at(11), 2, at(13))
    refresh_daily(mock_db, {("user-a", DAY)}, POLICY)
    mock_db[schema.USER_HOURLY_REPORTS].delete_one({"user_id": "user-a", "hour": at(10)})

    assert refresh_daily(mock_db, {("user-a", DAY)}, POLICY) == 1

    assert day_heartbeats(mock_db, "user-a", DAY) == 2


def test_a_roll_up_whose_write_lost_its_guard_is_recomputed_and_written(mock_db, monkeypatch):
    """Another writer changed the day after this roll-up read it: the guarded write fails, and the day goes round
    again and ends as its hours say."""
    hour_counted(mock_db, "user-a", at(10), 1, at(12))
    refresh_daily(mock_db, {("user-a", DAY)}, POLICY)
    hour_counted(mock_db, "user-a", at(11), 2, at(13))
    daily = mock_db[schema.USER_DAILY_REPORTS]
    real_load_hours = aggregation._load_hourly_days
    ran: list[bool] = []

    def changed_after_the_read(db: Any, user_days: Any, policy: Any) -> Any:
        found = real_load_hours(db, user_days, policy)
        if not ran:
            ran.append(True)
            daily.update_one({"_id": daily_id("user-a", DAY), "user_id": "user-a"}, {"$set": {"updated_at": at(14)}})
        return found

    monkeypatch.setattr(aggregation, "_load_hourly_days", changed_after_the_read)

    assert refresh_daily(mock_db, {("user-a", DAY)}, POLICY) == 1

    assert day_heartbeats(mock_db, "user-a", DAY) == 3


def test_a_day_that_keeps_changing_under_the_roll_up_is_a_store_unavailable_naming_the_daily_reports(
    mock_db, monkeypatch
):
    hour_counted(mock_db, "user-a", at(10), 1, at(12))
    monkeypatch.setattr(aggregation, "write_guarded", lambda _collection, writes, _policy: [False] * len(writes))

    with pytest.raises(StoreUnavailable, match=r"^daily reports kept changing"):
        refresh_daily(mock_db, {("user-a", DAY)}, POLICY)
