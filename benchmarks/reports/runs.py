"""The runs of the report consumer's benchmark (`python -m benchmarks.reports`, and a part of `./dev bench`): what
they measure and how, benchmarks/reports/__init__.py."""

import contextlib
import json
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pymongo.database import Database

from benchmarks.harness import print_table, secantus_store
from shared.bottles.provisioning import provision
from shared.bottles.spec import BottleSpec
from shared.consumers.plugged import dispatch, partition_of, process_partition
from shared.feeds.sources import MAX_AWAIT_MS, PIPELINE
from shared.ingestion.receive import receive
from shared.instants import clock_restored, set_clock, utc_now
from shared.reports.documents import COUNTERS, daily_id, hourly_id, parse_hourly_id
from shared.reports.tally import counted_from
from shared.settings import Settings
from shared.store import schema
from shared.store.retries import RetryPolicy
from tools.command_tally import CommandTally
from tools.report_truth import source_totals

SETTINGS = Settings(change_source="change_stream", reports_page_size=500)
POLICY = RetryPolicy.from_settings(SETTINGS)
NAIVE_HOURLY, NAIVE_DAILY = "naive_hourly_reports", "naive_daily_reports"
APP = "app: actions feed + hourly tally"
# --- the fleet and its traffic ------------------------------------------------------------------------------


def run_consumer(db: Any, settings: Settings, *, now: Any) -> int:
    """One dispatch of the report feeds and a worker run per partition, one after another; how many ran."""
    messages: list[str] = []
    dispatch(db, now=now, settings=settings, send=messages.extend)
    for body in messages:
        process_partition(db, partition_of(json.loads(body)), now=now, settings=settings)
    return len(messages)


def provision_fleet(db: Database[Any], users: int, now: datetime) -> dict[str, str]:
    """Three bottles per user; returns each bottle's device key."""
    keys = {}
    for u in range(users):
        for b in range(3):
            spec = BottleSpec.model_validate(
                {"user_id": f"user-{u}", "medication": f"med-{b}", "schedule": {"every_hours": 12}}
            )
            bottle_id = f"bottle-{u}-{b}"
            provisioned = provision(db, bottle_id, spec, rotate_key=False, now=now, settings=SETTINGS)
            keys[bottle_id] = provisioned.device_key or ""
    return keys


def events_at(at: datetime, with_dose: bool) -> list[dict[str, Any]]:
    """A heartbeat, and on a dose slot an opened/closed pair a minute later."""
    events: list[dict[str, Any]] = [{"type": "heartbeat", "time": at.isoformat()}]
    if with_dose:
        reading = {"number_of_pills": 30, "mass_of_contents": 15.0}
        events.append({"type": "opened", "time": (at + timedelta(minutes=1)).isoformat(), **reading})
        closing = {"time": (at + timedelta(minutes=2)).isoformat(), **reading, "pills_taken": 1}
        events.append({"type": "closed", **closing})
    return events


def post(db: Database[Any], bottle_id: str, key: str, events: list[dict[str, Any]], now: datetime) -> int:

    body = json.dumps({"events": events}).encode()
    return receive(db, bottle_id, key, body, now=now, settings=SETTINGS).stored


# --- the naive approach ---------------------------------------------------------------------------------------


class NaiveConsumer:
    """One `$inc` per event on the user-hour and the user-day document, from the same change streams.

    A heartbeat change carries the whole heartbeat document, so the naive consumer can only count it in the
    hour of the bottle's newest heartbeat (`last`); and a replayed change is counted twice. Like the app's
    consumer it is a timer: each run opens its streams at the tokens the last run ended on."""

    def __init__(self, db: Database[Any]) -> None:
        self._db = db
        self._tokens: dict[str, Any] = {}
        self.run()  # positioned before the traffic starts

    def run(self) -> int:
        done = 0
        for name in (schema.BOTTLE_ACTIONS, schema.BOTTLE_HEARTBEATS):
            with self._db[name].watch(
                PIPELINE,
                full_document="updateLookup",
                resume_after=self._tokens.get(name),
                batch_size=500,
                max_await_time_ms=MAX_AWAIT_MS,
            ) as stream:
                while (change := stream.try_next()) is not None:
                    self._count(name, change["fullDocument"])
                    done += 1
                self._tokens[name] = stream.resume_token
        return done

    def _count(self, collection: str, doc: dict[str, Any]) -> None:
        if collection == schema.BOTTLE_ACTIONS:
            taken = doc.get("pills_taken", 0)
            closing = doc["action"] == "closed"
            counts = {"opened": int(not closing), "closed": int(closing), "doses": int(taken > 0), "pills_taken": taken}
            moment = doc["time"]
        else:
            counts, moment = {"heartbeats": 1}, doc["last"]
        user, bottle = doc["user_id"], doc["bottle_id"]
        increments = {**counts, **{f"bottles.{bottle}.{k}": v for k, v in counts.items()}}
        for name, report_id in ((NAIVE_HOURLY, hourly_id(user, moment)), (NAIVE_DAILY, daily_id(user, moment))):
            self._db[name].update_one(
                {"_id": report_id, "user_id": user},
                {"$inc": increments, "$set": {"updated_at": utc_now()}},
                upsert=True,
            )


# --- measuring ------------------------------------------------------------------------------------------------


@dataclass
class Row:
    scenario: str
    approach: str
    changes: int
    seconds: float
    commands: int
    writes: int
    hours_right: float

    @property
    def per_second(self) -> float:
        return self.changes / self.seconds if self.seconds else 0.0


@dataclass
class Meter:
    seconds: float = 0.0
    commands: int = 0
    writes: int = 0

    def time(self, counted: CommandTally, work: Callable[[], Any]) -> None:
        commands, writes, start = counted.count, counted.writes, time.perf_counter()
        work()
        self.seconds += time.perf_counter() - start
        self.commands += counted.count - commands
        self.writes += counted.writes - writes


def share_right(db: Database[Any], collection: str, truth: dict[tuple[str, datetime], tuple[int, ...]]) -> float:
    """The share of the source's user-hours whose report has exactly the source's totals."""
    found = {parse_hourly_id(doc["_id"]): tuple(doc.get(c, 0) for c in COUNTERS) for doc in db[collection].find()}
    return sum(found.get(key) == value for key, value in truth.items()) / len(truth) if truth else 1.0


def scenario(
    db: Database[Any],
    counted: CommandTally,
    name: str,
    traffic: Iterator[Callable[[], int]],
) -> list[Row]:
    """Play the traffic in slices; after each, let both consumers catch up; time and count only them. The app's
    consumer runs once more when the last hour has closed, for its tally to count it."""
    ours, naive_meter = Meter(), Meter()
    run_consumer(db, SETTINGS, now=utc_now())  # positioned on its change streams before the traffic starts
    naive = NaiveConsumer(db)
    changes = 0
    for send in traffic:
        changes += send()
        ours.time(counted, lambda: run_consumer(db, SETTINGS, now=utc_now()))
        naive_meter.time(counted, naive.run)
    ours.time(counted, lambda: run_consumer(db, SETTINGS, now=counted_from(utc_now())))
    truth = source_totals(db)
    return [
        Row(name, "naive $inc per event", changes, naive_meter.seconds, naive_meter.commands, naive_meter.writes,
            share_right(db, NAIVE_HOURLY, truth)),
        Row(name, APP, changes, ours.seconds, ours.commands, ours.writes,
            share_right(db, schema.USER_HOURLY_REPORTS, truth)),
    ]  # fmt: skip


@contextlib.contextmanager
def server_clock(start: datetime) -> Iterator[list[datetime]]:
    """A settable server clock for the block, starting at `start`."""
    clock = [start]
    with clock_restored():
        set_clock(lambda: clock[0])
        yield clock


def steady_traffic(
    db: Database[Any], keys: dict[str, str], slices: int, clock: list[datetime]
) -> Iterator[Callable[[], int]]:
    """Half-hour slices of live traffic from the clock's time on: each bottle's heartbeat, a dose pair for
    one bottle in six. Each event is received at its own time and the clock then moves to the end of the
    slice, when the consumer runs: the feed and the consumer read one clock, as they do in production."""
    start = clock[0]
    for s in range(slices):
        at = start + timedelta(minutes=30 * s)

        def send(at: datetime = at, s: int = s) -> int:
            stored = 0
            for i, (bottle_id, key) in enumerate(keys.items()):
                moment = at + timedelta(seconds=i % 1500)
                stored += post(db, bottle_id, key, events_at(moment, (i + s) % 6 == 0), now=moment)
            clock[0] = at + timedelta(minutes=30)
            return stored

        yield send


def burst_traffic(db: Database[Any], keys: dict[str, str], hours: int) -> Iterator[Callable[[], int]]:
    """Every bottle uploads `hours` of buffered heartbeats and two doses, all at once."""

    def send() -> int:
        now = utc_now()
        stored = 0
        for i, (bottle_id, key) in enumerate(keys.items()):
            first = now - timedelta(hours=hours, seconds=-(i % 1500))
            events = [e for h in range(2 * hours) for e in events_at(first + timedelta(minutes=30 * h), h % 12 == 3)]
            stored += post(db, bottle_id, key, events, now=now)
        return stored

    yield send


def lag(
    db: Database[Any],
    keys: dict[str, str],
    consume: Callable[[], Any],
    opened: Callable[[str], int],
    *,
    rate: float,
    seconds: float,
) -> list[float]:
    """Seconds from the start of each probe's ingestion request to its event being visible in a report:
    `opened(user)` is what the reports show as that user's opened events."""
    probe = next(iter(keys))
    probe_user = f"user-{probe.split('-')[1]}"
    sent: list[float] = []
    visible: list[float] = []
    stop = threading.Event()
    baseline = opened(probe_user)

    def produce() -> None:
        bottles = list(keys.items())
        interval, due, i = 1.0 / rate, time.perf_counter(), 0
        end = due + seconds
        while due < end:
            time.sleep(max(0.0, due - time.perf_counter()))
            now = utc_now()
            if i % 10 == 0:  # a probe: an opened event of the probe bottle
                sent.append(time.perf_counter())
                event = {"type": "opened", "time": now.isoformat(), "number_of_pills": 3, "mass_of_contents": 1.0}
                post(db, probe, keys[probe], [event], now=now)
            else:
                bottle_id, key = bottles[i % len(bottles)]
                post(db, bottle_id, key, [{"type": "heartbeat", "time": now.isoformat()}], now=now)
            i += 1
            due += interval
        stop.set()

    def watch() -> None:  # a reporting reader polling the probe user's reports
        while not (stop.is_set() and len(visible) >= len(sent)):
            seen = opened(probe_user) - baseline
            visible.extend([time.perf_counter()] * max(0, min(seen, len(sent)) - len(visible)))
            time.sleep(0.01)

    threads = [threading.Thread(target=produce), threading.Thread(target=watch)]
    for thread in threads:
        thread.start()
    while threads[1].is_alive():
        consume()
    for thread in threads:
        thread.join()
    return [v - s for s, v in zip(sent, visible, strict=True)]


def opened_in(db: Database[Any], collection: str) -> Callable[[str], int]:
    def opened(user_id: str) -> int:
        return sum(doc.get("opened", 0) for doc in db[collection].find({"user_id": user_id}))

    return opened


def run(users: int, *, quick: bool = False) -> str:
    """Each scenario on a fresh server, so that neither approach inherits the other's data."""
    slices, hours = (4, 3) if quick else (6, 4)
    rate, seconds = (80.0, 4.0) if quick else (120.0, 12.0)
    rows: list[Row] = []
    lags: dict[str, list[float]] = {}
    with secantus_store("bench_reports") as (db, counted):
        keys = provision_fleet(db, users, utc_now() - timedelta(days=2))
        with server_clock(utc_now() - timedelta(minutes=30 * slices)) as clock:
            rows += scenario(db, counted, "steady stream", steady_traffic(db, keys, slices, clock))
    with secantus_store("bench_reports") as (db, counted):
        keys = provision_fleet(db, users, utc_now() - timedelta(days=2))
        rows += scenario(db, counted, "late burst", burst_traffic(db, keys, hours))
    with secantus_store("bench_reports") as (db, _counted):
        keys = provision_fleet(db, users, utc_now() - timedelta(days=2))
        naive = NaiveConsumer(db)
        lags["naive $inc per event"] = lag(db, keys, naive.run, opened_in(db, NAIVE_HOURLY), rate=rate, seconds=seconds)
    with secantus_store("bench_reports") as (db, _counted):
        keys = provision_fleet(db, users, utc_now() - timedelta(days=2))
        run_consumer(db, SETTINGS, now=utc_now())
        ours = opened_in(db, schema.USER_HOURLY_REPORTS)
        consume = lambda: run_consumer(db, SETTINGS, now=utc_now())  # noqa: E731
        lags[APP] = lag(db, keys, consume, ours, rate=rate, seconds=seconds)
    return report(rows, lags, users, rate)


def report(rows: list[Row], lags: dict[str, list[float]], users: int, rate: float) -> str:
    table = []
    for naive, ours in zip(rows[::2], rows[1::2], strict=True):
        for row in (naive, ours):
            table.append(
                [
                    row.scenario,
                    row.approach,
                    f"{row.changes:,}",
                    f"{row.per_second:,.0f}",
                    f"{row.commands / row.changes:.3f}",
                    f"{row.writes / row.changes:.3f}",
                    f"{row.hours_right:.0%}",
                    "1.00x" if row is naive else f"{row.per_second / naive.per_second:.2f}x",
                    "1.0x"
                    if row is naive
                    else f"{(naive.commands / naive.changes) / (row.commands / row.changes):.1f}x",
                ]
            )
    header = ["scenario", "approach", "changes", "changes/s", "cmds/change", "writes/change", "hours right",
              "speed vs naive", "fewer cmds"]  # fmt: skip
    title = f"Report consumer on SecantusDB in-process ({users} users, {users * 3} bottles)"
    text = print_table(title, table, header)
    lag_rows = [
        [name, f"{len(values)}", f"{statistics.median(values):.2f}", f"{_p95(values):.2f}", f"{max(values):.2f}"]
        for name, values in lags.items()
        if values
    ]
    text += "\n\n" + print_table(
        f"Lag from ingestion to a visible report at ~{rate:.0f} events/s, consumer back to back (seconds; "
        "production adds up to one REPORTS_SCHEDULE interval)",
        lag_rows,
        ["approach", "probes", "p50", "p95", "max"],
    )
    return text


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
