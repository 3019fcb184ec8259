"""Every benchmark in one run: ingestion, the notification checks and the report consumer, each beside its
same-run baseline (the seeds' approach) with the ratio. Prints the tables and writes them, with the commit
and the machine, to benchmarks/RESULTS.md so results can be compared across commits.

    ./dev bench [--quick] [--output benchmarks/RESULTS.md]

Each benchmark says on stderr when it starts and ends, and every 10 seconds that it is still running.
"""

import argparse
import os
import platform
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path

from benchmarks import checks, ingestion, reports, scaleout
from benchmarks.harness import PRINTED, Table, print_table
from tools.progress import Ticker

RESULTS = Path(__file__).with_name("RESULTS.md")


def _commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return out.stdout.strip() + (" (with uncommitted changes)" if dirty.stdout.strip() else "")


def summary_rows(tables: list[Table]) -> list[list[str]]:
    """The headline figures of every benchmark, each beside its same-run baseline, as one table."""
    rows: list[list[str]] = []
    for table in tables:
        col = table.column
        if table.title.startswith("Ingestion"):
            naive = table.rows[0]
            for row in table.rows[1:]:
                case = col(row, "approach").removeprefix("app: ")
                rows.append(["ingestion", f"events/s, {case}", col(row, "events/s"), col(naive, "events/s"),
                             col(row, "vs naive")])  # fmt: skip
                rows.append(["ingestion", f"commands/event, {case}", col(row, "commands/event"),
                             col(naive, "commands/event"), f"{col(row, 'fewer commands')} fewer"])  # fmt: skip
        elif table.title.startswith("Notification checks"):
            for seeds, app in zip(table.rows, table.rows[1:], strict=False):
                same = all(col(seeds, c) == col(app, c) for c in ("check", "bottles", "in trouble"))
                if same and "seeds" in col(seeds, "approach") and "app" in col(app, "approach"):
                    case = f"commands per sweep, {col(app, 'check')} at {col(app, 'bottles')} bottles"
                    rows.append(["checks", case, col(app, "commands"), col(seeds, "commands"),
                                 f"{col(app, 'fewer commands')} fewer"])  # fmt: skip
        elif table.title.startswith("Report consumer"):
            for naive, app in zip(table.rows[::2], table.rows[1::2], strict=True):
                scenario = col(app, "scenario")
                rows.append(["reports", f"changes/s, {scenario}", col(app, "changes/s"), col(naive, "changes/s"),
                             col(app, "speed vs naive")])  # fmt: skip
                rows.append(["reports", f"commands/change, {scenario}", col(app, "cmds/change"),
                             col(naive, "cmds/change"), f"{col(app, 'fewer cmds')} fewer"])  # fmt: skip
    return rows


def run(quick: bool, ticker: Ticker | None = None) -> str:
    ticker = ticker or Ticker()
    sections: list[tuple[str, str]] = []
    started = time.perf_counter()
    with ticker.running("bench: ingestion (1 of 5)"):
        sections.append(("Ingestion", ingestion.run(events=1000 if quick else 4000, bottles=50)))
    with ticker.running("bench: notification checks (2 of 5)"):
        sections.append(("Notification checks", checks.run(checks.default_fleets(quick))))
    with ticker.running("bench: report consumer (3 of 5)"):
        sections.append(("Report consumer", reports.run(30 if quick else 100, quick=quick)))
    with ticker.running("bench: report workers side by side (4 of 5)"):
        sections.append(("Report workers side by side", scaleout.run(30 if quick else 150, 2 if quick else 4)))
    with ticker.running("bench: check partitions side by side (5 of 5)"):
        swept = 2_000 if quick else 20_000
        sections.append(("Check partitions side by side", scaleout.sweep_table(swept, swept // 20)))
    elapsed = time.perf_counter() - started
    summary = print_table(
        "Summary: the app against the seeds' approach, measured in the same run",
        summary_rows(list(PRINTED)),
        ["area", "figure", "app", "baseline (seeds)", "ratio"],
    )
    header = (
        f"# Benchmark results\n\n{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, commit {_commit()}, "
        f"{'quick' if quick else 'full'} run in {elapsed:.0f} s on {platform.machine()} with {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}. SecantusDB in-process; figures are ratios against the baseline "
        "measured in the same run, since absolute speeds vary from machine to machine.\n"
    )
    sections.insert(0, ("Summary", summary))
    body = "\n".join(f"\n## {title}\n\n```\n{table}\n```" for title, table in sections)
    return header + body + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="./dev bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="smaller fleets and streams (about a minute)")
    parser.add_argument(
        "--output", type=Path, default=RESULTS, help="where to write the results (default benchmarks/RESULTS.md)"
    )
    args = parser.parse_args(argv)
    if not args.output.parent.is_dir():
        parser.error(f"--output {args.output}: no directory {args.output.parent}")
    document = run(args.quick)
    args.output.write_text(document)
    print(f"\nwritten to {args.output}")


if __name__ == "__main__":
    main()
