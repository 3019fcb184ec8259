"""Two ways to sweep a check partition on SecantusDB: the app's one query per partition (a range on `bucket` and
a range on the status field), beside one query per bucket (equality on `bucket`, the status range served exactly
by the sweep index), for every partition of a check; and, for scale, the one fleet-wide query the checks made
before they were partitioned.

    python -m benchmarks.sweep_queries [--sizes 1000,10000,50000] [--partitions 4]

Each fleet is heartbeat documents as provisioning and heartbeats leave them (96 heartbeat times each, 1 % of the
bottles silent), written straight into a fresh SecantusDB in a child process with the app's indexes; the query is
the silent check's detect sweep, as shared/notifications/checks/rules.py builds it, projected to `_id` (the sweep's
reads are not what is compared). SecantusDB bounds one range per query, so it serves the per-partition query by
its leading `bucket` range and filters the partition's documents, and the per-bucket query exactly; MongoDB and
Cosmos DB serve the per-partition query from the index (docs/checks.md, "One range query per partition").
"""

import argparse
import contextlib
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from pymongo import MongoClient
from pymongo.database import Database

from benchmarks.harness import print_table
from shared.notifications.checks.rules import CHECKS
from shared.settings import Settings
from shared.store import schema
from shared.store.partitioning import BUCKET_FIELD, BUCKETS, BucketRange, bucket_of
from shared.store.setup import ensure_store
from tools.arguments import int_between
from tools.command_tally import CommandTally
from tools.local_store import secantus_process

NOW = datetime(2026, 5, 4, 12, 0, tzinfo=UTC)
SETTINGS = Settings()
SILENT_SHARE = 100  # one bottle in this many is silent
FLEET_WIDE = "fleet_wide"  # the heartbeat documents again, under the sweep index the checks had before partitions
INSERT_CHUNK = 2000


@contextlib.contextmanager
def fresh_database(uri: str, name: str) -> Iterator[tuple[Database[Any], CommandTally]]:
    tally = CommandTally()
    client: MongoClient[Any] = MongoClient(uri, event_listeners=[tally], tz_aware=True)
    db = client[name]
    ensure_store(db, SETTINGS, on_cosmos=False)
    db[FLEET_WIDE].create_index([("silent_pending", 1), ("alive_at", 1)], name="silent_check")
    try:
        yield db, tally
    finally:
        client.drop_database(name)
        client.close()


def heartbeats(n: int) -> dict[str, Any]:
    bottle_id = f"bottle-{n:06d}"
    last = NOW - (timedelta(hours=3) if n % SILENT_SHARE == 0 else timedelta(minutes=10))
    return {
        "_id": bottle_id,
        "bottle_id": bottle_id,
        "user_id": f"user-{n // 3:06d}",
        "medication": "Cordrazine",
        "last": last,
        "alive_at": last,
        "silent_pending": True,
        "times": [last - timedelta(minutes=30 * i) for i in range(96)],
        "received_at": last,
        BUCKET_FIELD: bucket_of(bottle_id),
    }


def seed(db: Database[Any], bottles: int) -> None:
    for first in range(0, bottles, INSERT_CHUNK):
        documents = [heartbeats(n) for n in range(first, min(first + INSERT_CHUNK, bottles))]
        db[schema.BOTTLE_HEARTBEATS].insert_many(documents, ordered=False)
        db[FLEET_WIDE].insert_many(documents, ordered=False)


def detect_selector() -> Mapping[str, Any]:
    [detect, _resolve] = CHECKS["silent"].sweeps(NOW, SETTINGS)
    return detect.selector


def per_partition(db: Database[Any], partitions: int) -> int:
    """The app's query: one per partition, its bucket range first."""
    found = 0
    for index in range(partitions):
        within = BucketRange(index, partitions).selector(BUCKET_FIELD)
        found += len(list(db[schema.BOTTLE_HEARTBEATS].find({**within, **detect_selector()}, {"_id": 1})))
    return found


def per_bucket(db: Database[Any], partitions: int) -> int:
    """The alternative: one query per bucket of each partition, equality on `bucket`."""
    found = 0
    for index in range(partitions):
        buckets = BucketRange(index, partitions)
        for bucket in range(buckets.low, buckets.high):
            query = {BUCKET_FIELD: bucket, **detect_selector()}
            found += len(list(db[schema.BOTTLE_HEARTBEATS].find(query, {"_id": 1})))
    return found


def fleet_wide(db: Database[Any], partitions: int) -> int:
    """Before partitions: one query for the whole fleet."""
    return len(list(db[FLEET_WIDE].find(detect_selector(), {"_id": 1})))


SHAPES: list[tuple[str, Callable[[Database[Any], int], int]]] = [
    ("one query per partition (app)", per_partition),
    ("one query per bucket", per_bucket),
    ("one fleet-wide query (unpartitioned)", fleet_wide),
]


def run(sizes: list[int], partitions: int = 4, repeats: int = 2) -> str:
    """Measure each shape on each fleet size (the best of `repeats` runs); print the table and return it."""
    rows: list[list[str]] = []
    with secantus_process() as uri:
        for number, bottles in enumerate(sizes):
            with fresh_database(uri, f"bench_sweeps_{number}") as (db, tally):
                seed(db, bottles)
                silent = len(range(0, bottles, SILENT_SHARE))
                for name, shape in SHAPES:
                    timings = []
                    for _ in range(repeats):
                        before, started = tally.count, time.perf_counter()
                        found = shape(db, partitions)
                        timings.append((time.perf_counter() - started, tally.count - before))
                    assert found == silent, (name, found, silent)
                    seconds, commands = min(timings)
                    rows.append([f"{bottles:,}", name, f"{commands:,}", f"{seconds:.3f}", f"{found:,}"])
    title = (
        f"Silent-check detect sweep on SecantusDB: {partitions} partitions over {BUCKETS} buckets, "
        f"1 bottle in {SILENT_SHARE} silent (server in a child process)"
    )
    return print_table(title, rows, ["bottles", "query", "commands", "seconds", "found"])


def fleet_sizes(text: str) -> list[int]:
    size = int_between(SILENT_SHARE)
    return [size(part.strip()) for part in text.split(",")]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.sweep_queries",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--sizes", type=fleet_sizes, default=[1_000, 10_000, 50_000], help="comma-separated fleet sizes"
    )
    parser.add_argument("--partitions", type=int_between(1, BUCKETS), default=4, help="partitions (default 4)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    run(args.sizes, args.partitions)
    print(f"finished in {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
