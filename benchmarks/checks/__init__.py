"""Notification checks at fleet scale: database commands, wall time and peak memory per check run, the app's
indexed sweeps beside the seeds' per-bottle approach (one query per bottle), on the same data in the same run.

    python -m benchmarks.checks [--quick] [--full] [--sizes 10000,50000] [--trouble 0.01] [--peak 5000]

Each fleet is written straight into a fresh SecantusDB (bottle and heartbeat documents as provisioning and
ingestion leave them; no HTTP, to keep the setup short; through a client without the app's request timeouts,
which a loaded machine can exceed on a bulk insert of thousands), with the given share of bottles in trouble for each
check: left open, silent, and with a late dose. A last fleet keeps the largest size with a fifth of the trouble,
to show that a sweep's commands follow the bottles in trouble, not the fleet.

The per-bottle approach costs the same one query per bottle whatever the check, and ~1.4 ms a query here, so by
default it is measured for every check on the first fleet and for `silent` (the seeds' busiest: 50 K queries a
second at 30 M bottles) on the larger ones, which keeps the run near two and a half minutes; `--full` measures
it everywhere.

The server runs in a child process, so `tracemalloc` measures what the check itself holds (the app's process in
Azure), not the database. Times include the round trips to that local server; a real Cosmos DB adds network
latency per command, which makes the per-bottle approach (one round trip per bottle) slower still.

The morning peak (`peak`, its own table): one partition's pending notifications sent and marked by the app's
delivery, with a queue that takes SEND_MS a send (the Storage queue's round trip, which cannot be reached from
here), one after another (the baseline: the run before sends went side by side) and QUEUE_SEND_CONCURRENCY at
once: sends per second per worker, and the ratio.
"""

# The command apart from its runs (benchmarks/checks/runs.py): this module imports only the standard library and
# tools.arguments, the runs (the app, the store, pymongo, pydantic: seconds of imports) once the arguments are
# parsed, so that `--help` and a usage error come at once.

import argparse
import time

from tools.arguments import float_above, int_between

# The three kinds of trouble, then a fifth as many more of each, must fit in a fleet of distinct bottles.
MAX_TROUBLE = 0.25
MIN_FLEET = 100


def fleet_sizes(text: str) -> list[int]:
    """`--sizes`: comma-separated whole numbers, each a fleet large enough for its share of trouble."""
    size = int_between(MIN_FLEET)
    return [size(part.strip()) for part in text.split(",")]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.checks", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="1 K and 5 K bottles instead of 10 K and 50 K")
    parser.add_argument(
        "--sizes", type=fleet_sizes, help=f"comma-separated fleet sizes of at least {MIN_FLEET}, e.g. 10000,50000"
    )
    parser.add_argument(
        "--trouble",
        type=float_above(0, MAX_TROUBLE),
        default=0.01,
        help=f"share of bottles in trouble per check, at most {MAX_TROUBLE} (default 0.01)",
    )
    parser.add_argument("--full", action="store_true", help="measure the per-bottle approach for every check")
    parser.add_argument(
        "--peak",
        type=int_between(1, 100_000),
        default=None,
        help="pending notifications of the morning-peak table (default 5000, 1000 with --quick)",
    )
    parser.add_argument("--no-peak", action="store_true", help="skip the morning-peak table")
    args = parser.parse_args(argv)
    from benchmarks.checks import runs

    sizes = args.sizes
    started = time.perf_counter()
    runs.run(runs.default_fleets(args.quick, sizes, args.trouble, args.full))
    if not args.no_peak:
        runs.peak(args.peak or (1000 if args.quick else 5000))
    print(f"finished in {time.perf_counter() - started:.0f} s")
