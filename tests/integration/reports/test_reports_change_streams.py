"""The report consumer on a real server (SecantusDB) with real change streams: ingest through the HTTP functions,
aggregate, read; a crash between the writes and the checkpoint; a restart that resumes from the saved token;
a rejected token; both change sources; and what a page costs in database commands."""

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pymongo import MongoClient

from shared import instants
from shared.consumers import plugged
from shared.feeds import worker
from shared.feeds.partitions import Partition
from shared.instants import utc_now
from shared.reports import rebuild as rebuild_reports
from shared.reports.feeds import ACTIONS_FEED
from shared.settings import get_settings
from shared.store import client as store
from shared.store import schema
from shared.store.partitioning import BucketRange
from shared.store.retries import StoreUnavailable
from tests.api import SPEC, ago, closed, heartbeat, opened, post_events, provisioned, put_bottle
from tests.report_client import (
    Round,
    aggregate,
    clear_reports,
    get_reports,
    played_report_day,
    run_round,
    set_setting,
    stored_reports,
)

pytestmark = pytest.mark.integration

USER = SPEC["user_id"]
# A day whose 08:00 and 09:00 are past, and within the last 48 hours (the window below): made for each test.
DAY = H8 = H9 = datetime.min.replace(tzinfo=UTC)


@pytest.fixture(autouse=True)
def report_day() -> None:
    """The day these tests report on and its hours, as this test starts (tests/report_client.py)."""
    global DAY, H8, H9  # noqa: PLW0603 - the tests read them as the module's constants
    DAY = played_report_day()
    H8, H9 = DAY + timedelta(hours=8), DAY + timedelta(hours=9)


@pytest.fixture(autouse=True)
def change_streams(monkeypatch: pytest.MonkeyPatch) -> None:
    set_setting(monkeypatch, "CHANGE_SOURCE", "change_stream")
    set_setting(monkeypatch, "HEARTBEAT_WINDOW_HOURS", "48")


def at(hour: Any, minutes: float) -> Any:
    return hour + timedelta(minutes=minutes)


def run(*, hours_later: float = 0) -> Round:
    return run_round(store.get_database(), hours_later=hours_later)


def tallied() -> None:
    """The heartbeat tally's next pass, an hour on: it counts the heartbeats that arrived late since its last."""
    assert not run(hours_later=1).failed


def tokens(db: Any) -> dict[str, Any]:
    return {lease["_id"]: lease["token"] for lease in db[schema.LEASES].find()}


def from_scratch(db: Any) -> dict[str, Any]:
    """The reports a rebuild of everything from source gives (the store's reports are put back after)."""
    saved = {name: list(db[name].find()) for name in (schema.USER_HOURLY_REPORTS, schema.USER_DAILY_REPORTS)}
    clear_reports_only(db)
    rebuild_reports.rebuild(
        db,
        start=DAY - timedelta(days=1),
        end=utc_now() + timedelta(days=1),
        user_id=None,
        now=utc_now(),
        settings=get_settings(),
    )
    rebuilt = stored_reports(db)
    clear_reports_only(db)
    for name, docs in saved.items():
        if docs:
            db[name].insert_many(docs)
    return rebuilt


def clear_reports_only(db: Any) -> None:
    for name in (schema.USER_HOURLY_REPORTS, schema.USER_DAILY_REPORTS):
        db[name].delete_many({})


def history_part_one(keys: dict[str, str]) -> None:
    post_events("bottle-1", keys["bottle-1"], {"events": [heartbeat(at(H8, 1)), opened(at(H8, 2)), closed(at(H8, 3))]})
    post_events("bottle-2", keys["bottle-2"], {"events": [heartbeat(at(H8, 5)), heartbeat(at(H9, 5))]})


def history_part_two(keys: dict[str, str]) -> None:
    post_events("bottle-1", keys["bottle-1"], {"events": [heartbeat(at(H9, 1)), closed(at(H9, 40), taken=3)]})
    post_events("bottle-2", keys["bottle-2"], {"events": [heartbeat(at(H8, 35)), opened(at(H8, 36))]})  # late


def two_bottles() -> dict[str, str]:
    return {
        "bottle-1": provisioned("bottle-1"),
        "bottle-2": provisioned("bottle-2", {**SPEC, "medication": "Ryetalyn"}),
    }


def test_ingested_events_become_reports_read_through_the_api(real_db):
    keys = two_bottles()
    history_part_one(keys)
    history_part_two(keys)

    aggregate()

    response = get_reports(USER, **{"from": H8.isoformat(), "to": (H9 + timedelta(hours=1)).isoformat()})
    assert response.status == 200
    assert [(r["hour"][11:13], r["opened"], r["closed"], r["pills_taken"], r["heartbeats"]) for r in response.body[
        "reports"]] == [("08", 2, 1, 1, 3), ("09", 0, 1, 3, 2)]  # fmt: skip
    days = get_reports(
        USER, granularity="day", **{"from": DAY.isoformat(), "to": (DAY + timedelta(days=1)).isoformat()}
    )
    assert [(d["opened"], d["closed"], d["pills_taken"], d["heartbeats"]) for d in days.body["reports"]] == [
        (2, 2, 4, 5)
    ]
    assert all(lease["token"] for lease in real_db[schema.LEASES].find({"feed": ACTIONS_FEED.key}))
    assert stored_reports(real_db) == from_scratch(real_db)


def test_a_page_written_but_not_checkpointed_is_aggregated_again_with_the_same_result(real_db, monkeypatch):
    keys = two_bottles()
    history_part_one(keys)
    assert not run().failed
    checkpointed = tokens(real_db)
    history_part_two(keys)

    def die(*args: Any, **kwargs: Any) -> None:
        raise StoreUnavailable("the worker died after the writes, before the checkpoint", retry_after_s=1)

    with monkeypatch.context() as patched:
        patched.setattr(worker, "checkpoint", die)
        written_before = stored_reports(real_db, with_updated_at=True)
        crashed = run()
    assert crashed.failed
    assert stored_reports(real_db, with_updated_at=True) != written_before  # written, not checkpointed
    assert tokens(real_db) == checkpointed  # the position still points before the page
    written = stored_reports(real_db, with_updated_at=True)

    again = run()

    assert again.recovered == []  # resumed from the saved tokens: the page is replayed, not rebuilt
    assert again.changes > 0
    assert again.hourly_written == 0  # replaying the page writes nothing new
    assert stored_reports(real_db, with_updated_at=True) == written
    assert tokens(real_db) != checkpointed
    tallied()
    assert stored_reports(real_db) == from_scratch(real_db)


def test_after_a_restart_the_consumer_resumes_from_its_saved_tokens(real_db, secantus_uri):
    keys = two_bottles()
    history_part_one(keys)
    first = run()
    assert first.recovered == [schema.BOTTLE_ACTIONS]
    history_part_two(keys)

    restarted: MongoClient[Any] = store.create_client(secantus_uri)  # a new worker process: a new client
    store.use_client(restarted)
    try:
        second = run()
    finally:
        restarted.close()
        store.use_client(real_db.client)

    assert second.recovered == []
    assert second.changes == 2  # only the new changes, the two actions: nothing from before the restart
    tallied()
    assert stored_reports(real_db) == from_scratch(real_db)


@pytest.mark.parametrize("token", [{"_data": "00"}, {"_data": "not hex"}, {"_data": "82" + "ab" * 30}])
def test_a_rejected_resume_token_rebuilds_from_the_checkpoint_time_and_says_so(real_db, caplog, token):
    keys = two_bottles()
    history_part_one(keys)
    run()
    real_db[schema.LEASES].update_many({}, {"$set": {"token": token}})
    history_part_two(keys)

    with caplog.at_level(logging.WARNING, logger="shared.feeds.sources"):
        summary = run()

    assert summary.recovered == [schema.BOTTLE_ACTIONS]
    assert not summary.failed
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == get_settings().reports_partitions  # one per partition of the actions' feed
    assert all("was rejected" in w and "recovering from its checkpoint time" in w for w in warnings)
    tallied()
    assert stored_reports(real_db) == from_scratch(real_db)
    actions_leases = real_db[schema.LEASES].find({"feed": ACTIONS_FEED.key})
    assert all(lease["token"] not in (None, token) for lease in actions_leases)
    assert run().recovered == []  # and carries on from the new stream


@pytest.mark.usefixtures("mid_hour")
def test_change_streams_and_polling_give_identical_reports(real_db, monkeypatch):
    set_setting(monkeypatch, "DAILY_ROLLUP_HOURS", "1")  # every pass rolls its hours' days up, whatever the hour
    keys = two_bottles()
    history_part_one(keys)
    aggregate()
    assert put_bottle("bottle-2", {**SPEC, "user_id": "newowner"}).status == 200
    history_part_two(keys)
    now = utc_now().replace(microsecond=0)
    post_events("bottle-2", keys["bottle-2"], {"events": [heartbeat(now + timedelta(seconds=2)), opened(ago(hours=1))]})
    # The tally's next pass: the late heartbeats, and the hour of `now` (due 10 minutes after it ends: an hour
    # and a half on, whatever the minute `now` is).
    aggregate(hours_later=1.5)
    by_change_streams = stored_reports(real_db)

    clear_reports(real_db)
    set_setting(monkeypatch, "CHANGE_SOURCE", "polling")
    aggregate(hours_later=1.5)

    assert stored_reports(real_db) == by_change_streams
    assert stored_reports(real_db) == from_scratch(real_db)
    assert any(doc["user_id"] == "newowner" for doc in real_db[schema.USER_HOURLY_REPORTS].find())


# --- cost ---------------------------------------------------------------------------------------------------


def test_a_page_costs_the_same_commands_whatever_its_number_of_changes(counted):
    db, counter = counted
    key = provisioned("bottle-1")
    post_events("bottle-1", key, heartbeat(at(H8, 0)))
    run()  # the first run builds from the start: measure steady-state pages after it
    costs = []
    for size, hour in ((2, H9), (100, H9 + timedelta(hours=1))):  # each a new user-hour
        events = [opened(at(hour, i * 0.5)) if i % 2 else closed(at(hour, i * 0.5)) for i in range(size)]
        post_events("bottle-1", key, {"events": events})
        counter.reset()
        summary = run()
        assert summary.changes == size  # the actions (the tally has no hour due)
        costs.append(sorted(counter.writes))
    assert costs[0] == costs[1]
    reports = [write for write in costs[1] if write[1] != schema.LEASES]
    claims = [write for write in costs[1] if write == ("findAndModify", schema.LEASES)]
    lease_updates = [write for write in costs[1] if write == ("update", schema.LEASES)]
    partitions = get_settings().reports_partitions  # the actions' feed's
    # One bulk write of the user-hour for the page of actions; its day has closed, so one of the day too.
    assert reports == [("insert", schema.USER_HOURLY_REPORTS), ("update", schema.USER_DAILY_REPORTS)]
    # Per partition: a dispatch mark, a claim and a release; a checkpoint after the page, and at most one more
    # per partition whose idle stream moved.
    assert len(claims) == partitions
    assert 2 * partitions + 1 <= len(lease_updates) <= 3 * partitions + 1
    assert db[schema.USER_HOURLY_REPORTS].find_one({"hour": H9 + timedelta(hours=1)})["opened"] == 50


def test_a_tally_pass_reads_only_the_user_hours_it_counts_not_the_window(counted, monkeypatch):
    set_setting(monkeypatch, "DAILY_ROLLUP_HOURS", "1")
    db, counter = counted
    clock = [datetime(2026, 11, 20, 0, 10, tzinfo=UTC)]
    instants.set_clock(lambda: clock[0])
    try:
        key = provisioned("bottle-1")
        # Back from two days offline: 94 buffered heartbeats, the bottle's whole window, uploaded at once.
        window = [clock[0] - timedelta(minutes=30 * k) for k in range(94)]
        post_events("bottle-1", key, {"events": [heartbeat(moment) for moment in window]})
        clock[0] += timedelta(minutes=10)
        run()  # 00:20: the first pass counts every closed hour of the window (46.5 hours, over 47 clock hours)
        assert db[schema.USER_HOURLY_REPORTS].count_documents({}) == 47

        for minutes in (10, 10):  # prompt heartbeats at 00:30 and 00:40
            clock[0] += timedelta(minutes=minutes)
            post_events("bottle-1", key, heartbeat(clock[0]))
            run()  # the hour has not closed: nothing to count
        clock[0] = datetime(2026, 11, 20, 1, 15, tzinfo=UTC)
        counter.reset()
        run()
    finally:
        instants.set_clock(None)

    # The hour is new (nothing to merge into), and its day's roll-up reads it back: one user-hour read, not the
    # 47 of the window.
    assert counter.documents_read[("find", schema.USER_HOURLY_REPORTS)] == 1
    hour = db[schema.USER_HOURLY_REPORTS].find_one({"hour": datetime(2026, 11, 20, 0, tzinfo=UTC)})
    assert hour["heartbeats"] == 3  # 00:10, 00:30 and 00:40
    assert db[schema.USER_DAILY_REPORTS].find_one({"day": datetime(2026, 11, 20, tzinfo=UTC)})["heartbeats"] == 3


def test_the_rebuild_command_restores_a_users_reports(real_db, secantus_uri, capsys):
    keys = two_bottles()
    history_part_one(keys)
    history_part_two(keys)
    aggregate()
    expected = stored_reports(real_db)
    clear_reports_only(real_db)
    window = ["--from", DAY.isoformat(), "--to", (DAY + timedelta(days=1)).isoformat()]

    rebuild_reports.main(["--user", USER, *window, "--uri", secantus_uri, "--database", real_db.name])

    assert stored_reports(real_db) == expected
    assert capsys.readouterr().out.startswith("read 6 source documents;")  # 4 actions, 2 heartbeat documents


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--user", "u", "--from", "2026-11-02T00:00:00Z", "--to", "2026-11-01T00:00:00Z"], "later than --from"),
        (["--user", "u", "--from", "2026-11-01", "--to", "2026-11-02T00:00:00Z"], "no UTC offset"),
        (["--from", "2026-11-01T00:00:00Z", "--to", "2026-11-02T00:00:00Z"], "one of the arguments --user --all"),
    ],
)
def test_the_rebuild_command_rejects_a_bad_range_or_scope(argv, says, capsys):
    with pytest.raises(SystemExit) as exit_info:
        rebuild_reports.main([*argv, "--uri", "mongodb://127.0.0.1:1/"])
    assert exit_info.value.code == 2
    assert says in capsys.readouterr().err


def test_a_caught_up_partition_ends_its_run_though_other_writes_move_its_token(real_db, monkeypatch):
    """An empty getMore on MongoDB still moves the stream's token (its postBatchResumeToken) past whatever else
    was written meanwhile: other partitions' documents, other collections. A partition with nothing new must
    end its run there, not poll its stream every 20 ms until its whole time budget is spent, every run."""
    set_setting(monkeypatch, "REPORTS_PARTITIONS", "2")
    run()  # positions the streams
    partition = Partition(ACTIONS_FEED, 0, 2)
    elsewhere = BucketRange(1, 2).low
    seconds = [0]

    def clock() -> int:  # a second a call; meanwhile the rest of the fleet writes
        real_db[schema.BOTTLE_ACTIONS].insert_one({"bucket": elsewhere, "received_at": utc_now()})
        seconds[0] += 1
        return seconds[0]

    idle = plugged.process_partition(real_db, partition, now=utc_now(), settings=get_settings(), clock=clock)

    assert idle.caught_up
    assert seconds[0] < 10
