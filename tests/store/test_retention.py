"""Retention: the growing collections (actions, hourly and daily reports, notifications) keep a document for their
setting's days, by a TTL index the setup command creates (on `_ts` on Cosmos DB); a changed setting changes
the index; the heartbeat documents and the registry are never expired."""

from datetime import UTC, datetime, timedelta
from typing import Any

import mongomock
import pytest
from pydantic import ValidationError

from shared.instants import hour_of, set_clock, utc_now
from shared.settings import Settings, get_settings
from shared.store import schema
from shared.store.setup import ensure_store
from tests.api import ago, closed, heartbeat, opened, post_events, provisioned
from tests.cosmos_fakes import FakeCosmosDatabase
from tests.report_client import aggregate, use_change_source_of

DAY = 86_400


def expiry(db: Any, collection: str) -> dict[tuple[str, ...], int]:
    """The TTL indexes of a collection: key -> expireAfterSeconds."""
    return {
        tuple(k for k, _ in info["key"]): info["expireAfterSeconds"]
        for info in db[collection].index_information().values()
        if "expireAfterSeconds" in info
    }


def test_the_setup_command_expires_each_growing_collection_by_its_setting():
    db: Any = mongomock.MongoClient().db
    ensure_store(db, Settings(), on_cosmos=False)

    assert expiry(db, schema.BOTTLE_ACTIONS) == {("time",): 60 * DAY}
    assert expiry(db, schema.USER_HOURLY_REPORTS) == {("hour",): 60 * DAY}
    assert expiry(db, schema.NOTIFICATIONS) == {("created_at",): 90 * DAY}
    assert expiry(db, schema.USER_DAILY_REPORTS) == {("day",): 400 * DAY}
    for kept in (schema.BOTTLES, schema.BOTTLE_HEARTBEATS, schema.LEASES):
        assert expiry(db, kept) == {}, kept


def test_on_cosmos_db_the_ttl_is_on_the_last_write_time():
    fake = FakeCosmosDatabase(mongomock.MongoClient().db)
    ensure_store(fake, Settings(actions_retention_days=45), on_cosmos=True)
    assert expiry(fake.db, schema.BOTTLE_ACTIONS) == {("_ts",): 45 * DAY}


def test_a_changed_setting_changes_the_index_when_the_setup_command_runs_again():
    db: Any = mongomock.MongoClient().db
    ensure_store(db, Settings(), on_cosmos=False)

    ensure_store(db, Settings(notifications_retention_days=7, hourly_reports_retention_days=400), on_cosmos=False)

    assert expiry(db, schema.NOTIFICATIONS) == {("created_at",): 7 * DAY}
    assert expiry(db, schema.USER_HOURLY_REPORTS) == {("hour",): 400 * DAY}


@pytest.mark.parametrize(
    "name", ["actions_retention_days", "hourly_reports_retention_days", "daily_reports_retention_days"]
)
def test_a_retention_shorter_than_late_events_are_accepted_is_refused(name):
    with pytest.raises(ValidationError, match=name.upper()):
        Settings(max_event_age_days=30, **{name: 31})


def test_old_actions_and_reports_expire_while_the_heartbeat_document_stays(mock_db, monkeypatch):
    """Played on the app's clock: 61 days on, the events and hourly reports of the first day are gone; the
    bottle, its heartbeat document and the daily report that keeps the day's totals are not."""
    use_change_source_of(mock_db, monkeypatch)
    key = provisioned()
    hour = hour_of(ago(minutes=9))  # three events of one past UTC hour, whatever the minute now is
    minute = timedelta(minutes=1)
    events = [heartbeat(hour + minute), opened(hour + 2 * minute), closed(hour + 3 * minute)]
    post_events("bottle-1", key, {"events": events})
    aggregate(hours_later=24)  # a day on: the tally has counted the hour and rolled its day up, at any hour now is
    assert mock_db[schema.BOTTLE_ACTIONS].count_documents({}) == 2
    assert mock_db[schema.USER_HOURLY_REPORTS].count_documents({}) == 1

    later = utc_now() + timedelta(days=61)
    set_clock(lambda: later)
    try:
        assert mock_db[schema.BOTTLE_ACTIONS].count_documents({}) == 0
        assert mock_db[schema.USER_HOURLY_REPORTS].count_documents({}) == 0
        assert mock_db[schema.USER_DAILY_REPORTS].count_documents({}) == 1
        assert mock_db[schema.BOTTLE_HEARTBEATS].count_documents({}) == 1
        assert mock_db[schema.BOTTLES].count_documents({}) == 1
    finally:
        set_clock(None)


@pytest.mark.integration
def test_a_real_server_deletes_expired_documents_and_keeps_the_rest(real_db, secantus_client):
    """SecantusDB's TTL pass (every minute in a deployment; on demand here) by the real clock."""
    settings = get_settings()
    # datetime.now, not utc_now: SecantusDB prunes by the real clock, which tests/conftest.py cannot place
    old = datetime.now(UTC) - timedelta(days=settings.notifications_retention_days + 1)
    recent = datetime.now(UTC) - timedelta(days=1)
    real_db[schema.NOTIFICATIONS].insert_many([{"_id": "old", "created_at": old}, {"_id": "new", "created_at": recent}])

    secantus_client.admin.command("secantusAdmin.pruneTtl")

    assert [doc["_id"] for doc in real_db[schema.NOTIFICATIONS].find()] == ["new"]
