"""A user-hour write that loses its guard to another writer is merged again: each bottle's part as the source has it
by then (or as it was, where the source no longer gives it), over what the other writer wrote
(shared/reports/aggregation.py: write_hourly, refreshed_parts, write_guarded)."""

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from pymongo.database import Database

from shared.feeds.sources import Change
from shared.instants import hour_of, to_stored, utc_now
from shared.reports import aggregation
from shared.reports.aggregation import refresh_hourly
from shared.reports.documents import Entry, full_entry, hourly_document, hourly_id
from shared.store import schema
from shared.store.retries import RetryPolicy, StoreUnavailable
from tests.api import SPEC, ago, heartbeat, opened, post_events, provisioned
from tests.reports.documents import stale_entry

USER = SPEC["user_id"]
POLICY = RetryPolicy(max_retries=0, base_ms=1)


def after_the_first_report_read(monkeypatch: Any, meanwhile: Callable[[], None]) -> None:
    """Runs `meanwhile` (another writer, new source) once, right after the merge first read its user-hours."""
    real_load = aggregation._load_by_id
    ran: list[bool] = []

    def load(collection: Any, ids: Any, policy: Any) -> Any:
        found = real_load(collection, ids, policy)
        if not ran:
            ran.append(True)
            meanwhile()
        return found

    monkeypatch.setattr(aggregation, "_load_by_id", load)


def action_changes(db: Database[Any], bottle_id: str) -> list[Change]:
    actions = db[schema.BOTTLE_ACTIONS].find({"bottle_id": bottle_id})
    return [Change(schema.BOTTLE_ACTIONS, a["_id"], a) for a in actions]


def entries(db: Database[Any], hour: datetime) -> dict[str, Entry]:
    """The stored user-hour's entries by bottle, whole (a counter the stored entry leaves out is 0)."""
    stored = db[schema.USER_HOURLY_REPORTS].find_one({"_id": hourly_id(USER, hour)})
    assert stored is not None
    return {e["bottle_id"]: full_entry(e) for e in stored["bottles"]}


def test_a_write_retried_after_a_conflict_counts_its_bottle_as_the_source_is_by_then(mock_db, monkeypatch):
    """The merge read bottle-1's source (one opened event, two heartbeats) and the user-hour (none); before it
    wrote, another event and a late heartbeat arrived and another writer made the user-hour (bottle-2's entry).
    The insert fails, and the merge again counts bottle-1 from the source as it is now, beside bottle-2."""
    key = provisioned("bottle-1")
    hour = hour_of(ago(hours=3))
    minute = timedelta(minutes=1)
    beats = [heartbeat(hour + m * minute) for m in (1, 11)]
    assert post_events("bottle-1", key, {"events": [opened(hour + minute, event_id="e1"), *beats]}).status == 202
    changes = [*action_changes(mock_db, "bottle-1"), Change(schema.BOTTLE_HEARTBEATS, "bottle-1", None)]
    stamp = utc_now()

    def meanwhile() -> None:
        later = [opened(hour + 6 * minute, event_id="e2"), heartbeat(hour + 21 * minute)]
        assert post_events("bottle-1", key, {"events": later}).status == 202
        other = hourly_document(USER, hour, [stale_entry("bottle-2", 2)], stamp - timedelta(minutes=1))
        mock_db[schema.USER_HOURLY_REPORTS].insert_one(other)

    after_the_first_report_read(monkeypatch, meanwhile)
    refresh_hourly(mock_db, changes, stamp=stamp, policy=POLICY)

    found = entries(mock_db, hour)
    assert (found["bottle-1"]["opened"], found["bottle-1"]["heartbeats"]) == (2, 3)
    assert found["bottle-2"]["heartbeats"] == 2


def test_a_write_retried_after_a_conflict_keeps_a_part_whose_source_is_gone(mock_db, monkeypatch):
    """The merge read bottle-1's and bottle-3's events (bottle-3 in two hours); before it wrote, bottle-3's
    events were gone from the source (expired) and another writer made both user-hours. The retry keeps bottle-3's
    parts as they were read, in the hour it shares with bottle-1 and in the one it has alone."""
    keys = {b: provisioned(b) for b in ("bottle-1", "bottle-3")}
    hour = hour_of(ago(hours=3))
    earlier = hour - timedelta(hours=1)
    assert post_events("bottle-1", keys["bottle-1"], opened(hour + timedelta(minutes=1), event_id="e1")).status == 202
    for event_id, at in (("e3", hour + timedelta(minutes=2)), ("e4", earlier + timedelta(minutes=2))):
        assert post_events("bottle-3", keys["bottle-3"], opened(at, event_id=event_id)).status == 202
    changes = [*action_changes(mock_db, "bottle-1"), *action_changes(mock_db, "bottle-3")]
    stamp = utc_now()

    def meanwhile() -> None:
        assert mock_db[schema.BOTTLE_ACTIONS].delete_many({"bottle_id": "bottle-3"}).deleted_count == 2
        for at in (hour, earlier):
            other = hourly_document(USER, at, [stale_entry("bottle-2", 2)], stamp - timedelta(minutes=1))
            mock_db[schema.USER_HOURLY_REPORTS].insert_one(other)

    after_the_first_report_read(monkeypatch, meanwhile)
    refresh_hourly(mock_db, changes, stamp=stamp, policy=POLICY)

    shared_hour, alone = entries(mock_db, hour), entries(mock_db, earlier)
    assert {b: e["opened"] for b, e in shared_hour.items()} == {"bottle-1": 1, "bottle-2": 0, "bottle-3": 1}
    assert {b: e["opened"] for b, e in alone.items()} == {"bottle-2": 0, "bottle-3": 1}


def test_a_write_that_lost_to_another_of_the_same_millisecond_is_merged_again(mock_db, monkeypatch):
    """Another writer replaced the user-hour after the merge read it, stamping it with the very `updated_at` the
    merge's own write carries: the guard fails, and the document read back has that `updated_at` but not the
    merge's content, so the write did not land: it is merged again, and both bottles' counts stay."""
    key = provisioned("bottle-1")
    hour = hour_of(ago(hours=3))
    assert post_events("bottle-1", key, opened(hour + timedelta(minutes=1), event_id="e1")).status == 202
    reports = mock_db[schema.USER_HOURLY_REPORTS]
    stamp = utc_now()
    reports.insert_one(hourly_document(USER, hour, [stale_entry("bottle-2", 2)], stamp - timedelta(minutes=5)))

    def meanwhile() -> None:
        other = hourly_document(USER, hour, [stale_entry("bottle-2", 4)], stamp)
        assert reports.replace_one({"_id": other["_id"], "user_id": USER}, other).modified_count == 1

    after_the_first_report_read(monkeypatch, meanwhile)
    refresh_hourly(mock_db, action_changes(mock_db, "bottle-1"), stamp=stamp, policy=POLICY)

    found = entries(mock_db, hour)
    assert (found["bottle-1"]["opened"], found["bottle-2"]["heartbeats"]) == (1, 4)
    # Stamped past the other writer's version, so a reader that polled by `updated_at` after it sees this one.
    assert reports.find_one({"_id": hourly_id(USER, hour)})["updated_at"] > to_stored(stamp)


def test_a_user_hour_that_keeps_changing_under_the_merge_is_a_store_unavailable_naming_the_hourly_reports(
    mock_db, monkeypatch
):
    key = provisioned("bottle-1")
    hour = hour_of(ago(hours=3))
    assert post_events("bottle-1", key, opened(hour + timedelta(minutes=1), event_id="e1")).status == 202
    monkeypatch.setattr(aggregation, "write_guarded", lambda _collection, writes, _policy: [False] * len(writes))

    with pytest.raises(StoreUnavailable, match=r"^hourly reports kept changing"):
        refresh_hourly(mock_db, action_changes(mock_db, "bottle-1"), stamp=utc_now(), policy=POLICY)
