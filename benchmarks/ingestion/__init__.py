"""Ingestion throughput and cost: events/s, database commands and CPU per event, through the real HTTP function,
beside the seeds' approach as a whole request of its own, measured on the same server in the same run.

    python -m benchmarks.ingestion [--events 4000] [--bottles 50] [--fleets 100,2000,20000] [--steady 1000]

Single events at steady state, at several fleet sizes (default 100, 2,000 and 20,000 bottles), each on a fresh
server: every bottle provisioned with a full heartbeat window (a heartbeat every 30 minutes for 24 hours, as
ingestion leaves it) and heard from again every 30 simulated minutes, the server clock following, so each
heartbeat sets a bit of a ring in its window and is checked for a repeat; the usual mix (an opened/closed pair
among every ten heartbeats, the close a dose). Beside the app: the seeds' one insert per event as a whole
request, and the "store floor" of the same stream: the commands the app's requests send, computed beforehand
and sent bare (a heartbeat's ring update; an action's insert and status update, and a dose's read of its bottle
first), an insert of a small document (the seeds' write), and a findAndModify of a heartbeat document (what a
heartbeat cost the app until it wrote by update: SecantusDB scans the collection for it, so it grows with the
fleet). The goals, printed below the table: the app at
20,000 bottles within 1.3x of its speed at 100, and within 1.5x of the store floor at every size. Until this
version these events were 36-42 hours old, outside the 24-hour window: no ring bit was set and no repeat check
ran.

Batches of 100 (50 bottles taking turns), beside the seeds' one insert per event and the seeds' `insert_many` of
the same 100 events a request (the fair baseline for a batch). Each bottle's events are a heartbeat slot (5
minutes) apart and each request is sent as its last event ends, the server clock following (a device uploading 8
hours it buffered), so that every event is new and both sides store all of them: the table's `stored` column
says so. Until this version the events were a second apart: the app kept one heartbeat per 5-minute slot (about
17 of a request's 100) and answered the rest as repeats, while `insert_many` stored all 100, so the two sides did
not do the same work.

The baseline is the seeds' approach as a whole request, paying what the app's request pays for the same contract:
the same HTTP function layer (the route's id check, the error mapping, the invocation log line, the JSON answer),
the same body checks (size, media type, key shape, every event validated), the device key checked against the
bottle's registry entry (held in memory for every bottle: the cheapest way the seeds could authenticate a device
and copy the owner and medication onto each event, as their sample documents carry them; the app reads the bottle
for each request with an opened/closed event, as a rotated-out key must be refused on every worker at once),
and then one insert per event (or one `insert_many` a request) under the same retry policy and request
deadline, idempotent (`_id` is the bottle and the event id, so a retried request stores nothing twice), into a
collection with the index the seeds' per-bottle queries need (`(bottle_id, time)`). Both approaches, and the
store floor, run on the app's own database, set up with its indexes.

The columns: events/s (wall clock; this machine is noisy, so compare the ratios of one run), database commands
per event, and CPU per event (the process's CPU time: the app's and the in-process server's together, the steadier
figure on a loaded machine).
"""

# The command apart from its runs (benchmarks/ingestion/runs.py): this module imports only the standard library
# and tools.arguments, the runs (the app, the store, pymongo, pydantic: seconds of imports) once the arguments are
# parsed, so that `--help` and a usage error come at once.

import argparse

from tools.arguments import int_between, positive_int

MAX_EVENTS = 6 * 3600  # events per batch approach (--events), and single events per fleet (--steady)
FLEETS = (100, 2_000, 20_000)
QUICK_FLEETS = (100, 1_000, 5_000)
STEADY_EVENTS = 1000  # single events per approach and fleet (a quick run: 300)
MAX_FLEET = 100_000  # seeding takes about 3 s per thousand bottles on 2 busy cores


def fleet_sizes(text: str) -> tuple[int, ...]:
    """`--fleets`: comma-separated whole numbers of bottles, each from 1 to MAX_FLEET."""
    size = int_between(1, MAX_FLEET)
    return tuple(sorted({size(part.strip()) for part in text.split(",")}))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.ingestion",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--events",
        type=int_between(1, MAX_EVENTS),
        default=4000,
        help=f"events per batch approach, at most {MAX_EVENTS:,} (default 4000)",
    )
    parser.add_argument("--bottles", type=positive_int, default=50, help="bottles sending batches (default 50)")
    parser.add_argument(
        "--fleets",
        type=fleet_sizes,
        default=FLEETS,
        help=f"fleet sizes for single events at steady state, each at most {MAX_FLEET:,} (default 100,2000,20000)",
    )
    parser.add_argument(
        "--steady",
        type=int_between(1, MAX_EVENTS),
        default=STEADY_EVENTS,
        help=f"single events per approach and fleet (default {STEADY_EVENTS})",
    )
    args = parser.parse_args(argv)
    from benchmarks.ingestion import runs

    runs.run(args.events, args.bottles, args.fleets, args.steady)
