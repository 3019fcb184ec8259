"""The placed instants of `./dev test-clocks` are the edges they claim to be, and the runner reports what it ran:
a matrix whose instants drifted off their edges (a DST date of the wrong year, a block the default setting no
longer has) would pass while testing nothing."""

from datetime import datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from shared.instants import parse_instant
from shared.settings import Settings
from tools import clock_matrix
from tools.clock_matrix import INSTANTS, Instant

ROOT = Path(__file__).resolve().parents[2]
PLACED = [parse_instant(i.at) for i in INSTANTS]


def offset_changes_within(zone: str, moment: datetime, seconds: int) -> bool:
    tz = ZoneInfo(zone)
    return moment.astimezone(tz).utcoffset() != (moment + timedelta(seconds=seconds)).astimezone(tz).utcoffset()


def test_an_instant_falls_inside_each_daily_roll_up_block_of_the_default_setting() -> None:
    block = Settings().daily_rollup_hours
    blocks = {moment.hour // block for moment in PLACED}
    assert blocks == set(range(24 // block))


def test_the_instants_cover_an_hours_end_midnight_a_months_end_and_a_years_end() -> None:
    assert any(m.minute >= 58 and m.hour not in (23, 0) for m in PLACED)  # an hour's end inside a day
    assert any(m.hour == 0 and m.minute < 10 for m in PLACED)  # the tally's first minutes of a day
    assert any((m + timedelta(seconds=5)).month != m.month and m.month != 12 for m in PLACED)
    assert any((m + timedelta(seconds=5)).year != m.year for m in PLACED)


@pytest.mark.parametrize("zone", ["Europe/Berlin", "Europe/London"])
def test_both_european_dst_changes_fall_seconds_after_an_instant(zone: str) -> None:
    changes = [m for m in PLACED if offset_changes_within(zone, m, 5)]
    months = {m.month for m in changes}
    assert months == {3, 10}


def test_the_american_spring_dst_change_falls_seconds_after_an_instant() -> None:
    assert any(offset_changes_within("America/Los_Angeles", m, 5) for m in PLACED)


def test_the_default_set_is_every_listed_clock_reader(tmp_path: Path) -> None:
    listing = tmp_path / "clock_readers.txt"
    clock_matrix.write_readers(["tests/b.py::test_y", "tests/a.py::test_x[1]", "tests/a.py::test_x[1]"], listing)

    assert listing.read_text().startswith("# The tests that read the wall clock")
    assert clock_matrix.selected_tests([], listing) == ["tests/a.py::test_x[1]", "tests/b.py::test_y"]
    assert clock_matrix.selected_tests(["-x"], listing) == ["tests/a.py::test_x[1]", "tests/b.py::test_y"]
    assert clock_matrix.selected_tests(["-x", "tests/reports/test_tally.py"], listing) == []  # named paths instead


def test_the_repositorys_list_names_tests_that_read_the_clock() -> None:
    listed = clock_matrix.listed_readers()
    tally = "tests/reports/test_tally.py"  # the whole file: its module's DAY is made from the clock
    assert f"{tally}::test_with_the_shortest_window_every_prompt_heartbeat_is_counted" in listed or tally in listed
    assert not any(name.startswith("tests/infra/test_layout.py") for name in listed)  # reads no clock


def test_a_failing_run_is_reported_with_its_instant_and_the_command_that_replays_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "test_placed.py").write_text(
        "import os\n"
        "def test_not_in_march():\n"
        "    assert '-03-' not in os.environ['PILLBOTTLE_TEST_CLOCK_START']\n"
        "def test_any_time():\n"
        "    assert os.environ['PILLBOTTLE_TEST_CLOCK_START']\n"
    )
    monkeypatch.setattr(
        clock_matrix,
        "INSTANTS",
        (Instant("march", "2027-03-01T10:00:00Z", "fails"), Instant("may", "2027-05-01T10:00:00Z", "passes")),
    )
    # Without the heavy plugins a pytest run starts in half a second.
    code = clock_matrix.main(["--jobs", "1", "--", "-p", "no:schemathesis", "-p", "no:hypothesispytest", str(tmp_path)])

    out = capsys.readouterr().out
    assert code == 1
    assert "march           2027-03-01T10:00:00Z: 1 failed, 1 passed" in out
    assert "may             2027-05-01T10:00:00Z: 2 passed" in out
    replay = next(line for line in out.splitlines() if line.startswith("replay: "))
    assert replay.startswith("replay: PILLBOTTLE_TEST_CLOCK_START=2027-03-01T10:00:00Z .venv/bin/python -m pytest ")
    assert replay.endswith("test_placed.py::test_not_in_march")  # the failed test alone
    assert out.rstrip().endswith("clocks: 3 passed, 1 failed")


def test_a_run_whose_counts_pytest_hid_is_not_taken_for_a_pass(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`-- -q` on top of the runner's own `-q` hides pytest's summary: the instant is reported unknown and the run
    fails, rather than "no summary: ok" and `clocks: 0 passed, 0 failed` with exit 0."""
    (tmp_path / "test_placed.py").write_text("def test_any_time():\n    pass\n")
    monkeypatch.setattr(clock_matrix, "INSTANTS", (Instant("may", "2027-05-01T10:00:00Z", "passes"),))

    code = clock_matrix.main(["--", "-q", "-p", "no:schemathesis", "-p", "no:hypothesispytest", str(tmp_path)])

    out = capsys.readouterr().out
    assert code == 1
    assert "may             2027-05-01T10:00:00Z: no summary in " in out
    assert "UNKNOWN (pytest printed no counts: drop -q from the pytest arguments)" in out
    assert out.rstrip().endswith("clocks: 0 passed, 1 failed")
