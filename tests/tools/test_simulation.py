"""The fleet simulation, end to end: what it injects is exactly what the app notifies, and every event
sent is accounted for; and the same traffic over real HTTP against the local server."""

import pytest

from shared.settings import get_settings
from tools.fleet import make_fleet, plan_fleet
from tools.local_host import LocalHost
from tools.serve import LocalServer
from tools.simulate.in_process import SIMULATION_START, run_simulation
from tools.simulate.over_http import run_over_http

pytestmark = pytest.mark.integration


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
    # Two check partitions, swept side by side: each check run costs a few commands per partition on the embedded
    # store, and this run has thousands (./dev simulate runs the default four).
    monkeypatch.setenv("CHECK_PARTITIONS", "2")
    get_settings.cache_clear()
    result = run_simulation(
        bottles=16,
        users=4,
        days=1.5,
        seed=11,
        mongodb_uri=None,
        progress=False,
        archive_dir=tmp_path / "archive",
    )

    assert sum(s.expected for s in result.scores.values()) > 0, "the plan injected no trouble"
    for kind, score in result.scores.items():
        assert (score.precision, score.recall) == (1.0, 1.0), (kind, result.misses, result.extras)
    tally = result.tally
    assert tally.stored + tally.duplicates + tally.expired + tally.rejected == tally.sent
    assert tally.rejected == sum(r.event_count for r in result.plan.requests if r.kind == "invalid")
    assert tally.duplicates >= sum(r.event_count for r in result.plan.requests if r.kind == "retry")
    assert result.queue_messages == len([n for n in result.notifications if n.get("kind")])
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


def stored(archive, name):
    found = archive.read(name)
    assert found is not None
    return found.data


def test_a_tampered_archive_fails_the_simulation_s_verdict(registered_functions, tmp_path):
    """An event dropped from the archive and a heartbeat slot changed in it are found, each named, and fail the
    run's verdict (./dev simulate then exits 1)."""
    from shared.archive import parquet
    from shared.archive.current import get_archive

    def drop_an_event_and_change_a_slot(db):
        archive = get_archive(get_settings())
        assert archive is not None
        name = archive.names("actions/")[0]
        archive.write(name, parquet.encode_actions(parquet.decode(stored(archive, name))[1:]))
        name = archive.names("heartbeats/")[-1]
        rows = parquet.decode(stored(archive, name))
        rows[0]["slots"] = [minute for minute in range(0, 60, 5) if minute not in rows[0]["slots"]][:1]
        archive.write(name, parquet.encode_heartbeats(rows))

    tampered = run_simulation(
        bottles=6,
        users=2,
        days=0.5,
        seed=5,
        mongodb_uri=None,
        progress=False,
        archive_dir=tmp_path / "archive",
        tamper=drop_an_event_and_change_a_slot,
    )

    assert tampered.archive_check is not None
    problems = tampered.archive_check.problems
    assert [p for p in problems if p.startswith("event missing")], problems
    assert [p for p in problems if p.startswith("bottle-hour ") and ": ring " in p], problems
    assert len(problems) == 2, problems
    assert tampered.failures() == ["the archive differs from the source in 2 ways"]
