"""Report consumer throughput, cost and lag on SecantusDB in-process (real change streams), beside the naive
approach (one `$inc` per event on the user-hour and user-day documents) fed by the same change streams with
the same data in the same run.

    python -m benchmarks.reports [--users 100] [--quick]

- steady stream: every bottle sends its half-hourly heartbeat (and now and then an opened/closed pair) in
  real time; the consumer runs after each half hour of traffic, as its timer would (the app's heartbeat tally
  counting each hour once it has closed), and once more when the last hour has closed.
- late burst: every bottle uploads hours of buffered events at once; the consumer runs then, and once the
  hour of the upload has closed.
- lag: events arrive at a steady rate while the consumer runs back to back (production adds up to one timer
  interval, `REPORTS_SCHEDULE`); the time from the start of an ingestion request to its event being visible
  in a report.

Per scenario: source changes per second through the consumer, database commands and writes per change, and
whether every user-hour matches the source afterwards (the naive approach cannot place a late heartbeat:
the change carries the heartbeat document, not the heartbeat).
"""

# The command apart from its runs (benchmarks/reports/runs.py): this module imports only the standard library and
# tools.arguments, the runs (the app, the store, pymongo, pydantic: seconds of imports) once the arguments are
# parsed, so that `--help` and a usage error come at once.

import argparse

from tools.arguments import positive_int


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.reports", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--users", type=positive_int, default=None, help="users, three bottles each (default 100; quick 40)"
    )
    parser.add_argument("--quick", action="store_true", help="a smaller, shorter run (about 30 s)")
    args = parser.parse_args(argv)
    from benchmarks.reports import runs

    runs.run(args.users or (40 if args.quick else 100), quick=args.quick)
