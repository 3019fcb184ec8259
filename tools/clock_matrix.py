"""Run the tests that read the wall clock at placed instants of it, so that no test passes only at some hours: one
inside each 6-hour daily roll-up block, just before an hour ends, just after midnight, a month's and a year's end,
and both European and the American spring DST changes.

    ./dev test-clocks [--workers N] [--only LABEL ...] [--list] [-- PYTEST_ARGS]

One pytest run, on a worker a core (pytest-xdist): each test runs once at each instant, the instant a parameter of
its own (`--clock-instants`, tests/wall_clock.py: the test starts with the app's clock at it, running in real time
from there), so every instant's tests share the workers and the run is collected once. It prints each instant's
counts and, on a failure, the command that replays the failed tests there. The last line sums every run:
`clocks: N passed, N failed`.

What runs is every test listed in tests/clock_readers.txt: the tests that read the wall clock, the one thing the
placed instant moves, as a whole run of the suite recorded them (a test that reads no clock passes or fails the
same at every instant). Every run of the suite checks the list (tests/wall_clock.py) and fails on a test that reads
the clock but is missing from it.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from xml.etree import ElementTree

ROOT = Path(__file__).resolve().parent.parent
CLOCK_ENV = "PILLBOTTLE_TEST_CLOCK_START"


@dataclass(frozen=True)
class Instant:
    label: str
    at: str  # what PILLBOTTLE_TEST_CLOCK_START is set to
    why: str


# DAILY_ROLLUP_HOURS is 6 by default: days roll up after 06:00, 12:00, 18:00 and 24:00 UTC.
INSTANTS = (
    Instant("block-00-06", "2027-01-13T03:30:00Z", "inside the day's first roll-up block (its day not yet rolled up)"),
    Instant("block-06-12", "2027-03-14T09:59:58Z", "second block; an hour's end; US spring DST (10:00 UTC)"),
    Instant(
        "block-12-18",
        "2027-01-13T15:09:05Z",
        "inside the third roll-up block; 55 s before the tally's hour is due (a pass begun then has under a minute)",
    ),
    Instant("block-18-24", "2027-01-13T21:58:30Z", "inside the last roll-up block, 90 s before an hour ends"),
    Instant("after-midnight", "2027-01-14T00:05:00Z", "00:00-00:10 UTC: the tally has not yet counted 23:00"),
    Instant("month-end", "2027-02-28T23:59:58Z", "the end of a month (February, no leap day)"),
    Instant("year-end", "2026-12-31T23:59:58Z", "the end of a year"),
    Instant("eu-dst-spring", "2027-03-28T00:59:58Z", "Europe's clocks go forward at 01:00 UTC"),
    Instant("eu-dst-autumn", "2027-10-31T00:59:58Z", "Europe's clocks go back at 01:00 UTC"),
)

# The tests the matrix runs: those that read the wall clock, a node id a line, as tests/wall_clock.py recorded them.
READERS_FILE = ROOT / "tests" / "clock_readers.txt"
_READERS_HEADER = (
    "# The tests that read the wall clock (shared.instants._wall_clock), which `./dev test-clocks` reruns at its\n"
    "# placed instants: recorded by tests/wall_clock.py in every run, which fails when a test reads the clock but is\n"
    "# not listed here. `./dev test --record-clock-readers` rewrites this file from a whole run (docs/testing.md).\n"
)


def listed_readers(path: Path = READERS_FILE) -> list[str]:
    """The node ids the list holds, in its order (comments and blank lines left out); none if it is missing."""
    if not path.is_file():
        return []
    lines = (line.strip() for line in path.read_text(encoding="utf-8").splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def write_readers(readers: Iterable[str], path: Path = READERS_FILE) -> None:
    """The list, sorted, under its header."""
    path.write_text(_READERS_HEADER + "".join(f"{nodeid}\n" for nodeid in sorted(set(readers))), encoding="utf-8")


@dataclass
class Outcome:
    """What the tests did at one instant."""

    instant: Instant
    counts: dict[str, int] = field(default_factory=dict)  # passed, failed, error, skipped
    seconds: float = 0.0  # the tests' own time at this instant, summed
    failed_tests: list[str] = field(default_factory=list)  # as the list names them, without the instant

    @property
    def ok(self) -> bool:
        return not self.counts.get("failed") and not self.counts.get("error")


def selected_tests(pytest_args: list[str], readers: Path = READERS_FILE) -> list[str]:
    """The tests that read the wall clock; or none, when the caller named paths of their own after `--`."""
    if any(not arg.startswith("-") for arg in pytest_args):
        return []
    return listed_readers(readers)


def replay(outcome: Outcome) -> str:
    """The command that runs the instant's failed tests again there (each test starts at it)."""
    return f"{CLOCK_ENV}={outcome.instant.at} .venv/bin/python -m pytest {' '.join(outcome.failed_tests)}"


def matrix_command(
    instants: list[Instant], tests: list[str], pytest_args: list[str], workers: str, results: Path
) -> list[str]:
    """The one pytest run: the listed tests' files, only the listed tests kept, each at every instant; or, when
    the caller named paths, every test of theirs at every instant."""
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", workers, "--dist", "worksteal"]
    command += [f"--clock-instants={','.join(i.label for i in instants)}", f"--junitxml={results}"]
    command += pytest_args
    if tests:
        command += ["--clock-readers-only", *dict.fromkeys(test.split("::")[0] for test in tests)]
    return command


def outcomes_of(results: Path, instants: list[Instant]) -> tuple[list[Outcome], list[str]]:
    """Each instant's counts from pytest's JUnit XML, and the tests that failed at no instant (a module that failed
    to import), by name; the XML names a parametrized test `test_x[secantus-year-end]`."""
    by_label = {i.label: Outcome(i) for i in instants}
    unplaced: list[str] = []
    for case in ElementTree.parse(results).iter("testcase"):
        name, module = case.get("name", ""), case.get("classname", "")
        kind = next((child.tag for child in case if child.tag in ("failure", "error", "skipped")), "passed")
        kind = {"failure": "failed"}.get(kind, kind)
        label = next((label for label in by_label if name.endswith((f"[{label}]", f"-{label}]"))), None)
        if label is None:
            if kind in ("failed", "error"):
                unplaced.append(f"{module}::{name}".strip(":"))
            continue
        outcome = by_label[label]
        outcome.counts[kind] = outcome.counts.get(kind, 0) + 1
        outcome.seconds += float(case.get("time") or 0)
        if kind in ("failed", "error"):
            outcome.failed_tests.append(listed_name(module, name, label))
    return list(by_label.values()), unplaced


def listed_name(module: str, name: str, label: str, root: Path = ROOT) -> str:
    """The JUnit XML's `tests.x.test_y` and `test_z[secantus-year-end]` as the list names the test:
    `tests/x/test_y.py::test_z[secantus]` (a test in a class: its classname ends with the class)."""
    base = name[: -len(label) - 2] + "]" if name.endswith(f"-{label}]") else name[: -len(label) - 2]
    parts = module.split(".")
    for cut in range(len(parts), 0, -1):
        path = "/".join(parts[:cut]) + ".py"
        if (root / path).is_file():
            return "::".join([path, *parts[cut:], base])
    return f"{module.replace('.', '/')}.py::{base}"  # a file outside the repository: a module at its root


def workers_count(text: str) -> str:
    """pytest-xdist's -n: a number of workers (0 runs in one process) or 'auto', one a core."""
    if text == "auto" or (text.isdigit() and int(text) <= 64):
        return text
    raise argparse.ArgumentTypeError(f"{text!r} is not 'auto' or a whole number from 0 to 64")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="./dev test-clocks", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--workers",
        type=workers_count,
        default=os.environ.get("PYTEST_WORKERS") or "auto",
        help="pytest-xdist workers (default PYTEST_WORKERS, or auto: one a core; 0 runs in one process)",
    )
    parser.add_argument("--only", action="append", choices=[i.label for i in INSTANTS], help="run just this instant")
    parser.add_argument("--list", action="store_true", help="print the instants and how many tests run, and stop")
    parser.add_argument("pytest_args", nargs="*", help="after --: pytest arguments (paths replace the default set)")
    args = parser.parse_args(argv)
    placed = os.environ.get(CLOCK_ENV)
    if placed:
        print(
            f"./dev test-clocks: {CLOCK_ENV}={placed} places every test at that one instant, and the matrix places "
            f"them at its own: unset {CLOCK_ENV} to run it"
        )
        return 2
    instants = [i for i in INSTANTS if not args.only or i.label in args.only]
    tests = selected_tests(args.pytest_args)
    if not tests and not any(not arg.startswith("-") for arg in args.pytest_args):
        print(
            f"./dev test-clocks: {READERS_FILE.relative_to(ROOT)} lists no test: run ./dev test --record-clock-readers"
        )
        return 2

    for instant in instants:
        print(f"clock {instant.label:15} {instant.at}  {instant.why}")
    if args.list:
        where = f"listed in {READERS_FILE.relative_to(ROOT)}" if tests else "named after --"
        print(f"tests at each instant: {len(tests) or 'those'} {where} (the tests that read the wall clock)")
        return 0
    sys.stdout.flush()
    return run_matrix(instants, tests, args.pytest_args, args.workers)


def run_matrix(instants: list[Instant], tests: list[str], pytest_args: list[str], workers: str) -> int:
    """The run, its report by instant, and its exit status: 0 when every instant passed."""
    with tempfile.TemporaryDirectory(prefix="test-clocks-") as folder:
        results = Path(folder) / "results.xml"
        began = time.monotonic()
        done = subprocess.run(
            matrix_command(instants, tests, pytest_args, workers, results),
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
        took = time.monotonic() - began
        output = (done.stdout + done.stderr).strip().splitlines()
        if not results.is_file():
            print("\n".join(output[-40:]))
            print(f"clocks: pytest ended (exit {done.returncode}) before it reported any test; 0 passed, 1 failed")
            return 1
        outcomes, unplaced = outcomes_of(results, instants)

    for outcome in outcomes:
        counts = ", ".join(f"{n} {kind}" for kind, n in sorted(outcome.counts.items())) or "no tests"
        verdict = "ok" if outcome.ok else "FAILED"
        print(f"{outcome.instant.label:15} {outcome.instant.at}: {counts} in {outcome.seconds:.0f} s: {verdict}")
    failed = sum(o.counts.get("failed", 0) + o.counts.get("error", 0) for o in outcomes) + len(unplaced)
    if failed or done.returncode != 0:
        print("\n".join(output[-40:]))
        for name in unplaced:
            print(f"failed at no instant (collection): {name}")
        for outcome in outcomes:
            if not outcome.ok:
                print(f"replay: {replay(outcome)}")
    passed = sum(o.counts.get("passed", 0) for o in outcomes)
    if done.returncode != 0 and not failed:
        failed = 1  # pytest failed beside the tests (the clock readers' judge, an internal error)
    print(f"clocks: {passed} passed, {failed} failed in {took:.0f} s")
    return 0 if failed == 0 and passed else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
