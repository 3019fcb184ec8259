"""The fleet simulation, end to end: what it injects is exactly what the app notifies, and every event
sent is accounted for; and the same traffic over real HTTP against the local server. The simulation's verdict
on a tampered archive is held on an archive the app's own sweeps wrote, without a simulation."""

import json
from collections import Counter
from datetime import datetime, timedelta
from typing import Any

import pytest

from shared.archive import parquet
from shared.archive.current import use_archive
from shared.archive.storage import Archive, FolderArchive
from shared.bottles.provisioning import provision
from shared.bottles.spec import BottleSpec
from shared.consumers.plugged import dispatch, partition_of, process_partition
from shared.ingestion.receive import receive
from shared.instants import set_clock
from shared.reports.tally import counted_from
from shared.settings import Settings, get_settings
from tests.fake_time import QUIET_HOUR
from tools.fleet import Plan, make_fleet, plan_fleet
from tools.local_host import LocalHost
from tools.serve import LocalServer
from tools.simulate.in_process import SIMULATION_START, check_simulated_archive, run_simulation
from tools.simulate.over_http import run_over_http
from tools.simulate.result import ReportCheck, SimulationResult, Tally
from tools.simulate.scoring import KINDS

pytestmark = pytest.mark.integration

MINUTE = timedelta(minutes=1)
HOUR = timedelta(hours=1)


def test_the_plan_is_deterministic_for_a_seed():
    import random

    def plan(seed):
        rng = random.Random(seed)
        return plan_fleet(rng, make_fleet(rng, 20, 5), SIMULATION_START, 1)

    first, again, other = plan(3), plan(3), plan(4)
    assert first.requests == again.requests
    assert first.expected == again.expected
    assert first.requests != other.requests


def test_simulated_days_notify_exactly_the_injected_trouble(registered_functions, monkeypatch, tmp_path):
    """30 simulated hours of 16 bottles, from 28 March 2026 05:00 UTC across Europe's spring DST change (01:00 UTC
    on the 29th) to past the first European doses after it, into the second day (its daily report). Seed 13 injects
    every kind of trouble (a late dose taken late, one missed on a times schedule and one on an every-hours
    schedule, a bottle left open, a bottle silent for hours that then uploads its buffered events), and devices
    retry requests and send invalid ones: each episode must be notified exactly once, nothing else notified, and
    every event sent accounted for.

    The checks run less often than the app's defaults, each still often enough to see every episode, and the long
    ones many times (so that a second notification would show): the left-open check every 5 minutes (a bottle is
    left open for 10 to 20 minutes, past the limit of 5: seen one to three times), the silent check every 15 (a
    bottle is offline for 2.5 to 3.5 hours, past the limit of 60 minutes); the late-dose check keeps its 5 minutes
    (a late dose is taken 15 to 40 minutes after its grace ends; a missed one stays late). The report dispatcher
    runs every 30 minutes rather than the simulation's 10 (nothing here reads the reports sooner). A timer's run
    costs about the same whatever it finds: fewer runs are most of what this run saves."""
    # Two check partitions, swept side by side (./dev simulate runs the default four).
    monkeypatch.setenv("CHECK_PARTITIONS", "2")
    monkeypatch.setenv("CHECK_OPEN_BOTTLES_SCHEDULE", "0 */5 * * * *")
    monkeypatch.setenv("CHECK_SILENT_BOTTLES_SCHEDULE", "0 */15 * * * *")
    monkeypatch.setenv("REPORTS_SCHEDULE", "0 */30 * * * *")
    get_settings.cache_clear()
    result = run_simulation(
        bottles=16,
        users=4,
        days=1.25,
        seed=13,
        mongodb_uri=None,
        progress=False,
        archive_dir=tmp_path / "archive",
    )

    assert {kind: score.expected > 0 for kind, score in result.scores.items()} == dict.fromkeys(KINDS, True)
    for kind, score in result.scores.items():
        assert (score.precision, score.recall) == (1.0, 1.0), (kind, result.misses, result.extras)
    notified = [(n["bottle_id"], n["kind"], n["episode_start"]) for n in result.notifications if n.get("kind")]
    assert [episode for episode, times in Counter(notified).items() if times > 1] == []
    tally = result.tally
    assert tally.stored + tally.duplicates + tally.expired + tally.rejected == tally.sent
    assert tally.rejected == sum(r.event_count for r in result.plan.requests if r.kind == "invalid") > 0
    assert tally.duplicates >= sum(r.event_count for r in result.plan.requests if r.kind == "retry") > 0
    assert result.queue_messages == len(notified)
    assert result.daily_report is not None
    assert result.daily_report["heartbeats"] > 0
    # Every user-hour the reports can be checked for says what the source says.
    assert result.report_check.user_hours >= 4 * 24
    assert result.report_check.mismatches == []
    # Every event stored is in the archive once, every bottle-hour the rings hold with the ring's slots.
    assert result.archive_check is not None
    assert result.archive_check.ok, result.archive_check.problems
    assert result.archive_check.events > 50
    assert result.archive_check.bottle_hours >= 16 * 24
    assert result.failures() == []


# Seconds of traffic through the local server: the days the other simulations play on their own clocks go through
# every hour, day and block end; this one's clock runs from a fixed quiet hour.
@pytest.mark.own_clock(QUIET_HOUR)
def test_device_traffic_over_http_against_the_local_server(real_db, registered_functions):
    server = LocalServer(LocalHost.load(), ("127.0.0.1", 0), timers=False)
    server.start()
    try:
        tally = run_over_http(
            server.base_url, bottles=6, users=2, minutes=0.1, heartbeat_seconds=1, seed=5, progress=False
        )
    finally:
        server.stop()

    assert tally.requests > 20
    assert set(tally.statuses) <= {202, 400}
    assert tally.stored > 0
    assert tally.stored + tally.duplicates + tally.expired + tally.rejected == tally.sent


def test_a_run_too_short_for_any_traffic_still_ends_with_its_report(registered_functions):
    result = run_simulation(
        bottles=1,
        users=1,
        days=0.0005,
        seed=1,
        mongodb_uri=None,
        progress=False,
    )

    assert result.tally.requests == 0
    assert result.timer_runs == {"aggregate_reports": 1}


# --- the verdict on the archive ----------------------------------------------------------------------------------


def dispatch_and_work(db: Any, now: Any, settings: Settings) -> None:
    """One run of the report dispatcher at `now` and a run of each work message it sent."""
    messages: list[str] = []
    dispatch(db, now=now, settings=settings, send=messages.extend, on_cosmos=False)
    for body in messages:
        process_partition(db, partition_of(json.loads(body)), now=now, settings=settings)


def archived_hours(db: Any, archive: Archive) -> None:
    """Two bottles of two users through three hours from SIMULATION_START (a heartbeat every 30 minutes, a dose an
    hour), the report dispatcher every 30 minutes and once more when the last hour has been counted, as the
    simulation runs it: the app's sweeps write the archive."""
    use_archive(archive)
    settings = Settings(change_source="polling", reports_tally_spread_minutes=0)
    spec = BottleSpec(user_id="user-0", medication="med", schedule={"every_hours": 12})
    keys = {}
    for n in range(2):
        bottle = spec.model_copy(update={"user_id": f"user-{n}"})
        keys[f"b{n}"] = provision(db, f"b{n}", bottle, rotate_key=False, now=SIMULATION_START, settings=settings)

    def send(n: int, *events: dict[str, Any], now: datetime) -> None:
        body = json.dumps({"events": list(events)}).encode()
        receive(db, f"b{n}", keys[f"b{n}"].device_key or "", body, now=now, settings=settings)

    now = SIMULATION_START
    for step in range(6):
        now = SIMULATION_START + step * 30 * MINUTE
        for n in range(2):
            send(n, event("heartbeat", now + n * MINUTE), now=now + n * MINUTE)
            if step % 2 == n:
                opened, closed = now + 10 * MINUTE, now + 11 * MINUTE
                send(n, event("opened", opened), event("closed", closed), now=closed)
        dispatch_and_work(db, now + 15 * MINUTE, settings)
    dispatch_and_work(db, counted_from(now + 15 * MINUTE), settings)


def event(kind: str, at: datetime) -> dict[str, Any]:
    if kind == "heartbeat":
        return {"type": kind, "time": at.isoformat()}
    readings = {"number_of_pills": 30, "mass_of_contents": 15.0}
    return {"type": kind, "time": at.isoformat(), **readings, **({"pills_taken": 1} if kind == "closed" else {})}


def stored(archive: Archive, name: str) -> bytes:
    found = archive.read(name)
    assert found is not None
    return found.data


def drop_an_event_and_change_a_slot(archive: Archive) -> None:
    name = archive.names("actions/")[0]
    archive.write(name, parquet.encode_actions(parquet.decode(stored(archive, name))[1:]))
    name = archive.names("heartbeats/")[-1]
    rows = parquet.decode(stored(archive, name))
    rows[0]["slots"] = [minute for minute in range(0, 60, 5) if minute not in rows[0]["slots"]][:1]
    archive.write(name, parquet.encode_heartbeats(rows))


def failures_with(archive_check: Any) -> list[str]:
    """The verdict of a run whose only finding is `archive_check`."""
    result = SimulationResult(
        plan=Plan(start=SIMULATION_START, end=SIMULATION_START, bottles=[]),
        tally=Tally(),
        scores={},
        misses=[],
        extras=[],
        queue_messages=0,
        notifications=[],
        device_seconds=0.0,
        timer_seconds={},
        timer_runs=Counter(),
        commands_per_event=0.0,
        daily_report=None,
        report_check=ReportCheck(1, None, []),
        settings_used="",
        archive_check=archive_check,
    )
    return result.failures()


def test_a_tampered_archive_fails_the_simulation_s_verdict(mock_db, tmp_path):
    """An event dropped from the archive and a heartbeat slot changed in it are found by the simulation's check of
    its archive (check_simulated_archive, which a run calls after its last step), each named, and fail the run's
    verdict (./dev simulate then exits 1). The verdict reads only the store and the archive, so the archive here is
    the one the app's own dispatcher and workers wrote for a few hours on mongomock, not a simulation's (the test
    above holds that a whole simulated run's archive passes the same check)."""
    archive = FolderArchive(tmp_path / "archive")
    set_clock(lambda: SIMULATION_START + 5 * HOUR)  # the store expires its documents by the app's clock
    try:
        archived_hours(mock_db, archive)
        clean = check_simulated_archive(mock_db)
        drop_an_event_and_change_a_slot(archive)
        tampered = check_simulated_archive(mock_db)
    finally:
        set_clock(None)

    assert clean.ok, clean.problems
    assert (clean.events, clean.bottle_hours) == (12, 6)
    assert failures_with(clean) == []

    problems = tampered.problems
    assert [p for p in problems if p.startswith("event missing")], problems
    assert [p for p in problems if p.startswith("bottle-hour ") and ": ring " in p], problems
    assert len(problems) == 2, problems
    assert failures_with(tampered) == ["the archive differs from the source in 2 ways"]
