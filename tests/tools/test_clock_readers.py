"""The record of which tests read the wall clock (tests/wall_clock.py), on which the clock matrix's selection rests,
and the matrix's placing of the clock for each test: a test that reads it, however it does (in its body, in a
thread, through a function-scoped fixture), is found; a run fails on a reader the list leaves out, naming it and
saying how to fix it, on a listed test the suite no longer has, and on a read the matrix cannot place (at a module's
import, in a fixture shared by several tests); `--record-clock-readers` writes the list; under pytest-xdist the
controller judges the workers' findings; `--clock-instants` runs each listed test at each instant. Each case runs
pytest on a scratch project with the plugin."""

import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from shared import instants
from tools.clock_matrix import listed_readers, write_readers

ROOT = Path(__file__).resolve().parents[2]

SCRATCH = {
    "test_reads.py": (
        "import threading\n"
        "from datetime import UTC, datetime\n"
        "import pytest\n"
        "from shared.instants import set_clock, utc_now\n"
        "def test_in_its_body():\n"
        "    assert utc_now()\n"
        "def test_in_a_thread():\n"
        "    done = threading.Thread(target=utc_now)\n"
        "    done.start()\n"
        "    done.join()\n"
        "def test_on_a_clock_of_its_own():\n"
        "    set_clock(lambda: datetime(2027, 1, 1, tzinfo=UTC))\n"
        "    try:\n"
        "        assert utc_now().year == 2027\n"
        "    finally:\n"
        "        set_clock(None)\n"
        "@pytest.mark.own_clock(datetime(2030, 6, 1, 12, tzinfo=UTC))\n"
        "def test_under_its_own_clock_mark():\n"
        "    assert utc_now().date().isoformat() == '2030-06-01'\n"
        "def test_no_clock():\n"
        "    assert 1 + 1 == 2\n"
    ),
    "test_fixture.py": (
        "import pytest\n"
        "from shared.instants import utc_now\n"
        "@pytest.fixture\n"
        "def started():\n"
        "    return utc_now()\n"
        "def test_first_user(started):\n"
        "    assert started\n"
        "def test_second_user(started):\n"
        "    assert started\n"
        "def test_not_a_user():\n"
        "    pass\n"
    ),
}
READERS = [
    "test_fixture.py::test_first_user",
    "test_fixture.py::test_second_user",
    "test_reads.py::test_in_a_thread",
    "test_reads.py::test_in_its_body",
]
TESTS = 8  # in SCRATCH


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    for name, text in SCRATCH.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # the scratch project is the rootdir
    (tmp_path / "tests").mkdir()
    return tmp_path


def run_pytest(project: Path, *args: str, placed: str | None = None) -> subprocess.CompletedProcess[str]:
    """pytest on the scratch project with the plugin (and without the suite's heavy plugins, to start fast), on the
    real clock or at a `placed` instant."""
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "tests.wall_clock",
        "-p",
        "tests.timeouts",
        "-p",
        "no:cacheprovider",
    ]
    command += ["-p", "no:schemathesis", "-p", "no:hypothesispytest", "-p", "no:anyio", *args]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("PILLBOTTLE_TEST_CLOCK_START", None)
    if placed is not None:
        env["PILLBOTTLE_TEST_CLOCK_START"] = placed
    return subprocess.run(command, cwd=project, env=env, capture_output=True, text=True, check=False, timeout=120)


def test_recording_lists_every_test_that_reads_the_wall_clock_and_only_those(scratch: Path) -> None:
    done = run_pytest(scratch, "--record-clock-readers")

    assert done.returncode == 0, done.stdout + done.stderr
    assert listed_readers(scratch / "tests" / "clock_readers.txt") == READERS


def test_a_reader_missing_from_the_list_fails_the_run_naming_it_and_the_fix(scratch: Path) -> None:
    write_readers([r for r in READERS if r != "test_reads.py::test_in_a_thread"], scratch / "tests/clock_readers.txt")

    done = run_pytest(scratch)

    assert done.returncode == 1
    assert f"{TESTS} passed" in done.stdout  # every test passed: the list is what failed
    assert "1 test(s) read the wall clock but are not in tests/clock_readers.txt" in done.stdout
    assert "\n  test_reads.py::test_in_a_thread\n" in done.stdout
    assert "./dev test --record-clock-readers" in done.stdout


def test_a_complete_list_passes(scratch: Path) -> None:
    write_readers(READERS, scratch / "tests/clock_readers.txt")

    done = run_pytest(scratch)

    assert done.returncode == 0, done.stdout
    assert "clock readers" not in done.stdout


def test_a_listed_test_the_suite_no_longer_has_fails_a_whole_run_only(scratch: Path) -> None:
    write_readers([*READERS, "test_reads.py::test_renamed"], scratch / "tests/clock_readers.txt")

    whole = run_pytest(scratch)
    part = run_pytest(scratch, "test_reads.py")

    assert whole.returncode == 1
    assert "lists 1 test(s) the suite no longer has" in whole.stdout
    assert "  test_reads.py::test_renamed\n" in whole.stdout
    assert part.returncode == 0, part.stdout  # a run of one file cannot tell


def test_recording_part_of_the_suite_keeps_the_listed_tests_it_did_not_run(scratch: Path) -> None:
    listing = scratch / "tests/clock_readers.txt"
    write_readers(["test_fixture.py::test_first_user", "test_reads.py::test_no_clock"], listing)

    done = run_pytest(scratch, "--record-clock-readers", "test_reads.py")

    assert done.returncode == 0, done.stdout
    # test_no_clock ran and read nothing: dropped; test_first_user did not run: kept.
    assert listed_readers(listing) == [
        "test_fixture.py::test_first_user",
        "test_reads.py::test_in_a_thread",
        "test_reads.py::test_in_its_body",
    ]


def test_a_module_constant_made_from_the_clock_fails_the_run_naming_the_file_and_the_fix(scratch: Path) -> None:
    """Under a clock placed per test, a constant made at import sits at another instant than the test: the matrix
    could not place it. A module that imports a helper whose import reads the clock (`DAY = utc_now()` in a helper,
    read once, while the first module that imports it is imported) is named too, however indirect the import."""
    (scratch / "days.py").write_text("from shared.instants import utc_now\nDAY = utc_now().date()\n")
    (scratch / "fleet.py").write_text("from days import DAY\nFIRST = DAY\n")
    (scratch / "test_a_first.py").write_text("from days import DAY\ndef test_a():\n    assert DAY\n")
    (scratch / "test_b_second.py").write_text("from days import DAY\ndef test_b():\n    assert DAY\n")
    (scratch / "test_c_through.py").write_text("import fleet\ndef test_c():\n    assert fleet.FIRST\n")
    write_readers(READERS, scratch / "tests/clock_readers.txt")

    done = run_pytest(scratch)

    assert done.returncode == 1
    assert "3 file(s) read the wall clock while being imported" in done.stdout
    assert "\n  test_a_first.py\n  test_b_second.py\n  test_c_through.py\n" in done.stdout
    assert "Make the value in the test or in a function-scoped fixture" in done.stdout
    assert "@pytest.mark.own_clock(start)" in done.stdout


def test_a_fixture_wider_than_a_test_that_reads_the_clock_fails_the_run_naming_it(scratch: Path) -> None:
    (scratch / "test_shared.py").write_text(
        "import pytest\n"
        "from shared.instants import utc_now\n"
        "@pytest.fixture(scope='module')\n"
        "def started():\n"
        "    return utc_now()\n"
        "def test_user(started):\n"
        "    assert started\n"
    )
    write_readers(READERS, scratch / "tests/clock_readers.txt")

    done = run_pytest(scratch, "--record-clock-readers")

    assert done.returncode == 1
    assert "1 fixture(s) wider than a test read the wall clock" in done.stdout
    assert "\n  started (scope wider than a test, test_shared.py)\n" in done.stdout
    assert "Make them function-scoped" in done.stdout


def test_under_xdist_the_workers_findings_are_judged_together(scratch: Path) -> None:
    write_readers(READERS[1:], scratch / "tests/clock_readers.txt")

    done = run_pytest(scratch, "-n", "2")

    assert done.returncode == 1
    assert "1 test(s) read the wall clock but are not in tests/clock_readers.txt" in done.stdout
    assert "\n  test_fixture.py::test_first_user\n" in done.stdout


def test_a_worker_that_crashes_keeps_what_its_tests_recorded(scratch: Path) -> None:
    """pytest-xdist replaces a worker that dies (a test's timeout ends it): the tests it ran before still count."""
    (scratch / "test_zz_crash.py").write_text("import os\ndef test_dies():\n    os._exit(1)\n")

    done = run_pytest(scratch, "-n", "1", "-p", "no:randomly", "--record-clock-readers")

    assert "worker 'gw0' crashed while running 'test_zz_crash.py::test_dies'" in done.stdout
    assert listed_readers(scratch / "tests" / "clock_readers.txt") == READERS


def test_a_test_that_never_ends_fails_named_with_its_stack_and_the_run_goes_on(scratch: Path) -> None:
    """The suite's own pytest configuration (pyproject.toml: pytest-timeout's limit and method) on a scratch test
    that loops, with the limit cut to seconds: the run fails naming the test and where it was, under pytest-xdist
    as ./dev test runs it, and the other tests still run."""
    import tomllib

    configured = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert configured["timeout_method"] == "thread"
    assert 60 <= configured["timeout"] <= 9 * 60  # a looping test fails within 10 minutes
    (scratch / "pytest.ini").write_text(
        f"[pytest]\ntimeout = {configured['timeout']}\ntimeout_method = {configured['timeout_method']}\n"
    )
    (scratch / "test_loops.py").write_text("def test_spins_for_ever():\n    while True:\n        pass\n")

    done = run_pytest(scratch, "-n", "2", "-o", "timeout=3", "test_loops.py", "test_reads.py")

    assert done.returncode == 1
    assert "crashed while running 'test_loops.py::test_spins_for_ever'" in done.stdout
    report = done.stdout.split("= FAILURES =")[1]  # the test's report, not only the worker's stderr
    assert "Timeout: test_loops.py::test_spins_for_ever ran for more than 3 s and was stopped." in report
    assert 'test_loops.py", line 2, in test_spins_for_ever' in report
    assert "5 passed" in done.stdout  # test_reads.py's five went on


def test_the_matrix_runs_each_listed_test_at_each_instant_and_only_those(scratch: Path) -> None:
    """`--clock-instants` makes the instant a parameter of every test, ending its id; `--clock-readers-only` keeps
    the listed tests; each starts at its instant, and the judge finds them in the list by their ids without it."""
    (scratch / "test_reads.py").write_text(
        (scratch / "test_reads.py").read_text() + "def test_year(placed_instant):\n"
        "    assert utc_now().isoformat()[:4] == placed_instant.at[:4]\n"
    )
    write_readers([*READERS, "test_reads.py::test_year"], scratch / "tests/clock_readers.txt")

    done = run_pytest(scratch, "-v", "--clock-instants=year-end,block-06-12", "--clock-readers-only")

    assert done.returncode == 0, done.stdout
    assert "test_reads.py::test_year[year-end] PASSED" in done.stdout
    assert "test_reads.py::test_year[block-06-12] PASSED" in done.stdout
    assert "test_fixture.py::test_first_user[year-end] PASSED" in done.stdout
    assert "10 passed" in done.stdout  # the five listed tests, twice
    assert "test_no_clock" not in done.stdout
    assert "test_under_its_own_clock_mark" not in done.stdout


def test_under_the_matrix_a_test_of_several_parameters_ends_its_id_with_the_instant(scratch: Path) -> None:
    (scratch / "test_params.py").write_text(
        "import pytest\n"
        "from shared.instants import utc_now\n"
        "@pytest.mark.parametrize('store', ['mongomock', 'secantus'])\n"
        "@pytest.mark.parametrize('size', [1, 2])\n"
        "def test_stored(store, size):\n"
        "    assert utc_now().year == 2027\n"
    )
    listed = ["test_params.py::test_stored[1-secantus]", "test_params.py::test_stored[2-mongomock]"]
    write_readers([*READERS, *listed], scratch / "tests/clock_readers.txt")

    done = run_pytest(scratch, "-v", "--clock-instants=block-06-12", "--clock-readers-only", "test_params.py")

    assert done.returncode == 0, done.stdout
    assert "test_params.py::test_stored[1-secantus-block-06-12] PASSED" in done.stdout
    assert "test_params.py::test_stored[2-mongomock-block-06-12] PASSED" in done.stdout
    assert "2 passed, 2 deselected" in done.stdout


def test_an_unknown_instant_is_a_usage_error_listing_the_known_ones(scratch: Path) -> None:
    done = run_pytest(scratch, "--clock-instants=year-end,tea-time")

    assert done.returncode == 4
    assert "--clock-instants: tea-time is not an instant of the clock matrix; known: all, block-00-06" in done.stderr


def test_a_placed_instant_and_the_matrix_together_are_a_usage_error(scratch: Path) -> None:
    done = run_pytest(scratch, "--clock-instants=all", placed="2027-03-14T09:59:58Z")

    assert done.returncode == 4
    assert "PILLBOTTLE_TEST_CLOCK_START and --clock-instants both place the clock: give one" in done.stderr


def test_an_own_clock_mark_without_an_aware_start_is_a_usage_error_naming_the_test(scratch: Path) -> None:
    (scratch / "test_marked.py").write_text(
        "import pytest\n@pytest.mark.own_clock('2027-01-01')\ndef test_marked():\n    pass\n"
    )

    done = run_pytest(scratch, "test_marked.py")

    assert done.returncode == 4
    assert "test_marked.py::test_marked: @pytest.mark.own_clock takes one aware datetime, the clock's start" in (
        done.stderr
    )


@pytest.mark.own_clock(datetime(2030, 6, 1, 12, tzinfo=UTC))
def test_clocks_set_within_clock_restored_give_way_to_the_tests_own_clock_even_after_an_error() -> None:
    """What the benchmarks' played clocks rest on: set_clock(None) afterwards would put the test on the wall clock
    (and so into the clock matrix, a benchmark whose figures then depend on when it ran)."""

    def played() -> None:
        with instants.clock_restored():
            instants.set_clock(lambda: datetime(2027, 1, 1, tzinfo=UTC))
            instants.set_clock(lambda: datetime(2028, 1, 1, tzinfo=UTC))
            assert instants.utc_now().year == 2028
            raise ValueError("mid-play")

    with pytest.raises(ValueError, match="mid-play"):
        played()

    assert instants.utc_now().date().isoformat() == "2030-06-01"
