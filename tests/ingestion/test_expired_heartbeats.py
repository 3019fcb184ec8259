"""A heartbeat older than the heartbeat window: accepted, not kept, and answered `expired` every time it is sent,
so a retry says it stored nothing, as the API promises of any retry. The window's edge in the docs is the ring's."""

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from shared.devices.heartbeat_document import HOURS_PER_FIELD, Window, field_of, hour_number, hour_start
from shared.instants import set_clock, utc_now
from shared.settings import Settings
from tests.api import heartbeat, post_events, provisioned
from tests.heartbeats import counted, slot

ROOT = Path(__file__).resolve().parents[2]
WINDOW = Window(Settings.model_fields["heartbeat_window_hours"].default)


@pytest.fixture
def now() -> Iterator[datetime]:
    """The server clock, stopped at 08:36 UTC two days ago (the window's edge 24.6 hours back: 24 hours before its
    hour began)."""
    stopped = (utc_now() - timedelta(days=2)).replace(hour=8, minute=36, second=0, microsecond=0)
    set_clock(lambda: stopped)
    yield stopped
    set_clock(None)


def test_a_heartbeat_older_than_the_window_is_answered_expired_every_time_it_is_sent(db, now):
    key = provisioned()
    edge = WINDOW.start(hour_number(now))
    assert now - edge == timedelta(hours=24, minutes=36)
    older, oldest_kept = edge - timedelta(seconds=1), edge

    answers = [post_events("bottle-1", key, heartbeat(older)).body for _ in range(3)]
    kept = post_events("bottle-1", key, heartbeat(oldest_kept)).body

    assert answers == [{"stored": 0, "duplicates": 0, "expired": 1}] * 3
    assert kept == {"stored": 1, "duplicates": 0, "expired": 0}
    assert counted(db) == [slot(oldest_kept)]


def test_a_resent_batch_reaching_past_the_window_says_it_stored_nothing(db, now):
    """Before, a device that re-sent its buffer of heartbeats, some older than the window, was told that part of
    it was stored again."""
    key = provisioned()
    batch = {"events": [heartbeat(now - timedelta(minutes=30 * i)) for i in range(60)]}  # 30 hours of them
    edge = WINDOW.start(hour_number(now))
    in_window = sum(1 for i in range(60) if now - timedelta(minutes=30 * i) >= edge)

    first = post_events("bottle-1", key, batch).body
    again = post_events("bottle-1", key, batch).body

    assert first == {"stored": in_window, "duplicates": 0, "expired": 60 - in_window}
    assert again == {"stored": 0, "duplicates": in_window, "expired": 60 - in_window}
    assert len(counted(db)) == in_window


def edge_ages(window: Window) -> tuple[timedelta, timedelta]:
    """The least and the greatest age of the window's edge over a day of server clock, minute by minute: how far
    back a heartbeat is still kept (the greatest is approached, never reached: a minute short of it here)."""
    day = datetime(2026, 1, 1, tzinfo=UTC)
    ages = [minute - window.start(hour_number(minute)) for minute in (day + timedelta(minutes=m) for m in range(1440))]
    return min(ages), max(ages) + timedelta(minutes=1)


def test_the_window_s_edge_is_23_to_27_hours_back_as_the_docs_say():
    least, greatest = edge_ages(WINDOW)
    hours = f"{least // timedelta(hours=1)} to {greatest // timedelta(hours=1)} hours"
    assert hours == "23 to 27 hours"
    api = (ROOT / "docs" / "api.md").read_text()
    readme = (ROOT / "README.md").read_text()
    assert hours in api
    assert f"its edge is {hours} back" in readme
    assert f"its edge is {hours}" in (ROOT / "openapi.yaml").read_text()
    # The examples the API reference gives: at 08:36 UTC the edge is 08:00 the day before, still at 10:59; at 11:00
    # it is 12:00 the day before.
    day = datetime(2026, 1, 2, tzinfo=UTC)
    for at, edge, said in [
        ((8, 36), (8, 0), "at 08:36 UTC it is 08:00 the day before (24.6 hours back)"),
        ((10, 59), (8, 0), "at 10:59 still\n  08:00 (a minute short of 27 hours)"),
        ((11, 0), (12, 0), "at 11:00 it is 12:00 the day before (23 hours)"),
    ]:
        moment = day.replace(hour=at[0], minute=at[1])
        assert WINDOW.start(hour_number(moment)) == (day - timedelta(days=1)).replace(hour=edge[0], minute=edge[1])
        assert said in api, said
    assert not re.search(r"25 to 28 hours back|24 hours and up to 4 more", api + readme)


def test_the_edge_is_the_start_of_the_field_holding_the_hour_window_minus_one_before():
    """What the docs say the ring does, for every window setting: the field (4 UTC hours) that holds the hour
    HEARTBEAT_WINDOW_HOURS - 1 hours before the current one."""
    for hours in range(2, 49):
        window = Window(hours)
        for server_hour in range(400_000, 400_008):
            assert window.start(server_hour) == hour_start(field_of(server_hour - hours + 1) * HOURS_PER_FIELD)
        least, greatest = edge_ages(window)
        assert (least, greatest) == (timedelta(hours=hours - 1), timedelta(hours=hours + 3))
