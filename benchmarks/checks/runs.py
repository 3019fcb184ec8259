"""The runs of the notification checks' benchmark (`python -m benchmarks.checks`, and a part of `./dev bench`): what
they measure and how, benchmarks/checks/__init__.py."""

import contextlib
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pymongo.database import Database
from pymongo.errors import DuplicateKeyError

from benchmarks.harness import installed_store, print_table, seeding_database
from shared.devices.heartbeat_document import (
    ALIVE_AT,
    KEY,
    LAST,
    RING,
    RING_TIME,
    SILENT_PENDING,
    Window,
    key_digest,
    place,
    rewritten_ring,
)
from shared.doses.due_tracking import plan_of
from shared.notifications import delivery
from shared.notifications.checks.partitions import partitions
from shared.notifications.checks.run import run_check
from shared.notifications.documents import KINDS, Episode, Kind, notification_document
from shared.settings import Settings
from shared.store import schema
from shared.store.partitioning import BUCKET_FIELD, BucketRange, bucket_of
from shared.store.retries import RetryPolicy
from tools.command_tally import CommandTally
from tools.local_store import secantus_process

NOW = datetime(2026, 5, 4, 12, 0, tzinfo=UTC)
EVERY = timedelta(hours=8)
GRACE = timedelta(minutes=60)
PER_BOTTLE_NOTIFICATIONS = "notifications_per_bottle"  # the baseline writes apart, so both see the same fleet
INSERT_CHUNK = 5000
SETTINGS = Settings()
WINDOW = Window(SETTINGS.heartbeat_window_hours)


@dataclass(frozen=True)
class Fleet:
    bottles: int
    in_trouble: int  # per check
    baseline: tuple[Kind, ...] = KINDS  # the checks the per-bottle approach is measured for
    then_in_trouble: int | None = None  # then, on the same fleet, this many more in trouble (the app only)


@dataclass
class Result:
    commands: int
    seconds: float
    peak_bytes: int
    notified: int


# --- the database ---------------------------------------------------------------------------------------------


@contextlib.contextmanager
def fresh_database(uri: str, name: str) -> Iterator[tuple[Database[Any], CommandTally]]:
    tally = CommandTally()
    with installed_store(uri, name, SETTINGS, [tally]) as db:
        try:
            yield db, tally
        finally:
            db.client.drop_database(name)


def seed(db: Database[Any], bottles: int, in_trouble: int) -> None:
    """Bottles and heartbeat documents as provisioning and ingestion leave them: every bottle closed, heard
    from ten minutes ago and dosed an hour ago, except `in_trouble` of them for each check (left open: the
    first ones, late: the next ones, silent: the next ones)."""
    for first in range(0, bottles, INSERT_CHUNK):
        numbers = range(first, min(first + INSERT_CHUNK, bottles))
        db[schema.BOTTLES].insert_many([_bottle(n, _trouble(n, 0, in_trouble)) for n in numbers], ordered=False)
        heartbeats = [_heartbeats(n, _trouble(n, 0, in_trouble) == "silent") for n in numbers]
        db[schema.BOTTLE_HEARTBEATS].insert_many(heartbeats, ordered=False)


def add_trouble(db: Database[Any], first: int, count: int) -> None:
    """Put `count` more bottles in trouble for each check, from bottle number `first` on."""
    for n in range(first, first + 3 * count):
        kind = _trouble(n, first, count)
        db[schema.BOTTLES].replace_one({"_id": _id(n), "bottle_id": _id(n)}, _bottle(n, kind))
        db[schema.BOTTLE_HEARTBEATS].replace_one({"_id": _id(n), "bottle_id": _id(n)}, _heartbeats(n, kind == "silent"))


def _trouble(n: int, first: int, count: int) -> Kind | None:
    index = (n - first) // count if n >= first else len(KINDS)
    return ("left_open", "late_dose", "silent")[index] if index < len(KINDS) else None


def _id(n: int) -> str:
    return f"bottle-{n:06d}"


def _bottle(n: int, trouble: Kind | None) -> dict[str, Any]:
    left_open = trouble == "left_open"
    last_dose = NOW - (timedelta(hours=10) if trouble == "late_dose" else timedelta(hours=1))
    action_time = NOW - timedelta(minutes=20) if left_open else last_dose
    provisioned = NOW - timedelta(days=30)
    return {
        "_id": _id(n),
        "bottle_id": _id(n),
        "user_id": f"user-{n // 3:06d}",
        "medication": "Cordrazine",
        "schedule": {"every_hours": 8},
        "grace_minutes": 60,
        "key_hash": "0" * 64,
        "provisioned_at": provisioned,
        "updated_at": provisioned,
        "schedule_from": provisioned,
        "last_action": "opened" if left_open else "closed",
        "last_action_time": action_time,
        "open_since": action_time if left_open else None,
        "open_pending": True,
        "last_dose_time": last_dose,
        "doses": [last_dose - EVERY, last_dose],
        "dose_due": last_dose + EVERY,
        "dose_late_at": last_dose + EVERY + GRACE,
        "dose_pending": True,
        "bucket": bucket_of(_id(n)),
    }


def _heartbeats(n: int, silent: bool) -> dict[str, Any]:
    """A heartbeat document at steady state: a heartbeat every 30 minutes for the window's 24 hours, up to
    ten minutes ago (three hours ago for a silent bottle), as ingestion leaves it."""
    last = NOW - (timedelta(hours=3) if silent else timedelta(minutes=10))
    times = [last - timedelta(minutes=30 * i) for i in range(48)]
    placed = [p for p in (place(t, last, WINDOW) for t in times) if p is not None]
    return {
        "_id": _id(n),
        "bottle_id": _id(n),
        BUCKET_FIELD: bucket_of(_id(n)),
        KEY: key_digest("0" * 64),
        "user_id": f"user-{n // 3:06d}",
        "medication": "Cordrazine",
        LAST: last,
        ALIVE_AT: last,
        SILENT_PENDING: True,
        RING_TIME: last,
        RING: rewritten_ring({}, placed, last, WINDOW),
    }


# --- the two approaches ---------------------------------------------------------------------------------------


def sweep(db: Database[Any], kind: Kind) -> int:
    """The app: one run of the check, as its timer dispatches it: a run on each of its partitions (here one
    after the other; in Azure side by side)."""
    sent: list[str] = []
    runs = [
        run_check(
            db,
            kind,
            partition=partition.buckets,
            now=NOW,
            settings=SETTINGS,
            send=sent.extend,
            sleep=_no_wait,  # as the function runs it: a late-dose run counts its batches to pace them
        )
        for partition in partitions(kind, SETTINGS)
    ]
    return sum(run.notified for run in runs)


def _no_wait(seconds: float) -> None:
    """A paced sweep's wait, not waited: the benchmark measures the work (a sweep this small is not paced)."""


def per_bottle(db: Database[Any], kind: Kind) -> int:
    """The seeds: list the fleet, read each bottle's status with its own query, decide in Python, and write a
    notification for each bottle in trouble."""
    notified = 0
    collection = db[schema.BOTTLE_HEARTBEATS] if kind == "silent" else db[schema.BOTTLES]
    for listed in db[schema.BOTTLES].find({}, {"_id": 1}):
        bottle_id = listed["_id"]
        document = collection.find_one({"_id": bottle_id, "bottle_id": bottle_id})
        if document is None:
            continue
        for start in _episodes(kind, document):
            episode = Episode(bottle_id, document["user_id"], document["medication"], kind, start)
            with contextlib.suppress(DuplicateKeyError):
                db[PER_BOTTLE_NOTIFICATIONS].insert_one(notification_document(episode, NOW))
                notified += 1
    return notified


def _episodes(kind: Kind, document: dict[str, Any]) -> list[datetime]:
    if kind == "silent":
        alive_at: datetime = document["alive_at"]
        return [alive_at] if alive_at < NOW - timedelta(minutes=SETTINGS.silent_minutes) else []
    if kind == "left_open":
        opened: datetime | None = document.get("open_since")
        limit = NOW - timedelta(minutes=SETTINGS.left_open_minutes)
        return [opened] if document.get("last_action") == "opened" and opened and opened < limit else []
    return plan_of(document).review(document["dose_due"], document.get("doses", []), NOW).late


def measure(tally: CommandTally, action: Callable[[], int]) -> Result:
    """Commands, wall time and peak Python memory of one run."""
    before = tally.count
    tracemalloc.start()
    started = time.perf_counter()
    try:
        notified = action()
        seconds = time.perf_counter() - started
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return Result(tally.count - before, seconds, peak, notified)


# --- the report -----------------------------------------------------------------------------------------------


def run(fleets: list[Fleet] | None = None) -> str:
    """Measure every fleet; print the table and return it."""
    fleets = fleets or default_fleets()
    rows: list[list[str]] = []
    with secantus_process(expire=False) as uri:
        for number, fleet in enumerate(fleets):
            name = f"bench_checks_{number}"
            with fresh_database(uri, name) as (db, tally), seeding_database(uri, name) as seeding:
                seed(seeding, fleet.bottles, fleet.in_trouble)
                for kind in KINDS:
                    rows += _rows(fleet.bottles, fleet.in_trouble, kind, db, tally, baseline=kind in fleet.baseline)
                if fleet.then_in_trouble:
                    add_trouble(seeding, 3 * fleet.in_trouble, fleet.then_in_trouble)
                    for kind in KINDS:
                        rows += _rows(fleet.bottles, fleet.then_in_trouble, kind, db, tally, baseline=False)
    header = [
        "check", "bottles", "in trouble", "approach", "commands", "per bottle in trouble", "seconds", "peak MiB",
        "notified", "fewer commands", "faster", "less memory",
    ]  # fmt: skip
    title = "Notification checks on SecantusDB (server in a child process): one run per check"
    return print_table(title, rows, header)


def _rows(
    bottles: int, in_trouble: int, kind: Kind, db: Database[Any], tally: CommandTally, *, baseline: bool
) -> list[list[str]]:
    seeds = measure(tally, lambda: per_bottle(db, kind)) if baseline else None
    ours = measure(tally, lambda: sweep(db, kind))
    rows = []
    for name, result in (("per bottle (seeds)", seeds), ("indexed sweep (app)", ours)):
        if result is None:
            continue
        ratios = ["", "", ""]
        if seeds is not None and result is ours:
            ratios = [
                f"{seeds.commands / max(ours.commands, 1):,.0f}x",
                f"{seeds.seconds / max(ours.seconds, 1e-9):,.0f}x",
                f"{seeds.peak_bytes / max(ours.peak_bytes, 1):,.1f}x",
            ]
        rows.append(
            [
                kind,
                f"{bottles:,}",
                f"{in_trouble:,}",
                name,
                f"{result.commands:,}",
                f"{result.commands / in_trouble:.3f}",
                f"{result.seconds:.3f}",
                f"{result.peak_bytes / 2**20:.2f}",
                f"{result.notified:,}",
                *ratios,
            ]
        )
    return rows


def default_fleets(
    quick: bool = False, sizes: list[int] | None = None, trouble: float = 0.01, full: bool = False
) -> list[Fleet]:
    """Each size with `trouble` of it in trouble per check (per-bottle measured for every check on the first
    fleet, for `silent` on the others unless `full`); the largest then gets a fifth as many more."""
    sizes = sorted(sizes or ([1_000, 5_000] if quick else [10_000, 50_000]))
    fleets = [
        Fleet(size, max(1, round(size * trouble)), KINDS if full or i == 0 else ("silent",))
        for i, size in enumerate(sizes)
    ]
    largest = fleets[-1]
    fleets[-1] = Fleet(largest.bottles, largest.in_trouble, largest.baseline, max(1, largest.in_trouble // 5))
    return fleets


# --- the morning peak -------------------------------------------------------------------------------------------

SEND_MS = 10.0  # a Storage queue send's round trip from a Functions instance in the same region (assumed, not measured)


class TimedQueue:
    """A queue that takes SEND_MS a send (sleeping, as a send waits on the network) and counts what it got."""

    def __init__(self, send_ms: float) -> None:
        self._seconds = send_ms / 1000
        self._lock = threading.Lock()
        self.sent = 0

    def __call__(self, message: str) -> None:
        time.sleep(self._seconds)
        with self._lock:
            self.sent += 1


def peak(notifications: int = 5000, send_ms: float = SEND_MS) -> str:
    """One partition's `notifications` pending at once, sent and marked by the app's delivery one after another
    and QUEUE_SEND_CONCURRENCY at once, on the same store; print the table and return it."""
    rows: list[list[str]] = []
    name = "bench_checks_peak"
    with (
        secantus_process(expire=False) as uri,
        fresh_database(uri, name) as (db, tally),
        seeding_database(uri, name) as seeding,
    ):
        baseline: float | None = None
        for concurrency in (1, SETTINGS.queue_send_concurrency):
            seeding[schema.NOTIFICATIONS].delete_many({})  # fixtures too: thousands of documents a command
            _pending(seeding, notifications)
            queue = TimedQueue(send_ms)
            sending = delivery.Sending(
                send_until=time.monotonic() + 3600,
                concurrency=concurrency,
                request_policy=lambda: RetryPolicy.for_request(SETTINGS),
            )
            before, started = tally.count, time.perf_counter()
            done = delivery.send_pending(
                db, "late_dose", partition=BucketRange(0, 1), now=NOW, limit=notifications, send=queue, sending=sending
            )
            seconds = time.perf_counter() - started
            rate = done.queued / seconds
            baseline = baseline or rate
            name = "one after another (before)" if concurrency == 1 else f"{concurrency} at once (app)"
            rows.append(
                [name, f"{notifications:,}", f"{queue.sent:,}", f"{done.queued:,}", f"{tally.count - before:,}",
                 f"{seconds:.2f}", f"{rate:,.0f}", f"{rate / baseline:.1f}x"]
            )  # fmt: skip
    header = ["sending", "pending", "sent", "marked", "commands", "seconds", "sends/s per worker", "faster"]
    title = f"The morning peak: one partition's notifications, a queue send taking {send_ms:g} ms"
    return print_table(title, rows, header)


def _pending(db: Database[Any], count: int) -> None:
    """`count` pending late-dose notifications of distinct bottles, as a check records them."""
    episodes = (Episode(_id(n), f"user-{n}", "aspirin", "late_dose", NOW - GRACE) for n in range(count))
    db[schema.NOTIFICATIONS].insert_many([notification_document(e, NOW) for e in episodes], ordered=False)
