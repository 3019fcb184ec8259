"""Scale-out of the two background jobs: the same work done by 1, 2 and 4 worker processes side by side, each
taking work messages from one queue as the queue trigger's instances would, on one embedded store (SecantusDB
in its own process), in one run.

    python -m benchmarks.scaleout [--bottles 150] [--hours 4] [--sweep-bottles 20000] [--quick]

Reports: a backlog of source changes drained by the report feeds' processor. Checks: a fleet with bottles in
trouble for every check swept by the check partitions (the three checks' CHECK_PARTITIONS messages each).

The backlog: every bottle's heartbeats and opened/closed events of a few hours, ingested after the change
streams were positioned (so workers read real change streams, page by page), and drained with the clock an
hour on, so that the heartbeat tally's pass is due too (it counts the buffered heartbeats then). Per worker
count: changes/s through the processor (actions read from the feed and heartbeat documents the tally read),
and per change the commands (and writes) the workers sent. The partitions stay REPORTS_PARTITIONS per feed
whatever the worker count: a worker count above the partition count only adds idle workers, which is the
processor's rule on Cosmos DB too (one worker per physical partition at most).

What one 2-core machine shows: the per-change cost, which does not depend on the machine, and whether
throughput holds or grows as workers are added while the database itself competes for the same two cores;
not the throughput of many machines against a Cosmos DB account (docs/costs.md: "Workers and partitions").
"""

import argparse
import contextlib
import json
import multiprocessing
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from benchmarks.checks import runs as check_fleet
from benchmarks.harness import bench_client, print_table
from shared.bottles.provisioning import provision
from shared.bottles.spec import BottleSpec
from shared.consumers.plugged import dispatch, partition_of, process_partition
from shared.feeds.settling import SETTLE
from shared.ingestion.receive import receive
from shared.instants import utc_now
from shared.notifications.checks.partitions import CheckPartition, partitions
from shared.notifications.checks.run import run_check
from shared.notifications.documents import KINDS
from shared.reports.feeds import REPORT_FEEDS
from shared.settings import Settings, get_settings
from shared.store import schema
from shared.store.setup import ensure_store
from tools.arguments import positive_int
from tools.command_tally import CommandTally
from tools.local_store import secantus_process

DATABASE = "scaleout"
AHEAD = timedelta(hours=1) + SETTLE  # the drains' clock: every hour of the backlog closed and due
WORKER_COUNTS = (1, 2, 4)
READY = "ready"  # what a worker process says once it has imported the app and connected: timing starts after


def _await_ready(results: Any, count: int) -> None:
    for _ in range(count):
        assert results.get(timeout=120) == READY


@dataclass
class Drain:
    workers: int
    changes: int
    seconds: float
    commands: int
    writes: int


def _settings() -> Settings:
    return Settings(change_source="change_stream", reports_page_size=200, mongodb_database=DATABASE)


def _worker(uri: str, work: Any, results: Any) -> None:
    """A worker process: its own client, work messages from `work` until it gets None."""
    tally = CommandTally()
    client = bench_client(uri, [tally])
    db = client[DATABASE]
    settings = _settings()
    results.put(READY)
    while (item := work.get()) is not None:
        message, ahead = item
        before, writes = tally.count, tally.writes
        partition = partition_of(json.loads(message))
        run = process_partition(db, partition, now=utc_now() + ahead, settings=settings)
        results.put((run.changes, run.caught_up, tally.count - before, tally.writes - writes))
    client.close()


@contextlib.contextmanager
def _workers(uri: str, count: int) -> Iterator[tuple[Any, Any]]:
    context = multiprocessing.get_context("spawn")
    work, results = context.Queue(), context.Queue()
    processes = [context.Process(target=_worker, args=(uri, work, results)) for _ in range(count)]
    for process in processes:
        process.start()
    _await_ready(results, count)
    try:
        yield work, results
    finally:
        for _ in processes:
            work.put(None)
        for process in processes:
            process.join(timeout=60)


def _ingest_backlog(db: Any, bottles: int, hours: int) -> int:
    """Provision the fleet, then each bottle's half-hourly heartbeats and an opened/closed pair per hour,
    one request per bottle-hour; returns the events stored."""
    settings, now = _settings(), utc_now()
    keys = {}
    for b in range(bottles):
        spec = BottleSpec.model_validate(
            {"user_id": f"user-{b // 3}", "medication": "med", "schedule": {"every_hours": 12}}
        )
        keys[f"bottle-{b}"] = provision(
            db, f"bottle-{b}", spec, rotate_key=False, now=now, settings=settings
        ).device_key
    stored = 0
    start = now - timedelta(hours=hours)
    for hour in range(hours):
        at = start + timedelta(hours=hour)
        for bottle_id, key in keys.items():
            events = [
                {"type": "heartbeat", "time": at.isoformat()},
                {"type": "heartbeat", "time": (at + timedelta(minutes=30)).isoformat()},
                {"type": "opened", "time": (at + timedelta(minutes=5)).isoformat(), "mass_of_contents": 9.0,
                 "number_of_pills": 20},
                {"type": "closed", "time": (at + timedelta(minutes=6)).isoformat(), "mass_of_contents": 8.5,
                 "number_of_pills": 19, "pills_taken": 1},
            ]  # fmt: skip
            body = json.dumps({"events": events}).encode()
            stored += receive(db, bottle_id, key, body, now=utc_now(), settings=settings).stored
    return stored


def _drain(db: Any, uri: str, workers: int, positioned: list[dict[str, Any]], ahead: timedelta = AHEAD) -> Drain:
    """Reset reports and leases to the positioned state, then dispatch rounds until every partition is caught
    up, the work messages taken by `workers` processes side by side, all with the clock `ahead`."""
    for name in (schema.USER_HOURLY_REPORTS, schema.USER_DAILY_REPORTS, schema.LEASES):
        db[name].delete_many({})
    if positioned:
        db[schema.LEASES].insert_many([dict(lease) for lease in positioned])
    total = Drain(workers, 0, 0.0, 0, 0)
    with _workers(uri, workers) as (work, results):
        started = time.perf_counter()
        while True:
            messages: list[str] = []
            dispatch(db, now=utc_now() + ahead, settings=_settings(), send=messages.extend)
            for message in messages:
                work.put((message, ahead))
            outcomes = [results.get(timeout=600) for _ in messages]
            total.changes += sum(o[0] for o in outcomes)
            total.commands += sum(o[2] for o in outcomes)
            total.writes += sum(o[3] for o in outcomes)
            if all(o[1] for o in outcomes) and sum(o[0] for o in outcomes) == 0:
                break
        total.seconds = time.perf_counter() - started
    return total


def run(bottles: int, hours: int) -> str:
    """Drain the same backlog with each worker count; returns the printed table."""
    os.environ["MONGODB_DATABASE"] = DATABASE
    get_settings.cache_clear()
    with secantus_process() as uri:
        client = bench_client(uri)
        db = client[DATABASE]
        ensure_store(db, _settings(), on_cosmos=False)
        _drain(db, uri, 1, [], ahead=timedelta(0))  # positions the change streams and the tally before the traffic
        positioned = list(db[schema.LEASES].find())
        events = _ingest_backlog(db, bottles, hours)
        drains = [_drain(db, uri, workers, positioned) for workers in WORKER_COUNTS]
        client.close()
    base = drains[0]
    rows = [
        [
            str(d.workers),
            str(_settings().reports_partitions * len(REPORT_FEEDS)),
            f"{events}",
            f"{d.changes}",
            f"{d.changes / d.seconds:,.0f}",
            f"{(d.changes / d.seconds) / (base.changes / base.seconds):.2f}x",
            f"{d.commands / max(d.changes, 1):.3f}",
            f"{d.writes / max(d.changes, 1):.3f}",
        ]
        for d in drains
    ]
    return print_table(
        f"Report workers side by side: {bottles} bottles, {hours} h of backlog, worker processes on 2 cores",
        rows,
        ["workers", "partitions", "events", "changes", "changes/s", "vs 1 worker", "cmds/change", "writes/change"],
    )


# --- the check sweeps ----------------------------------------------------------------------------------------


def _sweeper(uri: str, work: Any, results: Any) -> None:
    """A check worker process: (kind, partition) messages from `work` until it gets None."""
    tally = CommandTally()
    client = bench_client(uri, [tally])
    db = client[DATABASE]
    results.put(READY)
    while (message := work.get()) is not None:
        partition = CheckPartition.from_message(json.loads(message))
        before = tally.count
        run = run_check(
            db,
            partition.kind,
            partition=partition.buckets,
            now=check_fleet.NOW,
            settings=check_fleet.SETTINGS,
            send=lambda body: None,
        )
        results.put((run.notified, tally.count - before))
    client.close()


def sweep_drains(uri: str, bottles: int, in_trouble: int) -> list[Drain]:
    """The same fleet (re-seeded before each count) swept by each worker count; `changes` = bottles notified."""
    client = bench_client(uri)
    db = client[DATABASE]
    ensure_store(db, check_fleet.SETTINGS, on_cosmos=False)
    drains = []
    for workers in WORKER_COUNTS:
        for name in (schema.BOTTLES, schema.BOTTLE_HEARTBEATS, schema.NOTIFICATIONS):
            db[name].delete_many({})
        check_fleet.seed(db, bottles, in_trouble)
        context = multiprocessing.get_context("spawn")
        work, results = context.Queue(), context.Queue()
        processes = [context.Process(target=_sweeper, args=(uri, work, results)) for _ in range(workers)]
        for process in processes:
            process.start()
        _await_ready(results, workers)
        messages = [p.message() for kind in KINDS for p in partitions(kind, check_fleet.SETTINGS)]
        started = time.perf_counter()
        for message in messages:
            work.put(message)
        outcomes = [results.get(timeout=600) for _ in messages]
        seconds = time.perf_counter() - started
        for _ in processes:
            work.put(None)
        for process in processes:
            process.join(timeout=60)
        notified = sum(o[0] for o in outcomes)
        drains.append(Drain(workers, notified, seconds, sum(o[1] for o in outcomes), 0))
    client.close()
    return drains


def sweep_table(bottles: int, in_trouble: int) -> str:
    os.environ["MONGODB_DATABASE"] = DATABASE
    get_settings.cache_clear()
    with secantus_process() as uri:
        drains = sweep_drains(uri, bottles, in_trouble)
    base = drains[0]
    rows = [
        [
            str(d.workers),
            str(check_fleet.SETTINGS.check_partitions * len(KINDS)),
            f"{bottles:,}",
            f"{d.changes:,}",
            f"{d.changes / d.seconds:,.0f}",
            f"{(d.changes / d.seconds) / (base.changes / base.seconds):.2f}x",
            f"{d.commands / max(d.changes, 1):.3f}",
        ]
        for d in drains
    ]
    return print_table(
        f"Check partitions side by side: {bottles:,} bottles, {in_trouble:,} in trouble per check, worker processes",
        rows,
        ["workers", "partitions", "bottles", "notified", "in trouble/s", "vs 1 worker", "cmds/bottle in trouble"],
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.scaleout", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--bottles", type=positive_int, default=150, help="bottles in the fleet (default 150)")
    parser.add_argument("--hours", type=positive_int, default=4, help="hours of backlog per bottle (default 4)")
    parser.add_argument(
        "--sweep-bottles", type=positive_int, default=20_000, help="bottles swept by the checks (default 20000)"
    )
    parser.add_argument("--quick", action="store_true", help="smaller fleets (30 bottles, 2 hours; 2,000 swept)")
    args = parser.parse_args(argv)
    run(30 if args.quick else args.bottles, 2 if args.quick else args.hours)
    sweeps = 2_000 if args.quick else args.sweep_bottles
    sweep_table(sweeps, sweeps // 20)


if __name__ == "__main__":
    main()
