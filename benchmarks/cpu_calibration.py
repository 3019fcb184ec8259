"""The recorded CPU a device request takes through the Functions runtime: the figure the bill is priced from.

    python -m benchmarks.cpu_calibration [--rounds 5] [--requests 600]    measure; rewrite cpu_calibration.json

The bill (benchmarks/deployment_bill.py) sizes the HTTP instances from the CPU a request takes. Measured on whatever
machine runs `./dev bench`, that figure moved the headline from run to run ($51.0 K to $62.4 K for the same code);
so the bill takes it from this committed record instead, made by one method on one named machine, and every
bench run prints its own measurement beside the record, with the difference (benchmarks/suite.py).

The method: benchmarks/runtime_cost.py's requests (a provisioned bottle's heartbeat, one database command; an
opened or closed event, three; the store in a child process, so that the CPU is the Functions side's alone), run
`rounds` times in one process; each figure is the lowest of its rounds. CPU time only grows when other work shares
the cores (caches, frequency, the scheduler), so the lowest round is the one least disturbed by the machine's load:
the load average before and after is recorded with it. Re-record after a change to the request path (ingestion,
validation, the driver, the runtime pin) and commit the file: docs/costs.md says what the record holds.
"""

import argparse
import json
import os
import platform
import subprocess
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

from benchmarks import runtime_cost
from tools.arguments import int_between

RECORD = Path(__file__).with_name("cpu_calibration.json")
HEARTBEAT_CPU = "heartbeat_cpu_ms"  # a heartbeat a request, through the runtime
ACTION_CPU = "action_cpu_ms"  # an opened or closed event a request, through the runtime
HEARTBEAT_DIRECT = "heartbeat_direct_cpu_ms"  # the same, calling the Python function directly
ACTION_DIRECT = "action_direct_cpu_ms"
HEARTBEAT_COMMANDS = "heartbeat_commands"  # database commands a heartbeat request sends
ACTION_COMMANDS = "action_commands"
FIGURES = {  # a figure: the (shape, way) of runtime_cost it is read from, and what of it
    HEARTBEAT_CPU: (runtime_cost.HEARTBEAT, runtime_cost.RUNTIME),
    ACTION_CPU: (runtime_cost.ACTION, runtime_cost.RUNTIME),
    HEARTBEAT_DIRECT: (runtime_cost.HEARTBEAT, runtime_cost.DIRECT),
    ACTION_DIRECT: (runtime_cost.ACTION, runtime_cost.DIRECT),
}


@dataclass(frozen=True)
class Calibration:
    """A recorded measurement of the CPU a device request takes: when, on what, under what load, how, and the
    figures (milliseconds of CPU a request; database commands a request)."""

    recorded: str  # the date, UTC
    machine: str
    load: str
    method: str
    commit: str
    figures: dict[str, float]

    @property
    def heartbeat_cpu_ms(self) -> float:
        return self.figures[HEARTBEAT_CPU]

    @property
    def action_cpu_ms(self) -> float:
        return self.figures[ACTION_CPU]

    def source(self) -> str:
        """One line saying where the figures come from, for the bill."""
        return f"benchmarks/cpu_calibration.json, recorded {self.recorded} on {self.machine} ({self.load})"


def load(path: Path = RECORD) -> Calibration:
    """The committed record; a missing figure or field fails here, naming the file, not later in the bill."""
    try:
        found = json.loads(path.read_text())
        calibration = Calibration(**found)
    except (OSError, ValueError, TypeError) as error:
        raise ValueError(f"{path}: not a calibration record ({error})") from error
    missing = set(FIGURES) - set(calibration.figures)
    if missing:
        raise ValueError(f"{path}: no figures {sorted(missing)}")
    return calibration


def machine() -> str:
    """The machine a measurement runs on: its processor, cores, Python and the pinned runtime."""
    model = platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"{model}, {os.cpu_count()} CPUs, {platform.system()}, Python {platform.python_version()}, "
        f"azure-functions-runtime {metadata.version('azure-functions-runtime')}"
    )


def load_average() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def _commit() -> str:
    try:
        done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return done.stdout.strip()


def lowest(rounds: list[list[runtime_cost.RequestCost]]) -> dict[str, float]:
    """Each figure of FIGURES, the lowest of the rounds; the commands a request sends, from the first round (they
    are the same every round: counted, not timed)."""
    found: dict[str, float] = {}
    for name, (shape, way) in FIGURES.items():
        found[name] = min(c.cpu_ms_per_request for costs in rounds for c in costs if (c.shape, c.way) == (shape, way))
    first = {(c.shape, c.way): c for c in rounds[0]}
    found[HEARTBEAT_COMMANDS] = first[(runtime_cost.HEARTBEAT, runtime_cost.RUNTIME)].commands_per_request
    found[ACTION_COMMANDS] = first[(runtime_cost.ACTION, runtime_cost.RUNTIME)].commands_per_request
    return {name: round(value, 3) for name, value in found.items()}


def record(rounds: int, requests: int, path: Path = RECORD) -> Calibration:
    """Measure `rounds` rounds of runtime_cost's requests and write the record to `path`."""
    before = load_average()
    measured = [runtime_cost.request_costs(requests) for _ in range(rounds)]
    after = load_average()
    calibration = Calibration(
        recorded=f"{datetime.now(UTC):%Y-%m-%d}",
        machine=machine(),
        load=f"load average {before:.1f} before, {after:.1f} after",
        method=(
            f"python -m benchmarks.cpu_calibration --rounds {rounds} --requests {requests}: "
            f"benchmarks/runtime_cost.py's {requests} heartbeat and {max(requests // 2, 4)} opened/closed requests "
            "a round, each to a provisioned bottle, through the pinned runtime and directly, the store in a child "
            "process; CPU time (time.process_time) of this process, the lowest of the rounds"
        ),
        commit=_commit(),
        figures=lowest(measured),
    )
    path.write_text(json.dumps(asdict(calibration), indent=2) + "\n")
    return calibration


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.cpu_calibration",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--rounds", type=int_between(1, 50), default=5, help="rounds of requests; the lowest counts")
    parser.add_argument("--requests", type=int_between(20, 100_000), default=600, help="heartbeat requests a round")
    args = parser.parse_args(argv)
    calibration = record(args.rounds, args.requests)
    print(json.dumps(asdict(calibration), indent=2))
    print(f"written to {RECORD}")


if __name__ == "__main__":
    main()
