"""The rebuild (shared/reports/rebuild.py) as its operator sees it, on mongomock: which reports a rebuild of one
user or of everyone restores, which it leaves alone, and the counts it reports. (tests/reports/test_reports.py has the
plain cases; these are the edges: several pages, several days, reassigned bottles, the range's ends.)"""

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared import instants
from shared.feeds.settling import SETTLE
from shared.reports.rebuild import RebuildSummary, rebuild
from shared.settings import get_settings
from shared.store import schema
from tests.api import SPEC, closed, heartbeat, opened, post_events, provisioned, put_bottle
from tests.report_client import (
    aggregate,
    clear_reports,
    played_report_day,
    set_setting,
    stored_reports,
    use_change_source_of,
)

USER = SPEC["user_id"]
OTHER = "other"
# Two days: the first's hours and the second's until 05:00 are in the past; the first's 08:00 to 11:00 are within
# the widest heartbeat window (48 hours), which these tests use.
DAY = H8 = H10 = datetime.min.replace(tzinfo=UTC)  # made for each test: report_day below
DAYS = (DAY, DAY)


@pytest.fixture(autouse=True)
def report_day() -> None:
    """The day these tests report on and its hours, as this test starts (tests/report_client.py)."""
    global DAY, DAYS, H8, H10  # noqa: PLW0603 - the tests read them as the module's constants
    DAY = played_report_day()
    H8, H10 = DAY + timedelta(hours=8), DAY + timedelta(hours=10)
    DAYS = (DAY, DAY + timedelta(days=1))


@pytest.fixture(autouse=True)
def store(mock_db: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    set_setting(monkeypatch, "HEARTBEAT_WINDOW_HOURS", "48")
    use_change_source_of(mock_db, monkeypatch)
    return mock_db


@pytest.fixture
def clock() -> Iterator[Any]:
    """Stops the server clock at an instant (the receive time of what is posted meanwhile); None: the test's
    clock again."""
    before = instants._clock
    yield lambda at: instants.set_clock(before if at is None else lambda: at)
    instants.set_clock(before)


def posted(bottle_id: str, key: str, *events: dict[str, Any]) -> None:
    response = post_events(bottle_id, key, {"events": list(events)})
    assert response.status == 202, response.body


def rebuilt(db: Any, user_id: str | None, start: datetime | None = None, end: datetime | None = None) -> RebuildSummary:
    """The rebuild of `user_id`'s reports (everyone's: None) from `start` (DAY) to `end` (the day after)."""
    start, end = start or DAYS[0], end or DAYS[1]
    return rebuild(db, start=start, end=end, user_id=user_id, now=instants.utc_now(), settings=get_settings())


def reports_of(db: Any, user_id: str) -> dict[str, dict[str, Any]]:
    return {key: report for key, report in stored_reports(db).items() if report["user_id"] == user_id}


def test_a_rebuild_of_more_than_a_page_reads_every_source_document_whatever_order_it_was_stored_in(
    mock_db, monkeypatch
):
    """Pages follow `_id` order: a page read in any other order would make the next page skip documents. The
    events are stored newest `event_id` first (their `_id`s descend), and another user's events are never read."""
    key = provisioned("bottle-1")
    events = [opened(H8 + timedelta(minutes=m), event_id=f"e{9 - m}") for m in range(5)]
    posted("bottle-1", key, heartbeat(H8), *events)
    other = provisioned("bottle-2", {**SPEC, "user_id": OTHER})
    posted("bottle-2", other, heartbeat(H8), opened(H8), opened(H10))
    aggregate()
    expected = reports_of(mock_db, USER)
    clear_reports(mock_db)
    set_setting(monkeypatch, "REPORTS_PAGE_SIZE", "2")

    summary = rebuilt(mock_db, USER)

    assert reports_of(mock_db, USER) == expected
    assert expected[f"{schema.USER_HOURLY_REPORTS}/{USER}|{H8:%Y-%m-%dT%H}"]["opened"] == 5
    assert reports_of(mock_db, OTHER) == {}  # only the user asked for
    assert (summary.source_documents, summary.daily_written) == (5 + 1, 1)  # five actions, a heartbeat document


def test_a_rebuild_rolls_up_every_day_its_hours_touch_a_page_of_days_at_a_time(mock_db, monkeypatch, clock):
    key = provisioned("bottle-1")
    posted("bottle-1", key, opened(H8), closed(DAYS[1] + timedelta(minutes=1), taken=2))
    # The consumers roll the second day up once its first roll-up block has ended and its last hour is counted
    # (SETTLE after): compared from then on. In the minutes before (06:00-06:10 UTC on the real clock) the rebuild
    # has the day's report and the consumers do not yet.
    first_block = timedelta(hours=get_settings().daily_rollup_hours)
    clock(max(instants.utc_now(), DAYS[1] + first_block + SETTLE))
    aggregate()
    expected = reports_of(mock_db, USER)
    clear_reports(mock_db)
    set_setting(monkeypatch, "REPORTS_PAGE_SIZE", "1")

    summary = rebuilt(mock_db, USER, DAYS[0], DAYS[1] + timedelta(days=1))

    assert reports_of(mock_db, USER) == expected
    assert {key.split("/")[0] for key in expected} == {schema.USER_HOURLY_REPORTS, schema.USER_DAILY_REPORTS}
    assert (summary.hourly_written, summary.daily_written) == (2, 2)


def test_a_rebuild_leaves_the_hours_outside_its_range_as_the_reports_have_them(mock_db):
    """Only hours starting in [from, to) are rebuilt, though a heartbeat document holds the whole window."""
    key = provisioned("bottle-1")
    posted("bottle-1", key, heartbeat(H8), heartbeat(H10))
    aggregate()
    clear_reports(mock_db)

    summary = rebuilt(mock_db, USER, H8, H8 + timedelta(hours=1))

    hours = mock_db[schema.USER_HOURLY_REPORTS].find({"user_id": USER})
    assert [(r["hour"], r["heartbeats"]) for r in hours] == [(H8, 1)]
    assert summary.hourly_written == 1


def test_rebuilding_one_user_leaves_the_next_owner_of_their_bottle_alone(mock_db, clock):
    """The bottle's heartbeat document is read for its former owner too, and holds the new owner's hours."""
    clock(H8 + timedelta(minutes=20))
    key = provisioned("bottle-1")
    posted("bottle-1", key, heartbeat(H8 + timedelta(minutes=5)), opened(H8))
    clock(H8 + timedelta(minutes=30))
    assert put_bottle("bottle-1", {**SPEC, "user_id": OTHER}).status == 200
    clock(H8 + timedelta(minutes=40))
    posted("bottle-1", key, heartbeat(H8 + timedelta(minutes=35)), opened(H8 + timedelta(minutes=36)))
    clock(None)
    aggregate()
    mine = reports_of(mock_db, USER)
    assert len(reports_of(mock_db, OTHER)) == 2  # the new owner's hour and day
    clear_reports(mock_db)

    rebuilt(mock_db, USER)

    assert reports_of(mock_db, USER) == mine
    assert reports_of(mock_db, OTHER) == {}


def test_rebuilding_one_user_restores_the_hours_of_their_bottles_heartbeats_alone(mock_db):
    key = provisioned("bottle-1")
    posted("bottle-1", key, heartbeat(H8), heartbeat(H8 + timedelta(minutes=5)))
    aggregate()
    expected = reports_of(mock_db, USER)
    clear_reports(mock_db)

    rebuilt(mock_db, USER)

    assert reports_of(mock_db, USER) == expected
    assert expected[f"{schema.USER_HOURLY_REPORTS}/{USER}|{H8:%Y-%m-%dT%H}"]["heartbeats"] == 2


def test_rebuilding_everyone_counts_an_event_received_as_the_range_starts(mock_db, clock):
    """Everyone's actions are found by receive time, from the range's start less the largest device clock skew:
    an event of the range's first minutes received then is in the range."""
    clock(H8 + timedelta(minutes=2))
    key = provisioned("bottle-1")
    posted("bottle-1", key, opened(H8 + timedelta(minutes=1)))
    clock(None)
    aggregate()
    expected = reports_of(mock_db, USER)
    clear_reports(mock_db)

    rebuilt(mock_db, None, H8, H8 + timedelta(hours=1))

    assert reports_of(mock_db, USER) == expected
    assert expected[f"{schema.USER_HOURLY_REPORTS}/{USER}|{H8:%Y-%m-%dT%H}"]["opened"] == 1
