"""The checks benchmarks run (on tiny fleets) and show what they are for: a sweep's commands follow the bottles in
trouble, not the fleet, and are far fewer than the per-bottle approach's; and a partition's sweep is one query,
where one query per bucket would be 1,024."""

import pytest

from benchmarks import sweep_queries
from benchmarks.checks import runs as checks
from benchmarks.checks.runs import Fleet, run

pytestmark = pytest.mark.integration


def test_the_benchmark_table_shows_sweeps_that_do_not_grow_with_the_fleet(capsys):
    table = run([Fleet(300, 3), Fleet(900, 9, baseline=(), then_in_trouble=3)])

    rows = [line.split("  ") for line in table.splitlines()[3:]]
    cells = [[cell.strip() for cell in row if cell.strip()] for row in rows]
    sweeps = {(c[0], c[1], c[2]): int(c[4]) for c in cells if c[3] == "indexed sweep (app)"}
    per_bottle = {(c[0], c[1]): int(c[4].replace(",", "")) for c in cells if c[3] == "per bottle (seeds)"}
    for kind in ("late_dose", "left_open", "silent"):
        assert sweeps[(kind, "300", "3")] == sweeps[(kind, "900", "3")]
        # A sweep's commands: a few per partition (CHECK_PARTITIONS, 4), whatever the fleet.
        assert per_bottle[(kind, "300")] > 300 > 10 * sweeps[(kind, "300", "3")]
    assert "Notification checks" in capsys.readouterr().out


def test_the_sweep_queries_benchmark_compares_one_query_per_partition_with_one_per_bucket(capsys):
    table = sweep_queries.run([300], repeats=1)

    rows = [[cell.strip() for cell in line.split("  ") if cell.strip()] for line in table.splitlines()[3:]]
    by_query = {row[1]: row for row in rows}
    assert by_query["one query per partition (app)"][2] == "4"  # CHECK_PARTITIONS queries
    assert by_query["one query per bucket"][2] == "1,024"  # one per bucket of every partition
    assert {row[4] for row in rows} == {"3"}  # every shape finds the same silent bottles
    assert "4 partitions over 1024 buckets" in capsys.readouterr().out


def test_the_morning_peak_table_sends_and_marks_every_notification_both_ways(capsys):
    table = checks.peak(120, send_ms=1)

    rows = [[cell.strip() for cell in line.split("  ") if cell.strip()] for line in table.splitlines()[3:]]
    assert [row[0] for row in rows] == ["one after another (before)", "8 at once (app)"]
    assert all(row[1:4] == ["120", "120", "120"] for row in rows)  # pending, sent, marked
    assert "sends/s per worker" in capsys.readouterr().out


def test_fleets_and_the_peak_are_seeded_through_a_client_without_the_apps_request_timeouts(monkeypatch, capsys):
    # A loaded machine took longer than the app's 8 s socket timeout to store a chunk of 5,000 documents.
    timeouts: list[float | None] = []

    def seed(db, bottles, in_trouble):
        timeouts.append(db.client.options.pool_options.socket_timeout)
        real_seed(db, bottles, in_trouble)

    def pending(db, count):
        timeouts.append(db.client.options.pool_options.socket_timeout)
        real_pending(db, count)

    real_seed, real_pending = checks.seed, checks._pending
    monkeypatch.setattr(checks, "seed", seed)
    monkeypatch.setattr(checks, "_pending", pending)

    run([Fleet(100, 1, baseline=())])
    checks.peak(10, send_ms=1)

    assert timeouts == [None, None, None]  # the fleet, and the peak's notifications for each way of sending
