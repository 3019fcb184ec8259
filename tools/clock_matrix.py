"""Run the tests that read the wall clock at placed instants of it, so that no test passes only at some hours: one
inside each 6-hour daily roll-up block, just before an hour ends, just after midnight, a month's and a year's end,
and both European and the American spring DST changes.

    ./dev test-clocks [--jobs 2] [--only LABEL ...] [--list] [-- PYTEST_ARGS]

Each instant is one pytest run with PILLBOTTLE_TEST_CLOCK_START set (tests/wall_clock.py: every test starts with
the app's clock at that instant, running in real time from there). The runs print their instant and, on a
failure, the command that replays it. The last line sums every run: `clocks: N passed, N failed`.

What runs is every test listed in tests/clock_readers.txt: the tests that read the wall clock, the one thing the
placed instant moves, as a whole run of the suite recorded them (a test that reads no clock passes or fails the
same at every instant). Every run of the suite checks the list (tests/wall_clock.py) and fails on a test that reads
the clock but is missing from it.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from tools.arguments import int_between

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
    Instant("block-12-18", "2027-01-13T15:30:00Z", "inside the third roll-up block"),
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


_COUNT = re.compile(r"(\d+) (passed|failed|errors?|skipped)")


@dataclass
class Outcome:
    instant: Instant
    counts: dict[str, int]
    returncode: int
    tail: str
    seconds: float
    failed_tests: list[str]

    @property
    def ok(self) -> bool:
        """Pytest passed and said how many: a run whose counts are hidden (`-- -q` makes it `-qq`) proves nothing."""
        return self.returncode == 0 and bool(self.counts)

    @property
    def verdict(self) -> str:
        if self.ok:
            return "ok"
        if self.returncode == 0:
            return "UNKNOWN (pytest printed no counts: drop -q from the pytest arguments)"
        return f"FAILED (exit {self.returncode})"


def selected_tests(pytest_args: list[str], readers: Path = READERS_FILE) -> list[str]:
    """The tests that read the wall clock; or none, when the caller named paths of their own after `--`."""
    if any(not arg.startswith("-") for arg in pytest_args):
        return []
    return listed_readers(readers)


def replay(outcome: "Outcome") -> str:
    """The command that runs the failed tests again at the instant (each test starts at it), or the whole instant
    again when pytest named none (a collection error, a crash)."""
    if not outcome.failed_tests:
        return f"./dev test-clocks --only {outcome.instant.label}"
    return f"{CLOCK_ENV}={outcome.instant.at} .venv/bin/python -m pytest {' '.join(outcome.failed_tests)}"


def failed_tests(output: list[str]) -> list[str]:
    """The node ids of pytest's short summary: `FAILED tests/x.py::test_y - AssertionError...`."""
    ids = [line.split()[1] for line in output if line.startswith(("FAILED ", "ERROR ")) and len(line.split()) > 1]
    return list(dict.fromkeys(ids))


def run_at(instant: Instant, tests: list[str], pytest_args: list[str]) -> Outcome:
    """One pytest run at the instant; the tests' node ids go in an argument file (pytest's `@file`), since a
    thousand of them overflow no command line that way."""
    env = {**os.environ, CLOCK_ENV: instant.at}
    with tempfile.TemporaryDirectory(prefix="test-clocks-") as folder:
        listing = Path(folder) / "tests.txt"
        listing.write_text("".join(f"{test}\n" for test in tests), encoding="utf-8")
        selection = [f"@{listing}"] if tests else []
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *pytest_args, *selection]
        began = time.monotonic()
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    output = (done.stdout + done.stderr).strip().splitlines()
    summary = next((line for line in reversed(output) if _COUNT.search(line)), "")
    counts = {kind.rstrip("s") if kind.startswith("error") else kind: int(n) for n, kind in _COUNT.findall(summary)}
    tail = "\n".join(output[-40:])
    return Outcome(instant, counts, done.returncode, tail, time.monotonic() - began, failed_tests(output))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="./dev test-clocks", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int_between(1, 16), default=2, help="instants run side by side (default 2)")
    parser.add_argument("--only", action="append", choices=[i.label for i in INSTANTS], help="run just this instant")
    parser.add_argument("--list", action="store_true", help="print the instants and how many tests run, and stop")
    parser.add_argument("pytest_args", nargs="*", help="after --: pytest arguments (paths replace the default set)")
    args = parser.parse_args(argv)
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

    outcomes: list[Outcome] = []
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for outcome in pool.map(lambda i: run_at(i, tests, args.pytest_args), instants):
            outcomes.append(outcome)
            counts = ", ".join(f"{n} {kind}" for kind, n in outcome.counts.items()) or "no summary"
            took = f"{outcome.seconds:.0f} s"
            print(f"{outcome.instant.label:15} {outcome.instant.at}: {counts} in {took}: {outcome.verdict}")
            if not outcome.ok:
                print(outcome.tail)
                print(f"replay: {replay(outcome)}")
            sys.stdout.flush()

    passed = sum(o.counts.get("passed", 0) for o in outcomes)
    failed = sum(o.counts.get("failed", 0) + o.counts.get("error", 0) for o in outcomes)
    failed += sum(1 for o in outcomes if not o.ok and not o.counts.get("failed") and not o.counts.get("error"))
    print(f"clocks: {passed} passed, {failed} failed")
    return 0 if all(o.ok for o in outcomes) else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
