"""Run the tests that depend on time at placed instants of the wall clock, so that no test passes only at
some hours: one inside each 6-hour daily roll-up block, just before an hour ends, just after midnight, a
month's and a year's end, and both European and the American spring DST changes.

    ./dev test-clocks [--jobs 2] [--only LABEL ...] [--list] [-- PYTEST_ARGS]

Each instant is one pytest run with PILLBOTTLE_TEST_CLOCK_START set (tests/conftest.py: every test starts with
the app's clock at that instant, running in real time from there). The runs print their instant and, on a
failure, the command that replays it. The last line sums every run: `clocks: N passed, N failed`.

Every test file runs at every instant except those in CLOCK_FREE, which read no clock (or play a simulated
clock of their own) and are slow: a new test file is covered unless it is named there, with its reason.
"""

import argparse
import os
import re
import subprocess
import sys
import time
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

# Test files that never read a clock, or play their own simulated one, and cost the most: left out of the
# placed runs (the real-clock run of ./dev test still runs them).
CLOCK_FREE = {
    "tests/tools/test_simulation.py": "plays 28-30 March 2026 on its own simulated clock; about a minute",
    "tests/tools/test_lifecycle.py": "plays 28-29 March 2026 on its own simulated clock (two tiny lifecycle runs)",
    "tests/store/test_outages.py": "waits out store deadlines against an unreachable server",
    "tests/benchmarks/test_checks_benchmark.py": "the benchmark's table on fixed dates",
    "tests/benchmarks/test_ingestion_benchmark.py": "the benchmark's table on its own dates",
    "tests/infra/test_infra.py": "Bicep, settings and docs agree: no clock",
    "tests/infra/test_layout.py": "the repository's layout: no clock",
    "tests/functions/test_bindings.py": "binding metadata: no clock",
    "tests/tools/test_simulation_chart.py": "draws a chart of fixed data",
    "tests/tools/test_command_line.py": "the commands' usage and failures; no clock; starts servers, waits on Ctrl-C",
    "tests/tools/test_clock_matrix.py": "checks the instants themselves, and runs pytest in pytest",
    "tests/functions/test_runtime.py": "the runtime's indexing and invocation; three commands on a copy of the app",
    "tests/infra/test_openapi_lint.py": "Spectral over openapi.yaml: no clock",
    "tests/infra/test_openapi_client.py": "a client generated from openapi.yaml: no clock",
    "tests/tools/test_local_settings.py": "writes settings and starts a store server: no clock",
    "tests/tools/test_lifecycle_end.py": "tiny lifecycle runs on their own simulated clock",
    "tests/tools/test_lifecycle_plan.py": "the lifecycle's plan on fixed dates",
    "tests/benchmarks/test_bench_runs.py": "the bench suite's handling of failing parts: no clock",
}

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


def test_files(pytest_args: list[str]) -> list[str]:
    """Every test file but the clock-free ones; or the paths the caller named."""
    if any(not arg.startswith("-") for arg in pytest_args):
        return []
    found = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("test_*.py"))
    return [f for f in found if f not in CLOCK_FREE]


def replay_command(instant: Instant, tests: list[str]) -> str:
    """The command that runs the failed tests again at the instant (each test starts at it)."""
    return f"{CLOCK_ENV}={instant.at} .venv/bin/python -m pytest {' '.join(tests)}"


def failed_tests(output: list[str]) -> list[str]:
    """The node ids of pytest's short summary: `FAILED tests/x.py::test_y - AssertionError...`."""
    ids = [line.split()[1] for line in output if line.startswith(("FAILED ", "ERROR ")) and len(line.split()) > 1]
    return list(dict.fromkeys(ids))


def run_at(instant: Instant, files: list[str], pytest_args: list[str]) -> Outcome:
    env = {**os.environ, CLOCK_ENV: instant.at}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *pytest_args, *files]
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
    parser.add_argument("--list", action="store_true", help="print the instants and the files left out, and stop")
    parser.add_argument("pytest_args", nargs="*", help="after --: pytest arguments (paths replace the default set)")
    args = parser.parse_args(argv)
    instants = [i for i in INSTANTS if not args.only or i.label in args.only]
    files = test_files(args.pytest_args)

    for instant in instants:
        print(f"clock {instant.label:15} {instant.at}  {instant.why}")
    if args.list:
        for name, why in CLOCK_FREE.items():
            print(f"left out {name}: {why}")
        return 0

    outcomes: list[Outcome] = []
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for outcome in pool.map(lambda i: run_at(i, files, args.pytest_args), instants):
            outcomes.append(outcome)
            counts = ", ".join(f"{n} {kind}" for kind, n in outcome.counts.items()) or "no summary"
            took = f"{outcome.seconds:.0f} s"
            print(f"{outcome.instant.label:15} {outcome.instant.at}: {counts} in {took}: {outcome.verdict}")
            if not outcome.ok:
                print(outcome.tail)
                print(f"replay: {replay_command(outcome.instant, outcome.failed_tests or files)}")
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
