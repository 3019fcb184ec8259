"""GET /api/users/{user_id}/reports as a client sees it: a bad query's 400 names every problem in the documented
words, a range too long says how many periods it covers, a read starts at the hour or the day `from` falls in, and
on Cosmos DB the read's sort is one its declared index serves."""

from datetime import datetime, timedelta
from typing import Any

import pytest

from functions import reports
from shared.instants import HOUR, day_of, format_instant, utc_now
from shared.reports.documents import StoredEntry, daily_document, hourly_document
from shared.store import schema
from tests.api import iso
from tests.cosmos_fakes import IndexTransformingDatabase
from tests.report_client import get_reports

USER = "willcross1024"
INVALID = "invalid report query"
REQUIRED = "required: an ISO-8601 date-time with a UTC offset"


def a_past_day() -> datetime:
    """Midnight three days ago: whole days in the past, well inside the reports' retention."""
    return day_of(utc_now()) - timedelta(days=3)


def store_hours(db: Any, heartbeats_by_hour: dict[datetime, int]) -> None:
    """Stored hourly reports of one bottle (as the roll-up writes them), `heartbeats` telling them apart."""
    documents = [
        hourly_document(USER, hour, [bottle_entry(heartbeats)], updated_at=hour + HOUR)
        for hour, heartbeats in heartbeats_by_hour.items()
    ]
    db[schema.USER_HOURLY_REPORTS].insert_many(documents)


def store_days(db: Any, heartbeats_by_day: dict[datetime, int]) -> None:
    """Stored daily reports, each summed from one hourly report of its day."""
    for day, heartbeats in heartbeats_by_day.items():
        hour = hourly_document(USER, day + timedelta(hours=9), [bottle_entry(heartbeats)], updated_at=day)
        db[schema.USER_DAILY_REPORTS].insert_one(daily_document(USER, day, [hour]))


def bottle_entry(heartbeats: int) -> StoredEntry:
    return {"bottle_id": "bottle-1", "medication": "Ibuprofen", "heartbeats": heartbeats}


def periods_read(granularity: str, start: datetime, end: datetime) -> list[tuple[str, int]]:
    """(period as the API writes it, heartbeats) of every report the read answers, in its order."""
    response = get_reports(USER, granularity=granularity, **{"from": iso(start), "to": iso(end)})
    assert response.status == 200, response.body
    return [(r[granularity], r["heartbeats"]) for r in response.body["reports"]]


# --- bad queries ----------------------------------------------------------------------------------------------


def test_a_query_with_several_problems_is_one_400_naming_each_of_them():
    response = get_reports(USER, granularity="week")

    assert response.status == 400
    assert response.body == {
        "error": INVALID,
        "details": [
            {"field": "granularity", "message": "must be 'hour' or 'day'"},
            {"field": "from", "message": REQUIRED},
            {"field": "to", "message": REQUIRED},
        ],
    }


@pytest.mark.parametrize("to", ["2026-11-20T23:00:00Z", "2026-11-21T00:00:00Z"])
def test_a_range_that_does_not_end_after_it_starts_is_a_400_on_to(to):
    response = get_reports(USER, **{"from": "2026-11-21T00:00:00Z", "to": to})

    assert response.status == 400
    assert response.body == {"error": INVALID, "details": [{"field": "to", "message": "must be later than 'from'"}]}


@pytest.mark.parametrize(
    ("params", "says"),
    [
        # 744 hours and a half: the partial last hour counts.
        ({"from": "2026-10-01T00:00:00Z", "to": "2026-11-01T00:30:00Z"}, "the range covers 745 hours"),
        # From noon: the range starts at that day's midnight, so it covers 366 days and a second.
        (
            {"granularity": "day", "from": "2025-01-01T12:00:00Z", "to": "2026-01-02T00:00:01Z"},
            "the range covers 367 days",
        ),
    ],
)
def test_a_range_too_long_is_a_400_saying_how_many_whole_periods_it_covers(params, says):
    response = get_reports(USER, **params)

    assert response.status == 400
    limit = "744 per request" if params.get("granularity") != "day" else "366 per request"
    assert response.body == {"error": INVALID, "details": [{"field": "to", "message": f"{says}; at most {limit}"}]}


# --- the periods a range covers -------------------------------------------------------------------------------


def test_an_hourly_read_starts_at_the_hour_from_falls_in_not_earlier(db):
    day = a_past_day()
    h3, h8, h10 = (day + timedelta(hours=h) for h in (3, 8, 10))
    store_hours(db, {h3: 3, h8: 8, h10: 10})

    assert periods_read("hour", h8 + timedelta(minutes=30), h10) == [(format_instant(h8), 8)]
    assert periods_read("hour", h3 + timedelta(minutes=59), h10 + timedelta(seconds=1)) == [
        (format_instant(h3), 3),
        (format_instant(h8), 8),
        (format_instant(h10), 10),
    ]


def test_a_daily_read_starts_at_the_day_from_falls_in(db):
    day = a_past_day()
    store_days(db, {day - timedelta(days=1): 1, day: 2, day + timedelta(days=1): 3})

    five_am = day + timedelta(hours=5)
    assert periods_read("day", five_am, five_am + timedelta(days=1)) == [
        (format_instant(day), 2),
        (format_instant(day + timedelta(days=1)), 3),
    ]


# --- on Cosmos DB ----------------------------------------------------------------------------------------------


def test_a_read_on_cosmos_db_sorts_as_its_declared_index_does_and_succeeds(mock_db, monkeypatch):
    """Cosmos DB fails a sort that no index serves exactly (learn.microsoft.com/azure/cosmos-db/mongodb/
    error-codes-solutions, code 2 BadValue: "an index path corresponding to the specified order-by item is
    excluded or the order by query doesn't have a corresponding composite index that it can be served from"):
    the read would be a 500. The fake refuses any sort but the declared (user_id, hour) and (user_id, day)."""
    day = a_past_day()
    store_hours(mock_db, {day + timedelta(hours=2): 2, day + timedelta(hours=1): 1})
    store_days(mock_db, {day: 5, day - timedelta(days=1): 4})
    monkeypatch.setattr(reports, "get_database", lambda: IndexTransformingDatabase(mock_db))

    hours = periods_read("hour", day, day + timedelta(days=1))
    days = periods_read("day", day - timedelta(days=1), day + timedelta(days=1))

    assert hours == [(format_instant(day + timedelta(hours=1)), 1), (format_instant(day + timedelta(hours=2)), 2)]
    assert days == [(format_instant(day - timedelta(days=1)), 4), (format_instant(day), 5)]
