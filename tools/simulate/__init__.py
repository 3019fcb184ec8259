"""Fleet simulation: provision a fleet, play simulated days through the app's real function entry points
(device requests, the three checks and the report consumer on their schedules, in simulated time), then
score the notifications against the trouble that was injected.

    ./dev simulate [--bottles 200] [--users 30] [--days 2] [--seed 7] [--mongodb-uri URI] [--chart PATH]
                   [--cosmos-store [--partition-kb 64]]
    ./dev simulate --http http://127.0.0.1:7071 [--function-key KEY] [--minutes 2] [--heartbeat-seconds 10]

The first form runs on the default store (SecantusDB in-process) or any MongoDB, with `--cosmos-store` behind the
Cosmos-faithful store (docs/cosmos-store.md: partitions that split, throttling, Cosmos DB's change-stream tokens).
The second sends the same kind of device traffic over real HTTP, in real time, to a local server, `func start`
or a deployed app: a smoke and load test for operations.
"""

import argparse
import os
import time
from pathlib import Path

from shared.store.command_line import CommandFailed, run_command
from tools.archive_history import DEFAULT_DIR as DEFAULT_ARCHIVE_DIR
from tools.arguments import float_above, http_url, int_between, positive_float, positive_int, writable_file
from tools.cosmos_store.options import Options

# The runs (the app, the store, numpy, matplotlib: seconds of imports) are imported once the arguments are parsed,
# from their modules (tests replace them there): `--help` and a usage error come at once.

MAX_DAYS = 366


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    """The command's options; argparse's usage error (exit 2) names a bad one or a bad pair."""
    parser = argparse.ArgumentParser(
        prog="./dev simulate", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--bottles", type=positive_int, default=200, help="bottles in the fleet (default 200)")
    parser.add_argument(
        "--users", type=positive_int, default=30, help="users owning them, at most one per bottle (default 30)"
    )
    parser.add_argument(
        "--days",
        type=float_above(0, MAX_DAYS),
        default=2.0,
        help=f"simulated days, at most {MAX_DAYS} (default 2; in-process mode)",
    )
    parser.add_argument("--seed", type=int, default=7, help="another seed, another deterministic run (default 7)")
    parser.add_argument(
        "--workers",
        type=int_between(1, 16),
        default=2,
        help="queue workers side by side for the queue-triggered functions (default 2)",
    )
    parser.add_argument("--mongodb-uri", help="any MongoDB, Cosmos DB included (default: SecantusDB in-process)")
    parser.add_argument(
        "--cosmos-store",
        action="store_true",
        help="run on the Cosmos-faithful store (partitions, splits, throttling: docs/cosmos-store.md) in front of it",
    )
    parser.add_argument(
        "--partition-kb",
        type=positive_int,
        default=64,
        help="--cosmos-store: a physical partition's size limit in KB, standing for 50 GB (default 64)",
    )
    parser.add_argument(
        "--chart",
        type=writable_file,
        default="simulation.png",
        help="where to write the PNG chart (default %(default)s)",
    )
    parser.add_argument(
        "--archive-dir",
        type=Path,
        default=Path(os.environ.get("ARCHIVE_DIR") or DEFAULT_ARCHIVE_DIR),
        help="the archive's folder, emptied first (default: ARCHIVE_DIR, else %(default)s); ./dev archive reads it",
    )
    parser.add_argument(
        "--http", type=http_url, metavar="BASE_URL", help="send device traffic over HTTP in real time instead"
    )
    parser.add_argument("--function-key", help="Functions key for the provisioning route (--http)")
    parser.add_argument(
        "--minutes", type=positive_float, default=2.0, help="how long to send, in minutes (default 2; --http)"
    )
    parser.add_argument(
        "--heartbeat-seconds",
        type=positive_float,
        default=10.0,
        help="each bottle's heartbeat period in seconds (default 10; --http)",
    )
    args = parser.parse_args(argv)
    if args.users > args.bottles:
        parser.error(f"--users {args.users} is more than --bottles {args.bottles}: every user needs a bottle")
    return args


def main(argv: list[str] | None = None) -> None:
    """`./dev simulate [argv]`: a run in process (screen, chart, verdict; exit 1 if it fails) or over HTTP."""
    run_command("./dev simulate", lambda: _simulate(argv))


def _simulate(argv: list[str] | None) -> None:
    args = parse_arguments(argv)
    if args.http:
        _send_over_http(args)
    else:
        _simulate_in_process(args)


def _send_over_http(args: argparse.Namespace) -> None:
    """`--http`: the fleet's traffic sent in real time, then its ingestion lines."""
    from tools.simulate.over_http import run_over_http
    from tools.simulate.screen import describe_ingestion

    started = time.perf_counter()
    tally = run_over_http(
        args.http,
        bottles=args.bottles,
        users=args.users,
        minutes=args.minutes,
        heartbeat_seconds=args.heartbeat_seconds,
        seed=args.seed,
        function_key=args.function_key,
    )
    print("\n".join(describe_ingestion(tally, time.perf_counter() - started)))


def _simulate_in_process(args: argparse.Namespace) -> None:
    """The simulated days: the screen, the chart, the archive's folder, the verdict (exit 1 if it fails)."""
    from tools.simulate.in_process import run_simulation
    from tools.simulate.screen import describe

    started = time.perf_counter()
    result = run_simulation(
        bottles=args.bottles,
        users=args.users,
        days=args.days,
        seed=args.seed,
        mongodb_uri=args.mongodb_uri,
        workers=args.workers,
        cosmos=Options(partition_bytes=args.partition_kb * 1024) if args.cosmos_store else None,
        archive_dir=args.archive_dir,
    )
    print(describe(result))
    from tools.simulate.chart import draw

    try:
        chart = draw(result, args.chart)
    except OSError as error:
        raise CommandFailed(f"--chart {args.chart}: {error.strerror or error}") from None
    print(f"\nchart: {chart.resolve()}")
    print(
        f"archive: {args.archive_dir} (./dev archive {result.plan.bottles[0].bottle_id} {result.plan.start:%Y-%m-%d})"
    )
    print(f"finished in {time.perf_counter() - started:.1f} s")
    failures = result.failures()
    print("verdict: PASS" if not failures else "verdict: FAIL: " + "; ".join(failures))
    if failures:
        raise SystemExit(1)
