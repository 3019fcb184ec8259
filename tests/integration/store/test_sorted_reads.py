"""Every read path of the app on a real server, with the queries it sends: each sorted read is served by the
index declared for it in shared/store/schema.py, exactly as Cosmos DB for MongoDB needs (the rule is in
tools/sort_audit.py). A sort Cosmos DB cannot serve from an index fails there, or costs a collection-wide
in-memory sort; here it fails the path's test. The autouse `sort_audit` fixture (tests/conftest.py) holds every
other SecantusDB test to the same rule."""

from datetime import timedelta
from typing import Any

import pytest

from functions import notifications as notification_functions
from shared.instants import format_instant, utc_now
from shared.notifications.documents import KINDS, Episode, record
from shared.reports import rebuild as rebuild_command
from shared.reports.feeds import REPORT_FEEDS
from shared.settings import Settings
from shared.store import schema
from shared.store.retries import RetryPolicy
from shared.store.schema import IndexSpec
from tests.api import SPEC, Response, ago, call_http, closed, heartbeat, iso, opened, post_events, provisioned
from tests.checking import sweep_all
from tests.report_client import aggregate, get_reports, run_round, set_setting
from tools.sort_audit import ID_INDEX, Query, SortAudit, serving_index

SPECS = schema.collection_specs(Settings())
USER = SPEC["user_id"]
_get_notifications = notification_functions.get_user_notifications


def sorted_reads(audit: SortAudit) -> set[tuple[str, str | None]]:
    """(collection, the index serving the sort; None: none does) of every sorted query sent."""
    return audit.sorted_reads(SPECS)


def finds_on(audit: SortAudit) -> set[str]:
    return {q.collection for q in audit.queries if q.command == "find"}


def get_notifications(**params: str) -> Response:
    return call_http(_get_notifications, "GET", f"/api/users/{USER}/notifications", {"user_id": USER}, params=params)


def ingest(hours_ago: float = 3) -> None:
    """A bottle of USER with a heartbeat, an opening and a dose within one UTC hour about `hours_ago`: the three
    events never straddle an hour boundary, whatever the wall clock says when the test runs."""
    key = provisioned("bottle-1")
    at = ago(hours=hours_ago).replace(minute=10, second=0, microsecond=0)
    response = post_events(
        "bottle-1",
        key,
        {"events": [heartbeat(at), opened(at + timedelta(minutes=1)), closed(at + timedelta(minutes=2))]},
    )
    assert response.status == 202, response.body


def polling_with_days_rolled_up_every_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """The polling source, and every tally pass rolling its hours' days up: with the default blocks of 6 hours,
    the day of events 3 hours ago has no roll-up yet while its block is open (03:00-06:10 UTC and the like)."""
    set_setting(monkeypatch, "CHANGE_SOURCE", "polling")
    set_setting(monkeypatch, "DAILY_ROLLUP_HOURS", "1")


# --- the rule -------------------------------------------------------------------------------------------------


def query(collection: str, *sort: tuple[str, int]) -> Query:
    return Query("find", "db", collection, {}, tuple(sort))


@pytest.mark.parametrize(
    ("asked", "served_by"),
    [
        (query(schema.NOTIFICATIONS, ("user_id", 1), ("feed_key", 1)), "user_feed"),
        (query(schema.NOTIFICATIONS, ("user_id", -1), ("feed_key", -1)), "user_feed"),  # walked backwards
        (query(schema.NOTIFICATIONS, ("user_id", 1), ("feed_key", -1)), None),  # half backwards
        (query(schema.NOTIFICATIONS, ("feed_key", -1)), None),  # the index's last field alone
        (query(schema.NOTIFICATIONS, ("user_id", 1)), None),  # its first field alone
        (query(schema.NOTIFICATIONS, ("feed_key", 1), ("user_id", 1)), None),  # out of order
        (query(schema.NOTIFICATIONS, ("created_at", 1)), None),
        (
            query(schema.NOTIFICATIONS, ("delivery", 1), ("kind", 1), ("created_at", 1), ("bucket", 1)),
            "delivery_pending",
        ),
        (query(schema.NOTIFICATIONS, ("delivery", 1), ("kind", 1), ("created_at", 1)), None),  # a prefix alone
        (query(schema.BOTTLE_ACTIONS, ("received_at", -1)), "received_at"),
        (query(schema.BOTTLE_ACTIONS, ("_id", -1)), ID_INDEX),
        (query(schema.BOTTLE_ACTIONS, ("received_at", 1), ("_id", 1)), None),
        (query(schema.LEASES, ("updated_at", 1)), None),
        (query("undeclared", ("_id", 1)), ID_INDEX),
        (query(schema.BOTTLES), ""),  # unsorted: needs no index
    ],
)
def test_a_sort_is_served_only_by_an_index_whose_keys_it_matches_exactly(asked: Query, served_by: str | None) -> None:
    assert serving_index(asked, SPECS) == served_by


def test_every_index_serves_its_own_key_order() -> None:
    indexes: list[tuple[str, IndexSpec]] = [(spec.name, index) for spec in SPECS for index in spec.indexes]
    for collection, index in indexes:
        assert serving_index(query(collection, *index.keys_for(cosmos=True)), SPECS) == index.name


# --- every read path on SecantusDB ----------------------------------------------------------------------------


@pytest.mark.integration
def test_get_notifications_with_and_without_filters_and_pages_reads_the_user_feed_index(
    real_db: Any, sort_audit: SortAudit
) -> None:
    start = utc_now() - timedelta(hours=5)
    for i, kind in enumerate(KINDS * 2):
        episode = Episode(f"b{i}", USER, "Cordrazine", kind, start)
        record(real_db, [episode], start + timedelta(minutes=10 * i), RetryPolicy())
    sort_audit.clear()

    everything = [n["id"] for n in get_notifications().body["notifications"]]
    first = get_notifications(limit="4").body
    second = get_notifications(limit="4", page=first["next_page"]).body
    since = get_notifications(since=iso(start + timedelta(minutes=30))).body["notifications"]
    late = get_notifications(kind="late_dose").body["notifications"]

    assert len(everything) == 6
    assert [n["id"] for n in first["notifications"] + second["notifications"]] == everything
    assert second["next_page"] is None
    assert [n["id"] for n in since] == everything[:3]  # the three newest, created 30 minutes or later
    assert [n["kind"] for n in late] == ["late_dose", "late_dose"]
    assert [n["created_at"] for n in late] == [format_instant(start + timedelta(minutes=m)) for m in (30, 0)]
    assert sorted_reads(sort_audit) == {(schema.NOTIFICATIONS, "user_feed")}


@pytest.mark.integration
def test_get_reports_by_hour_and_by_day_read_their_user_time_indexes(
    real_db: Any, sort_audit: SortAudit, monkeypatch: pytest.MonkeyPatch
) -> None:
    polling_with_days_rolled_up_every_pass(monkeypatch)
    ingest()
    aggregate()
    sort_audit.clear()
    day = ago(days=1)

    hours = get_reports(USER, granularity="hour", **{"from": iso(day), "to": iso(utc_now())})
    days = get_reports(USER, granularity="day", **{"from": iso(day), "to": iso(utc_now())})

    assert hours.status == days.status == 200
    assert sum(r["closed"] for r in hours.body["reports"]) == sum(r["closed"] for r in days.body["reports"]) == 1
    assert sorted_reads(sort_audit) == {
        (schema.USER_HOURLY_REPORTS, "user_hour"),
        (schema.USER_DAILY_REPORTS, "user_day"),
    }


@pytest.mark.integration
def test_the_checks_sweeps_and_pending_delivery_read_only_through_their_indexes(
    real_db: Any, sort_audit: SortAudit
) -> None:
    key = provisioned("bottle-1", {**SPEC, "schedule": {"every_hours": 1}, "grace_minutes": 1})
    assert post_events("bottle-1", key, {"events": [heartbeat(ago(minutes=3)), opened(ago(minutes=2))]}).status == 202
    sort_audit.clear()
    later = utc_now() + timedelta(hours=1, minutes=30)  # one late slot, silent, left open
    sent: list[str] = []

    runs = {kind: sweep_all(real_db, kind, now=later, send=sent.append) for kind in KINDS}

    assert [(kind, run.notified, run.queued) for kind, run in runs.items()] == [(kind, 1, 1) for kind in KINDS]
    assert len(sent) == 3
    assert {schema.BOTTLES, schema.BOTTLE_HEARTBEATS, schema.NOTIFICATIONS} <= finds_on(sort_audit)
    assert sorted_reads(sort_audit) == {(schema.NOTIFICATIONS, "delivery_pending")}


@pytest.mark.integration
def test_the_report_consumer_polling_reads_each_feed_by_its_time_index(
    real_db: Any, sort_audit: SortAudit, monkeypatch: pytest.MonkeyPatch
) -> None:
    polling_with_days_rolled_up_every_pass(monkeypatch)
    ingest()
    sort_audit.clear()

    first = run_round(real_db)
    again = run_round(real_db)

    assert first.hourly_written >= 1
    assert first.daily_written >= 1
    assert again.caught_up
    # The actions by their receive time; the tally's heartbeat documents by (user bucket, user).
    assert sorted_reads(sort_audit) == {(schema.BOTTLE_ACTIONS, "received_at"), (schema.BOTTLE_HEARTBEATS, "tally")}


@pytest.mark.integration
def test_the_report_consumer_on_change_streams_sorts_only_while_it_recovers_by_polling(
    real_db: Any, sort_audit: SortAudit, monkeypatch: pytest.MonkeyPatch
) -> None:
    set_setting(monkeypatch, "CHANGE_SOURCE", "change_stream")
    ingest()
    sort_audit.clear()

    first = run_round(real_db)
    recovering = sorted_reads(sort_audit)
    sort_audit.clear()
    assert post_events("bottle-2", provisioned("bottle-2"), opened(ago(minutes=5))).status == 202
    resumed = run_round(real_db)

    assert first.recovered == [schema.BOTTLE_ACTIONS]  # no saved position yet: the feed catches up by polling
    assert first.hourly_written >= 1
    assert recovering == {(schema.BOTTLE_ACTIONS, "received_at"), (schema.BOTTLE_HEARTBEATS, "tally")}
    assert resumed.recovered == []
    assert resumed.changes >= 1
    streams = {q.collection for q in sort_audit.queries if q.command == "aggregate"}
    assert streams == {feed.collection for feed in REPORT_FEEDS if not feed.hourly}
    assert sorted_reads(sort_audit) == set()  # resumed from tokens, no tally pass due: no sorted read at all


@pytest.mark.integration
@pytest.mark.parametrize("who", [["--user", USER], ["--all"]])
def test_the_rebuild_command_pages_its_sources_by_id(
    real_db: Any, secantus_uri: str, sort_audit: SortAudit, who: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    ingest()
    sort_audit.clear()

    rebuild_command.main(
        [*who, "--from", iso(ago(days=1)), "--to", iso(utc_now()), "--uri", secantus_uri, "--database", real_db.name]
    )

    assert "read 3 source documents" in capsys.readouterr().out  # the 2 actions and the heartbeat document
    assert real_db[schema.USER_HOURLY_REPORTS].count_documents({"user_id": USER}) == 1
    assert sorted_reads(sort_audit) == {(schema.BOTTLE_ACTIONS, ID_INDEX), (schema.BOTTLE_HEARTBEATS, ID_INDEX)}
