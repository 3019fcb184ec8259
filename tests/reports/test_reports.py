"""Hourly and daily reports as their readers see them: what is counted where, late events, reassigned bottles,
the heartbeat window, replays, the time budget, throttling, the read API and the rebuild command.

Every behaviour test runs on mongomock (the polling change source) and on SecantusDB (real change streams)."""

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared import instants
from shared.feeds import worker
from shared.feeds.leases import checkpoint
from shared.instants import day_of, hour_of, set_clock, utc_now
from shared.reports import aggregation
from shared.reports import rebuild as rebuild_reports
from shared.reports.aggregation import refresh_daily
from shared.reports.documents import StoredEntry, hourly_document, hourly_id
from shared.reports.feeds import HEARTBEAT_TALLY
from shared.settings import get_settings
from shared.store import schema
from shared.store.retries import RetryPolicy, StoreUnavailable
from tests.api import SPEC, ago, closed, heartbeat, iso, opened, post_events, provisioned, put_bottle
from tests.cosmos_fakes import ThrottlingDatabase
from tests.report_client import (
    aggregate,
    clear_reports,
    dispatched,
    get_reports,
    played_report_day,
    run_round,
    set_setting,
    stored_reports,
    use_change_source_of,
    work,
)
from tools.host.worker import InvocationFailed

USER = SPEC["user_id"]
# A day whose hours are all in the past, and whose 08:00 is within the last 48 hours (the widest heartbeat window,
# which these tests use: heartbeats of that day sent now are still counted).
DAY = H8 = H10 = datetime.min.replace(tzinfo=UTC)  # made for each test: report_day below


@pytest.fixture(autouse=True)
def report_day() -> None:
    """The day these tests report on and its hours, as this test starts (tests/report_client.py)."""
    global DAY, H8, H10  # noqa: PLW0603 - the tests read them as the module's constants
    DAY = played_report_day()
    H8, H10 = DAY + timedelta(hours=8), DAY + timedelta(hours=10)


@pytest.fixture(autouse=True)
def change_source(db: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    set_setting(monkeypatch, "HEARTBEAT_WINDOW_HOURS", "48")
    return use_change_source_of(db, monkeypatch)


def at(hour: Any, minutes: float) -> Any:
    return hour + timedelta(minutes=minutes)


def hourly(user_id: str = USER, start: Any = None, end: Any = None) -> list[dict[str, Any]]:
    start = start or DAY
    response = get_reports(
        user_id, granularity="hour", **{"from": iso(start), "to": iso(end or start + timedelta(days=1))}
    )
    assert response.status == 200, response.body
    return list(response.body["reports"])


def daily(user_id: str = USER, start: Any = None, days: int = 1) -> list[dict[str, Any]]:
    start = start or DAY
    response = get_reports(user_id, granularity="day", **{"from": iso(start), "to": iso(start + timedelta(days=days))})
    assert response.status == 200, response.body
    return list(response.body["reports"])


def without_updated_at(report: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in report.items() if k != "updated_at"}


def entry(bottle_id: str, medication: str, **counts: Any) -> dict[str, Any]:
    fields = {"opened": 0, "closed": 0, "doses": 0, "pills_taken": 0, "heartbeats": 0}
    readings = {"last_number_of_pills": None, "last_mass_of_contents": None}
    return {"bottle_id": bottle_id, "medication": medication, **fields, **readings} | counts


def test_an_hourly_report_holds_each_bottle_and_the_users_totals(db):
    key1 = provisioned("bottle-1")
    key2 = provisioned("bottle-2", {**SPEC, "medication": "Ryetalyn"})
    post_events(
        "bottle-1",
        key1,
        {
            "events": [
                heartbeat(at(H8, 5)),
                opened(at(H8, 10), pills=30, mass=15.0),
                closed(at(H8, 11), taken=2, pills=28, mass=14.0),
                heartbeat(at(H8, 35)),
            ]
        },
    )
    post_events(
        "bottle-2",
        key2,
        {"events": [heartbeat(at(H8, 20)), opened(at(H8, 40), pills=10, mass=5.0), closed(at(H8, 41), taken=0)]},
    )

    aggregate()

    [report] = hourly(start=H8, end=H8 + timedelta(hours=1))
    assert without_updated_at(report) == {
        "user_id": USER,
        "hour": iso(H8).replace("Z", ".000Z"),
        "opened": 2,
        "closed": 2,
        "doses": 1,
        "pills_taken": 2,
        "heartbeats": 3,
        "bottles": [
            entry(
                "bottle-1",
                "Cordrazine",
                opened=1,
                closed=1,
                doses=1,
                pills_taken=2,
                heartbeats=2,
                last_number_of_pills=28,
                last_mass_of_contents=14.0,
            ),
            entry(
                "bottle-2",
                "Ryetalyn",
                opened=1,
                closed=1,
                heartbeats=1,
                last_number_of_pills=29,
                last_mass_of_contents=14.5,
            ),
        ],
    }
    assert report["updated_at"] >= iso(ago(minutes=1))
    stored = db[schema.USER_HOURLY_REPORTS].find_one({"user_id": USER})
    assert stored["_id"] == f"{USER}|{H8:%Y-%m-%dT%H}"
    assert stored["hour"] == H8


def test_a_daily_report_sums_its_hours_and_keeps_the_latest_readings(db):
    key = provisioned("bottle-1")
    post_events(
        "bottle-1",
        key,
        {
            "events": [
                heartbeat(at(H8, 1)),
                opened(at(H8, 2), pills=30, mass=15.0),
                closed(at(H8, 3), taken=1, pills=29, mass=14.5),
                heartbeat(at(H10, 1)),
                heartbeat(at(H10, 31)),
                opened(at(H10, 40), pills=29, mass=14.5),
                closed(at(H10, 41), taken=3, pills=26, mass=13.0),
            ]
        },
    )

    aggregate()

    assert [r["hour"][:13] for r in hourly()] == [f"{H8:%Y-%m-%dT%H}", f"{H10:%Y-%m-%dT%H}"]
    [report] = daily()
    assert without_updated_at(report) == {
        "user_id": USER,
        "day": iso(DAY).replace("Z", ".000Z"),
        "opened": 2,
        "closed": 2,
        "doses": 2,
        "pills_taken": 4,
        "heartbeats": 3,
        "bottles": [
            entry(
                "bottle-1",
                "Cordrazine",
                opened=2,
                closed=2,
                doses=2,
                pills_taken=4,
                heartbeats=3,
                last_number_of_pills=26,
                last_mass_of_contents=13.0,
            )
        ],
    }
    assert report["updated_at"] == max(r["updated_at"] for r in hourly())
    assert db[schema.USER_DAILY_REPORTS].find_one()["_id"] == f"{USER}|{DAY:%Y-%m-%d}"


def test_late_events_land_in_their_past_hour_and_its_day_is_recomputed(db):
    key = provisioned("bottle-1")
    post_events("bottle-1", key, {"events": [heartbeat(at(H10, 1)), opened(at(H10, 2)), closed(at(H10, 3))]})
    aggregate()
    assert [r["hour"][:13] for r in hourly()] == [f"{H10:%Y-%m-%dT%H}"]

    # The bottle was offline at 08:xx and uploads what it buffered, hours late: the late close lands at the next
    # run, the late heartbeat at the tally's next pass, an hour on.
    post_events("bottle-1", key, {"events": [heartbeat(at(H8, 1)), closed(at(H8, 30), taken=2)]})
    aggregate()
    assert next((r["hour"][:13], r["heartbeats"], r["closed"]) for r in hourly()) == (f"{H8:%Y-%m-%dT%H}", 0, 1)
    aggregate(hours_later=1)

    reports = hourly()
    assert [(r["hour"][:13], r["heartbeats"], r["closed"], r["pills_taken"]) for r in reports] == [
        (f"{H8:%Y-%m-%dT%H}", 1, 1, 2),
        (f"{H10:%Y-%m-%dT%H}", 1, 1, 1),
    ]
    [day] = daily()
    assert (day["heartbeats"], day["closed"], day["pills_taken"], day["opened"]) == (2, 2, 3, 1)
    # The day's last readings are still those of its latest hour, not of the late event.
    assert day["bottles"][0]["last_number_of_pills"] == 29


def test_late_heartbeats_of_many_hours_each_count_in_their_hour(db):
    key = provisioned("bottle-1")
    post_events("bottle-1", key, heartbeat(at(H8, 1)))
    aggregate()  # caught up: from now on the tally counts the hours that close, and the hours heartbeats reach late

    # Back from most of a day offline: one buffered heartbeat an hour.
    hours = [H10 + timedelta(hours=i) for i in range(20)]
    post_events("bottle-1", key, {"events": [heartbeat(at(hour, 1)) for hour in hours]})
    aggregate(hours_later=1)

    counted = [(r["hour"][:13], r["heartbeats"]) for r in hourly(end=hours[-1] + timedelta(hours=1))]
    assert counted == [(f"{hour:%Y-%m-%dT%H}", 1) for hour in (H8, *hours)]


def test_aggregating_again_changes_nothing(db):
    key = provisioned("bottle-1")
    post_events("bottle-1", key, {"events": [heartbeat(at(H8, 1)), opened(at(H8, 2)), closed(at(H10, 3))]})
    aggregate()
    first = stored_reports(db, with_updated_at=True)

    aggregate()
    aggregate()

    assert stored_reports(db, with_updated_at=True) == first


def test_a_page_aggregated_again_after_a_crash_before_its_checkpoint_gives_the_same_reports(db, monkeypatch):
    key = provisioned("bottle-1")
    post_events("bottle-1", key, {"events": [heartbeat(at(H8, 1)), opened(at(H8, 2)), closed(at(H8, 3), taken=2)]})
    aggregate()
    expected = stored_reports(db)
    clear_reports(db)

    def crash(*args: Any, **kwargs: Any) -> None:
        raise StoreUnavailable("the process died before the checkpoint", retry_after_s=1)

    real_checkpoint = checkpoint
    monkeypatch.setattr(worker, "checkpoint", crash)
    summary = run_round(db)
    assert db[schema.USER_HOURLY_REPORTS].count_documents({}) > 0  # written, but never checkpointed
    assert summary.failed
    assert all(lease["token"] is None and lease["checkpoint_time"] is None for lease in db[schema.LEASES].find())
    assert all(lease["owner"] is None for lease in db[schema.LEASES].find())  # released for the retry
    # Only the crash is undone: `monkeypatch.undo()` would also undo the store's settings (MONGODB_DATABASE), and
    # the retry would then run on another database, its replay never reaching the reports it is to give again.
    monkeypatch.setattr(worker, "checkpoint", real_checkpoint)

    aggregate()

    assert stored_reports(db) == expected


def test_a_reassigned_bottles_later_events_count_for_the_new_user_only(db, server_clock):
    key = provisioned("bottle-1")
    before = hour_of(server_clock - timedelta(hours=2)) + timedelta(minutes=10)  # both events in one hour
    post_events("bottle-1", key, {"events": [heartbeat(before), opened(before + timedelta(minutes=1))]})
    # Reassigned before the consumer ever ran: the earlier heartbeat must still stay with the earlier owner.
    assert put_bottle("bottle-1", {**SPEC, "user_id": "newowner"}).status == 200
    # After the reassignment (at the server's HH:58), and in its hour: not in the next one when the test runs
    # seconds before an hour ends.
    after = server_clock + timedelta(seconds=2)
    post_events("bottle-1", key, {"events": [heartbeat(after), closed(after + timedelta(seconds=1), taken=1)]})

    aggregate(hours_later=2)  # the tally counts `after`'s hour once it has closed

    span = {"start": before - timedelta(hours=1), "end": after + timedelta(hours=1)}
    old_owner, new_owner = hourly(USER, **span), hourly("newowner", **span)
    assert [(r["hour"][:13], r["heartbeats"], r["opened"], r["closed"]) for r in old_owner] == [
        (f"{before:%Y-%m-%dT%H}", 1, 1, 0)
    ]
    assert [(r["hour"][:13], r["heartbeats"], r["opened"], r["closed"]) for r in new_owner] == [
        (f"{after:%Y-%m-%dT%H}", 1, 0, 1)
    ]


def test_heartbeats_counted_before_they_leave_the_window_stay_counted(db, monkeypatch):
    set_setting(monkeypatch, "HEARTBEAT_WINDOW_HOURS", "3")
    key = provisioned("bottle-1")
    first = hour_of(ago(hours=2))  # closed and counted by the first pass, whatever the clock says
    post_events("bottle-1", key, {"events": [heartbeat(at(first, 1)), heartbeat(at(first, 31))]})
    aggregate()
    # Six hours on, `first` has left the bottle's window (3 hours, as whole 4-hour ring fields: five hours on, an
    # hour that begins a field is still in it); a late heartbeat for it is not counted, and the count already
    # reported for it stays.
    later = first + timedelta(hours=6)
    set_clock(lambda: later + timedelta(minutes=2))
    try:
        post_events("bottle-1", key, {"events": [heartbeat(at(later, 1)), heartbeat(at(first, 45))]})
        aggregate(hours_later=1.5)  # `later` has closed
        reports = hourly(start=first, end=later + timedelta(hours=1))
    finally:
        set_clock(None)

    assert [(r["hour"][:13], r["heartbeats"]) for r in reports] == [
        (f"{first:%Y-%m-%dT%H}", 2),
        (f"{later:%Y-%m-%dT%H}", 1),
    ]


def test_a_run_stops_at_its_time_budget_and_the_next_run_carries_on(db, monkeypatch):
    set_setting(monkeypatch, "REPORTS_PAGE_SIZE", "1")
    key = provisioned("bottle-1")
    events = [opened(at(H8, 2 * m)) for m in range(5)] + [heartbeat(at(H10, 5 * m)) for m in range(3)]
    post_events("bottle-1", key, {"events": events})
    ticks = iter(range(1_000_000))

    def clock() -> float:
        return float(next(ticks))  # every look at the clock is a second later

    set_setting(monkeypatch, "REPORTS_TIME_BUDGET_SECONDS", "3")  # two rounds of a page per feed
    set_setting(monkeypatch, "REPORTS_POLL_OVERLAP_SECONDS", "0")  # else each polling run re-reads it all
    runs = 0
    while True:
        runs += 1
        summary = run_round(db, clock=clock)
        if summary.caught_up:
            break
        assert runs < 50

    assert runs >= 2
    assert [(r["opened"], r["heartbeats"]) for r in hourly()] == [(5, 0), (0, 3)]
    assert daily()[0]["opened"] == 5


def test_a_throttled_page_is_not_checkpointed_and_the_next_run_completes_it(db):
    key = provisioned("bottle-1")
    post_events("bottle-1", key, {"events": [heartbeat(at(H8, 1)), opened(at(H8, 2))]})
    throttled = ThrottlingDatabase(db, {f"{schema.USER_HOURLY_REPORTS}.bulk_write": float("inf")})

    summary = run_round(throttled)

    assert set(summary.failed) == {schema.BOTTLE_ACTIONS, HEARTBEAT_TALLY.key}
    assert db[schema.USER_HOURLY_REPORTS].count_documents({}) == 0
    aggregate()
    assert [(r["opened"], r["heartbeats"]) for r in hourly()] == [(1, 1)]


def test_a_worker_fails_its_invocation_when_its_partition_fails_and_the_retried_message_completes(db, monkeypatch):
    key = provisioned("bottle-1")
    post_events("bottle-1", key, {"events": [heartbeat(at(H8, 1)), opened(at(H8, 2))]})
    real_checkpoint = checkpoint

    def heartbeats_checkpoint_throttled(store: Any, partition: Any, *args: Any, **kwargs: Any) -> bool:
        if partition.feed.collection == schema.BOTTLE_HEARTBEATS:
            raise StoreUnavailable("leases: request rate is large", retry_after_s=1)
        return bool(real_checkpoint(store, partition, *args, **kwargs))

    monkeypatch.setattr(worker, "checkpoint", heartbeats_checkpoint_throttled)
    failed, reasons = [], set()
    for message in dispatched():
        try:
            work(message)  # the worker function, as the host calls it: it counts a failed invocation
        except InvocationFailed as failure:
            reasons.add(failure.message.split(":")[0])
            failed.append(message)
    assert reasons == {"StoreUnavailable"}

    # The tally's partitions (each saves its pass's end; on change streams, also any whose idle position moved).
    assert {json.loads(m)["feed"] for m in failed} == {HEARTBEAT_TALLY.key}
    leases = list(db[schema.LEASES].find())
    assert all(lease["owner"] is None for lease in leases)  # released, so the retry can claim it at once
    assert any(lease["checkpoint_time"] for lease in leases if lease["feed"] == schema.BOTTLE_ACTIONS)
    assert [r["opened"] for r in hourly()] == [1]

    monkeypatch.setattr(worker, "checkpoint", real_checkpoint)
    for message in failed:
        work(message)  # the host delivers the messages again: the store is back

    assert [(r["opened"], r["heartbeats"]) for r in hourly()] == [(1, 1)]
    assert any(lease["checkpoint_time"] for lease in db[schema.LEASES].find({"feed": HEARTBEAT_TALLY.key}))


# --- the read API ---------------------------------------------------------------------------------------------


def test_reports_come_back_oldest_first_for_every_period_overlapping_the_range(db):
    key = provisioned("bottle-1")
    post_events("bottle-1", key, {"events": [heartbeat(at(H10, 1)), heartbeat(at(H8, 1)), heartbeat(at(H8, 50))]})
    aggregate()

    # `from` inside 08:xx still returns 08:xx; `to` is exclusive.
    response = get_reports(USER, **{"from": iso(at(H8, 30)), "to": iso(H10)})
    assert response.body["granularity"] == "hour"
    assert [(r["hour"][:13], r["heartbeats"]) for r in response.body["reports"]] == [(f"{H8:%Y-%m-%dT%H}", 2)]
    assert [r["hour"][:13] for r in hourly()] == [f"{H8:%Y-%m-%dT%H}", f"{H10:%Y-%m-%dT%H}"]
    assert hourly("someone-else") == []
    assert [d["day"][:10] for d in daily(start=DAY - timedelta(days=3), days=10)] == [f"{DAY:%Y-%m-%d}"]


@pytest.mark.parametrize(
    ("user_id", "params", "field", "says"),
    [
        ("willcross1024", {"to": "2026-11-21T00:00:00Z"}, "from", "required"),
        ("willcross1024", {"from": "2026-11-20T00:00:00Z"}, "to", "required"),
        ("willcross1024", {"from": "yesterday", "to": "2026-11-21T00:00:00Z"}, "from", "not an ISO-8601"),
        ("willcross1024", {"from": "2026-11-20T00:00:00", "to": "2026-11-21T00:00:00Z"}, "from", "no UTC offset"),
        ("willcross1024", {"from": "2026-11-21T00:00:00Z", "to": "2026-11-21T00:00:00Z"}, "to", "later than"),
        ("willcross1024", {"from": "2026-11-21T00:00:00Z", "to": "2026-11-20T00:00:00Z"}, "to", "later than"),
        ("willcross1024", {"from": "2026-10-01T00:00:00Z", "to": "2026-11-01T00:00:01Z"}, "to", "at most 744"),
        (
            "willcross1024",
            {"granularity": "day", "from": "2025-01-01T00:00:00Z", "to": "2026-01-03T00:00:00Z"},
            "to",
            "at most 366",
        ),
        (
            "willcross1024",
            {"granularity": "week", "from": "2026-11-20T00:00:00Z", "to": "2026-11-21T00:00:00Z"},
            "granularity",
            "'hour' or 'day'",
        ),
        ("not a user!", {"from": "2026-11-20T00:00:00Z", "to": "2026-11-21T00:00:00Z"}, "user_id", "A-Z"),
    ],
)
def test_bad_report_queries_are_400_and_name_the_parameter(db, user_id, params, field, says):
    response = get_reports(user_id, **params)
    assert response.status == 400
    [problem] = response.body["details"]
    assert problem["field"] == field
    assert says in problem["message"]


def test_the_longest_allowed_ranges_are_accepted(db):
    month = {"from": "2026-10-01T00:00:00Z", "to": "2026-11-01T00:00:00Z"}
    year = {"granularity": "day", "from": "2025-01-01T00:00:00Z", "to": "2026-01-02T00:00:00Z"}
    assert get_reports(USER, **month).status == 200
    assert get_reports(USER, **year).status == 200


# --- rebuilding ----------------------------------------------------------------------------------------------


def test_rebuilding_one_user_recomputes_their_reports_from_source(db):
    key = provisioned("bottle-1")
    other = provisioned("bottle-2", {**SPEC, "user_id": "other"})
    post_events("bottle-1", key, {"events": [heartbeat(at(H8, 1)), opened(at(H8, 2)), closed(at(H10, 3), taken=2)]})
    post_events("bottle-2", other, {"events": [heartbeat(at(H8, 3))]})
    aggregate()
    expected = stored_reports(db)
    # A lost or outdated report: one deleted, one in an old shape with wrong counts, the day gone.
    hour_id, day_id = f"{USER}|{H8:%Y-%m-%dT%H}", f"{USER}|{DAY:%Y-%m-%d}"
    db[schema.USER_HOURLY_REPORTS].delete_one({"_id": f"{USER}|{H10:%Y-%m-%dT%H}", "user_id": USER})
    db[schema.USER_HOURLY_REPORTS].update_one(
        {"_id": hour_id, "user_id": USER}, {"$set": {"opened": 99, "legacy": True, "bottles.0.doses": 7}}
    )
    db[schema.USER_DAILY_REPORTS].delete_one({"_id": day_id, "user_id": USER})
    db[schema.USER_HOURLY_REPORTS].delete_one({"user_id": "other"})

    summary = rebuild_reports.rebuild(
        db,
        start=DAY,
        end=DAY + timedelta(days=1),
        user_id=USER,
        now=utc_now(),
        settings=get_settings(),
    )

    assert summary.hourly_written == 2
    assert summary.daily_written == 1
    restored = stored_reports(db)
    assert {k: v for k, v in restored.items() if "other" not in k} == {
        k: v for k, v in expected.items() if "other" not in k
    }
    assert db[schema.USER_HOURLY_REPORTS].count_documents({"user_id": "other"}) == 0  # only the user asked for


def test_rebuilding_everyone_from_scratch_gives_the_consumers_reports(db):
    keys = {b: provisioned(b, {**SPEC, "user_id": f"user-{b[-1]}"}) for b in ("bottle-1", "bottle-2")}
    for bottle_id, key in keys.items():
        post_events(bottle_id, key, {"events": [heartbeat(at(H8, 1)), opened(at(H8, 2)), heartbeat(at(H10, 4))]})
    aggregate()
    expected = stored_reports(db)
    clear_reports(db)

    rebuild_reports.rebuild(
        db,
        start=DAY - timedelta(days=1),
        end=DAY + timedelta(days=2),
        user_id=None,
        now=utc_now(),
        settings=get_settings(),
    )

    assert stored_reports(db) == expected
    assert len(expected) == 6  # two users, two hours and one day each


@pytest.fixture
def server_clock() -> Iterator[datetime]:
    """The server clock stopped two minutes before the end of a past hour."""
    stopped = hour_of(ago(hours=2)) + timedelta(minutes=58)
    instants.set_clock(lambda: stopped)
    yield stopped
    instants.set_clock(None)


def test_a_day_rolled_up_from_a_stale_read_does_not_overwrite_one_from_after_an_hour_was_deleted(db, monkeypatch):
    """Two roll-ups of one day: one reads the day's hours, then an hour is emptied and deleted and the other
    rolls the day up without it. The first, computed from what it read before, must not land on top."""
    day = day_of(ago(days=1))
    hours = db[schema.USER_HOURLY_REPORTS]
    for hour, stamp in ((1, 1), (2, 2)):
        entry: StoredEntry = {"bottle_id": "bottle-1", "medication": "Cordrazine", "heartbeats": 1}
        report = hourly_document(USER, day + timedelta(hours=hour), [entry], day + timedelta(days=1, seconds=stamp))
        hours.insert_one(report)
    policy = RetryPolicy(max_retries=0, base_ms=1)
    refresh_daily(db, {(USER, day)}, policy)
    real_load = aggregation._load_hourly_days
    deleted: list[Any] = []

    def deleted_meanwhile(*args: Any) -> Any:
        found = real_load(*args)
        if not deleted:  # the other roll-up, after the hour 02 went (as write_hourly deletes an emptied hour)
            deleted.append(hours.delete_one({"_id": hourly_id(USER, day + timedelta(hours=2)), "user_id": USER}))
            refresh_daily(db, {(USER, day)}, policy)
        return found

    monkeypatch.setattr(aggregation, "_load_hourly_days", deleted_meanwhile)
    refresh_daily(db, {(USER, day)}, policy)

    assert db[schema.USER_DAILY_REPORTS].find_one({"day": day})["heartbeats"] == 1


def test_a_heartbeat_dated_after_a_reassignment_moves_to_the_new_owner(db, server_clock, monkeypatch):
    set_setting(monkeypatch, "DAILY_ROLLUP_HOURS", "1")  # every pass rolls its hours' days up, whatever the hour
    key = provisioned("bottle-1")
    early, ahead = server_clock - timedelta(hours=3), server_clock + timedelta(minutes=3)  # a device clock ahead
    post_events("bottle-1", key, {"events": [heartbeat(early), heartbeat(ahead)]})
    aggregate()
    # `ahead`'s hour has not closed: the tally has not counted it for anyone yet.
    assert sum(r["heartbeats"] for r in daily(USER, start=day_of(early), days=2)) == 1

    # Reassigned at the server's HH:58, so the heartbeat dated (HH+1):01 is the new owner's.
    assert put_bottle("bottle-1", {**SPEC, "user_id": "newowner"}).status == 200
    instants.set_clock(lambda: server_clock + timedelta(minutes=5))
    post_events("bottle-1", key, heartbeat(ahead + timedelta(minutes=5)))  # the next 5-minute slot: another heartbeat
    aggregate(hours_later=2)

    span = {"start": early - timedelta(hours=1), "end": ahead + timedelta(hours=1)}
    assert [(r["hour"][:13], r["heartbeats"]) for r in hourly(USER, **span)] == [(f"{early:%Y-%m-%dT%H}", 1)]
    assert [(r["hour"][:13], r["heartbeats"]) for r in hourly("newowner", **span)] == [(f"{ahead:%Y-%m-%dT%H}", 2)]
    assert sum(r["heartbeats"] for r in daily(USER, start=day_of(early), days=2)) == 1
