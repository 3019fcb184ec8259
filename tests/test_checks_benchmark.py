"""The checks benchmark runs (on tiny fleets) and shows what it is for: a sweep's commands follow the bottles in
trouble, not the fleet, and are far fewer than the per-bottle approach's."""

import pytest

from benchmarks.checks import Fleet, run

pytestmark = pytest.mark.integration


def test_the_benchmark_table_shows_sweeps_that_do_not_grow_with_the_fleet(capsys):
    table = run([Fleet(300, 3), Fleet(900, 9, baseline=(), then_in_trouble=3)])

    rows = [line.split("  ") for line in table.splitlines()[3:]]
    cells = [[cell.strip() for cell in row if cell.strip()] for row in rows]
    sweeps = {(c[0], c[1], c[2]): int(c[4]) for c in cells if c[3] == "indexed sweep (app)"}
    per_bottle = {(c[0], c[1]): int(c[4].replace(",", "")) for c in cells if c[3] == "per bottle (seeds)"}
    for kind in ("late_dose", "left_open", "silent"):
        assert sweeps[(kind, "300", "3")] == sweeps[(kind, "900", "3")]
        assert per_bottle[(kind, "300")] > 300 > 30 * sweeps[(kind, "300", "3")]
    assert "Notification checks" in capsys.readouterr().out
