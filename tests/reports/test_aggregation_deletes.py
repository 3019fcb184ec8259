"""A report that comes to count nothing is deleted, guarded like a write (shared/reports/aggregation.py:
_delete_guarded): a user-hour whose bottle's heartbeat moved to the bottle's new owner goes, and its day already
rolled up is rolled up again at once; one another writer changed after it was read stays, merged again."""

from datetime import timedelta
from typing import Any

import pytest
from pymongo.database import Database

from shared.devices.heartbeat_document import OWNERS
from shared.feeds.sources import Change
from shared.reports import aggregation
from shared.reports.aggregation import refresh_daily, refresh_hourly
from shared.reports.documents import daily_id, hourly_id
from shared.store import schema
from shared.store.retries import RetryPolicy
from tests.reports.documents import AFTER_DAY, DAY, at, heartbeat_doc, stale_entry

POLICY = RetryPolicy(max_retries=0, base_ms=1)
CHANGES = [Change(schema.BOTTLE_HEARTBEATS, "bottle-1", None)]


def counted_for_user_a(db: Database[Any]) -> None:
    """bottle-1, user-a's, had a heartbeat at 10:03: counted in user-a's 10:00 hour, and the day rolled up."""
    doc = heartbeat_doc([(at(10, 3), False)], user_id="user-a", owners=[], written=at(12))
    db[schema.BOTTLE_HEARTBEATS].insert_one(doc | {"bottle_id": "bottle-1"})
    refresh_hourly(db, CHANGES, stamp=at(12, 1), policy=POLICY)
    refresh_daily(db, {("user-a", DAY)}, POLICY)
    day = db[schema.USER_DAILY_REPORTS].find_one({"_id": daily_id("user-a", DAY)})
    assert day is not None
    assert day["heartbeats"] == 1


def reassigned_to_user_b(db: Database[Any]) -> None:
    """bottle-1 went to user-b at 10:02, within the heartbeat's 5-minute slot: the heartbeat is user-b's now."""
    moved = {"user_id": "user-b", OWNERS: [{"user_id": "user-a", "until": at(10, 2)}]}
    db[schema.BOTTLE_HEARTBEATS].update_one({"_id": "bottle-1"}, {"$set": moved})


pytestmark = pytest.mark.own_clock(AFTER_DAY)


def test_user_hours_left_counting_nothing_are_deleted_and_their_rolled_up_days_with_them(mock_db):
    """bottle-1 (user-a's) and bottle-3 (user-c's) both went to user-b within their 10:00-10:05 heartbeat's slot:
    user-a's and user-c's hours are deleted and their days rolled up again at once; user-b's hour and day written."""
    counted_for_user_a(mock_db)
    doc = heartbeat_doc([(at(10, 3), False)], user_id="user-c", owners=[], written=at(12))
    mock_db[schema.BOTTLE_HEARTBEATS].insert_one(doc | {"_id": "bottle-3", "bottle_id": "bottle-3"})
    changes = [*CHANGES, Change(schema.BOTTLE_HEARTBEATS, "bottle-3", None)]
    refresh_hourly(mock_db, changes, stamp=at(12, 2), policy=POLICY)
    refresh_daily(mock_db, {("user-c", DAY)}, POLICY)
    reassigned_to_user_b(mock_db)
    moved = {"user_id": "user-b", OWNERS: [{"user_id": "user-c", "until": at(10, 2)}]}
    mock_db[schema.BOTTLE_HEARTBEATS].update_one({"_id": "bottle-3"}, {"$set": moved})

    result = refresh_hourly(mock_db, changes, stamp=at(12, 10), policy=POLICY, rolled_up_before=DAY + timedelta(days=2))

    hourly, daily = mock_db[schema.USER_HOURLY_REPORTS], mock_db[schema.USER_DAILY_REPORTS]
    for user_id in ("user-a", "user-c"):
        assert hourly.find_one({"_id": hourly_id(user_id, at(10))}) is None
        assert daily.find_one({"_id": daily_id(user_id, DAY)}) is None
    assert hourly.find_one({"_id": hourly_id("user-b", at(10))})["heartbeats"] == 2
    assert daily.find_one({"_id": daily_id("user-b", DAY)})["heartbeats"] == 2
    assert result.written == 3  # user-a's and user-c's hours deleted, user-b's written


def test_a_user_hour_another_writer_changed_after_it_was_read_is_not_deleted(mock_db, monkeypatch):
    """The merge read user-a's hour (bottle-1's entry only) and found it empty now; before it deleted it, another
    writer added bottle-2's entry: the guarded delete fails, and the retry keeps the hour with bottle-2 alone."""
    counted_for_user_a(mock_db)
    reassigned_to_user_b(mock_db)
    hourly = mock_db[schema.USER_HOURLY_REPORTS]
    real_load = aggregation._load_by_id
    ran: list[bool] = []

    def another_writer_after_the_read(collection: Any, ids: Any, policy: Any) -> Any:
        found = real_load(collection, ids, policy)
        if not ran:
            ran.append(True)
            stored = hourly.find_one({"_id": hourly_id("user-a", at(10))})
            added = {"bottles": [*stored["bottles"], stale_entry("bottle-2", 2)], "updated_at": at(12, 5)}
            hourly.update_one({"_id": stored["_id"], "user_id": "user-a"}, {"$set": added})
        return found

    monkeypatch.setattr(aggregation, "_load_by_id", another_writer_after_the_read)
    refresh_hourly(mock_db, CHANGES, stamp=at(12, 10), policy=POLICY)

    stored = hourly.find_one({"_id": hourly_id("user-a", at(10))})
    assert [(e["bottle_id"], e["heartbeats"]) for e in stored["bottles"]] == [("bottle-2", 2)]


def test_a_day_whose_hours_came_back_after_it_was_read_empty_is_not_deleted(mock_db, monkeypatch):
    """A daily roll-up read the day (one hour's heartbeat) and then found no hours left (the hour moved away); before
    it deleted the day, another writer counted an hour again and rolled the day up: the day stays, as recounted."""
    counted_for_user_a(mock_db)
    hourly, daily = mock_db[schema.USER_HOURLY_REPORTS], mock_db[schema.USER_DAILY_REPORTS]
    hour_doc = hourly.find_one({"_id": hourly_id("user-a", at(10))})
    hourly.delete_one({"_id": hour_doc["_id"], "user_id": "user-a"})
    real_load_hours = aggregation._load_hourly_days
    ran: list[bool] = []

    def counted_again_after_the_read(db: Any, user_days: Any, policy: Any) -> Any:
        found = real_load_hours(db, user_days, policy)
        if not ran:
            ran.append(True)
            hourly.insert_one(hour_doc | {"updated_at": at(12, 5)})
            day = daily.find_one({"_id": daily_id("user-a", DAY)})
            daily.update_one({"_id": day["_id"], "user_id": "user-a"}, {"$set": {"updated_at": at(12, 5)}})
        return found

    monkeypatch.setattr(aggregation, "_load_hourly_days", counted_again_after_the_read)
    written = refresh_daily(mock_db, {("user-a", DAY)}, POLICY)

    assert written == 0  # the other writer's roll-up is this one's: nothing deleted, nothing to write

    assert daily.find_one({"_id": daily_id("user-a", DAY)})["heartbeats"] == 1
