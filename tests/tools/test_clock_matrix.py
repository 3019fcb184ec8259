"""The placed instants of `./dev test-clocks` are the edges they claim to be, and the runner reports what it ran:
a matrix whose instants drifted off their edges (a DST date of the wrong year, a block the default setting no
longer has) would pass while testing nothing."""

from datetime import datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from shared.feeds.settling import SETTLE
from shared.instants import hour_of, parse_instant
from shared.settings import Settings
from tools import clock_matrix
from tools.clock_matrix import INSTANTS

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


def test_an_instant_falls_in_the_last_minute_before_the_tally_may_count_an_hour() -> None:
    """A tally pass begun then (or by a test an hour on) has under a minute left to spread its pages over before
    the next hour is due: a one-page pass once waited it out, past a run's budget, and counted nothing."""
    assert any(timedelta(0) < hour_of(m) + SETTLE - m <= timedelta(minutes=1) for m in PLACED)


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


def test_the_matrix_is_one_run_of_the_listed_tests_files_keeping_the_listed_tests(tmp_path: Path) -> None:
    tests = ["tests/a.py::test_x[1]", "tests/a.py::test_x[2]", "tests/b.py::test_y"]
    instants = [INSTANTS[0], INSTANTS[-1]]

    command = clock_matrix.matrix_command(instants, tests, ["-x"], "2", tmp_path / "r.xml")

    assert command[command.index("-n") + 1] == "2"
    assert f"--clock-instants={INSTANTS[0].label},{INSTANTS[-1].label}" in command
    assert command[-3:] == ["--clock-readers-only", "tests/a.py", "tests/b.py"]  # each file once
    assert "-x" in command
    named = clock_matrix.matrix_command(instants, [], ["tests/c.py"], "0", tmp_path / "r.xml")
    assert "--clock-readers-only" not in named  # every test of the named paths


def test_the_repositorys_list_names_tests_that_read_the_clock() -> None:
    listed = clock_matrix.listed_readers()
    assert "tests/ingestion/test_bad_device_input.py::test_events_at_the_limits_are_accepted[mongomock]" in listed
    assert all("::" in entry for entry in listed)  # tests, no file: the clock is placed per test
    assert not any(name.startswith("tests/infra/test_layout.py") for name in listed)  # reads no clock
    assert not any(name.startswith("tests/reports/test_tally.py") for name in listed)  # a clock of its own


PLACED_TESTS = (
    "from shared.instants import utc_now\n"
    "def test_not_in_march():\n"
    "    assert utc_now().month != 3\n"
    "def test_any_time():\n"
    "    assert utc_now()\n"
)
# The plugin the suite's conftest registers, and none of the heavy ones: a pytest run starts in half a second.
LIGHT = ["-p", "tests.wall_clock", "-p", "no:schemathesis", "-p", "no:hypothesispytest"]


def test_a_failing_run_is_reported_with_its_instant_and_the_command_that_replays_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(clock_matrix.CLOCK_ENV, raising=False)  # the suite's run may place its own instant
    (tmp_path / "test_placed.py").write_text(PLACED_TESTS)

    code = clock_matrix.main(
        ["--workers", "0", "--only", "block-06-12", "--only", "year-end", "--", *LIGHT, str(tmp_path)]
    )

    out = capsys.readouterr().out
    assert code == 1
    assert "block-06-12     2027-03-14T09:59:58Z: 1 failed, 1 passed" in out  # March
    assert "year-end        2026-12-31T23:59:58Z: 2 passed" in out
    replay = next(line for line in out.splitlines() if line.startswith("replay: "))
    assert replay.startswith("replay: PILLBOTTLE_TEST_CLOCK_START=2027-03-14T09:59:58Z .venv/bin/python -m pytest ")
    assert replay.endswith("test_placed.py::test_not_in_march")  # the failed test alone, as the list names it
    assert "clocks: 3 passed, 1 failed in " in out.splitlines()[-1]


def test_a_run_that_ends_before_any_test_reports_is_not_taken_for_a_pass(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pytest usage error leaves no results: the run fails, showing pytest's words, rather than `0 failed`."""
    monkeypatch.delenv(clock_matrix.CLOCK_ENV, raising=False)
    (tmp_path / "test_placed.py").write_text(PLACED_TESTS)

    code = clock_matrix.main(["--workers", "0", "--", *LIGHT, "--no-such-option", str(tmp_path)])

    out = capsys.readouterr().out
    assert code == 1
    assert "unrecognized arguments: --no-such-option" in out
    assert out.rstrip().endswith("clocks: pytest ended (exit 4) before it reported any test; 0 passed, 1 failed")


def test_a_placed_instant_in_the_environment_is_refused_in_one_line_naming_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both would place the clock: the matrix says so at once instead of a pytest usage error per run."""
    monkeypatch.setenv(clock_matrix.CLOCK_ENV, "2027-01-13T03:30:00Z")

    code = clock_matrix.main(["--workers", "0", "--list"])

    out = capsys.readouterr().out
    assert code == 2
    assert out == (
        "./dev test-clocks: PILLBOTTLE_TEST_CLOCK_START=2027-01-13T03:30:00Z places every test at that one instant, "
        "and the matrix places them at its own: unset PILLBOTTLE_TEST_CLOCK_START to run it\n"
    )


def test_a_bad_worker_count_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        clock_matrix.main(["--workers", "many"])

    assert exit_.value.code == 2
    assert "'many' is not 'auto' or a whole number from 0 to 64" in capsys.readouterr().err
