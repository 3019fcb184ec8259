"""The lifecycle run: the whole app (ingestion, the three checks, the report dispatcher and its workers, bottles
provisioned, re-keyed and reassigned) on the Cosmos-faithful store (docs/cosmos-store.md) through simulated days
of a growing, scaled-down fleet, compressed in time; then one screen of what happened and a verdict.

    ./dev lifecycle [--days 60] [--bottles 16] [--seed 7] [--workers 3] [--chart PATH]

What it does to the app (docs/lifecycle.md): physical partitions that split as the collections grow (bottle
actions' while a report worker reads them), queue workers each with its own clock skewed by up to 2 minutes and
killed at random in the middle of a store call, throttling episodes, a morning late-dose peak every day, key
rotations and reassignments, buffered uploads hours late and devices sending a request twice. Exit 1 if any
report differs from the source, a notification kind's precision or recall is below 1, a notification was sent
twice or never, the actions' reports lagged past their bound, or the actions were re-read past theirs."""

import argparse
from pathlib import Path

from shared.store.command_line import CommandFailed, run_command
from tools.arguments import int_between, writable_file

# The run (the app, the Cosmos-faithful store, matplotlib: seconds of imports) is imported once the arguments are
# parsed, from tools.lifecycle.run (tests replace run_lifecycle there): `--help` and a usage error come at once.

MAX_DAYS = 366
DEFAULT_CHART = "lifecycle.png"  # *.png is gitignored


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    """The command's options; argparse's usage error (exit 2) names a bad one."""
    parser = argparse.ArgumentParser(
        prog="./dev lifecycle", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--days", type=int_between(1, MAX_DAYS), default=60, help="simulated days (default %(default)s)"
    )
    parser.add_argument(
        "--bottles", type=int_between(2, 500), default=16, help="bottles by the end (default %(default)s)"
    )
    parser.add_argument("--seed", type=int, default=7, help="another seed, another deterministic plan (default 7)")
    parser.add_argument(
        "--workers", type=int_between(3, 16), default=3, help="queue workers, at least 3 (default %(default)s)"
    )
    parser.add_argument(
        "--chart", type=writable_file, default=DEFAULT_CHART, help="where to write the PNG (default %(default)s)"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """`./dev lifecycle [argv]`: run, print the screen, write the chart; 0 if the verdict passes, else 1."""
    status = [0]

    def body() -> None:
        args = parse_arguments(argv)
        from tools.lifecycle.run import run_lifecycle
        from tools.lifecycle.screen import describe

        result = run_lifecycle(days=args.days, bottles=args.bottles, seed=args.seed, workers=args.workers)
        print(describe(result))
        from tools.lifecycle.chart import draw

        try:
            chart = draw(result, Path(args.chart))
        except OSError as error:
            raise CommandFailed(f"--chart {args.chart}: {error.strerror or error}") from None
        print(f"chart: {chart.resolve()}")
        status[0] = 1 if result.failures() else 0

    run_command("./dev lifecycle", body)
    return status[0]
