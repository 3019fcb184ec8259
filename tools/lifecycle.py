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
import heapq
import itertools
import json
import logging
import random
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from pymongo import MongoClient
from pymongo.database import Database

from shared.instants import set_clock
from shared.reports.tally import counted_from
from shared.settings import get_settings
from shared.store import schema
from shared.store.command_line import CommandFailed, run_command
from tools.archive_history import archive_setting
from tools.archive_truth import ArchiveLedger
from tools.arguments import int_between, writable_file
from tools.cosmos_store.partitions import parse_bound
from tools.fleet import Bottle, BottleLife, Expected, Plan, Request, make_fleet
from tools.lifecycle_faults import SkewedClock, Watch, store_calls_watched
from tools.lifecycle_result import RE_READ_BOUND, LifecycleResult, PeakDrain, Sample, SplitDone
from tools.progress import Progress
from tools.report_truth import COUNTED, complete_from, reported_totals, source_totals
from tools.simulate import KINDS, REPORTS_TIMER, SIMULATION_START, score
from tools.simulation_result import ReportCheck, Tally

MAX_DAYS = 366
DEFAULT_CHART = "lifecycle.png"  # *.png is gitignored
# The compressed schedules (the app's semantics on coarser clocks, and the trouble planned to match them): a bottle
# left open 35-40 minutes meets an open-bottle check every 15 minutes after its 15 minutes open, even on a clock 2
# minutes slow; a dose 15-40 minutes past its grace meets a late-dose check before it is taken; a heartbeat every 100
# minutes stays under the 150 silent minutes, and a spell offline (5 to 6.5 hours) passes them with checks to spare.
HEARTBEAT = timedelta(minutes=100)
LEFT_OPEN_FOR = (35.0, 40.0)
SETTINGS = {
    "CHECK_OPEN_BOTTLES_SCHEDULE": "0 */15 * * * *",
    "CHECK_LATE_DOSES_SCHEDULE": "0 */15 * * * *",
    "CHECK_SILENT_BOTTLES_SCHEDULE": "0 */30 * * * *",
    "REPORTS_SCHEDULE": "0 0 */2 * * *",
    "LEFT_OPEN_MINUTES": "15",
    "SILENT_MINUTES": "150",
    "HEARTBEAT_WINDOW_HOURS": "48",  # the rings keep two days: the daily comparison sees every hour and day
    "CHECK_PARTITIONS": "1",
    "REPORTS_PARTITIONS": "1",
    "QUEUE_MESSAGES_PER_PARTITION": "2",  # scaled down with the fleet: a morning peak takes several runs to send
}
LATE_DOSES_TIMER = "check_late_doses"
REDELIVER = "redeliver"  # a step that only delivers: the messages that failed, once visible again
# The morning peak (docs/lifecycle.md): every bottle on a times schedule takes its first dose at 08:00 Rome time,
# and misses or is late with a large share of those, so that one late-dose check finds several times what a run
# may send (the design: ~100 K late bottles at the peak against 5,000 sends per partition and run).
PEAK_ZONE, PEAK_TIME = "Europe/Rome", "08:00"
PEAK_LATE_RATE = 0.6
MARK_KILL_RATE = 0.1  # per mark of a sent batch: a worker dies between its sends and their mark
OFFLINE_HOURS = (5.0, 6.5)
MORNING_LATE_RATE = 0.25  # of doses due before 10:00 local time: the daily late-dose peak
MAX_SKEW = timedelta(minutes=2)
MID_PAGE_WAIT = timedelta(hours=3)  # longer than the reports' schedule: nearly every actions split lands mid-page
COMPARE_AT_HOUR = 18  # UTC: the daily comparison of the reports with the source (see ReportLedger)
SETTLED = timedelta(hours=10)  # buffered uploads come up to 6.5 hours late, and the reports count them within 2
KILL_RATE = 0.001  # per store call of a queue worker
THROTTLED_RU_PER_SECOND = 50.0
THROTTLE_EVERY_DAYS = 4
THROTTLE_FOR = timedelta(hours=2)
DEVICE_RETRY_AFTER = timedelta(minutes=1)  # a device whose request was refused (503/429) sends it again
MAX_EXTRA_DISPATCHES = 6  # after the last hour: until a report dispatch nothing disrupted (see one_more_dispatch)
# Each collection's partition size limit (standing for 50 GB), as a share of what the plan will have written by its
# end (its documents times their average size so far), so that every run splits them: bottle_actions at least 3
# times (at least 4 partitions), the others at least once.
SPLIT_SHARES = {
    schema.BOTTLE_ACTIONS: 1 / 3.6,
    schema.BOTTLE_HEARTBEATS: 1 / 2.2,
    schema.USER_HOURLY_REPORTS: 1 / 2.5,
    schema.USER_DAILY_REPORTS: 1 / 2.2,
}


# --- the plan -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    """A change to the fleet or the store at `at`: a bottle provisioned, its key rotated, its owner changed, or a
    throttling episode starting or ending."""

    at: datetime
    kind: str  # provision | rotate | reassign | throttle | unthrottle
    bottle: Bottle | None = None
    user_id: str | None = None


@dataclass
class LifecyclePlan:
    plan: Plan
    changes: list[Change]
    joined: dict[str, datetime]


class LifecycleLife(BottleLife):
    """A bottle's days as tools/fleet.py plans them, with longer spells offline (the silent limit is longer) and
    more late doses in the morning (the daily peak), left open for longer (the open-bottle check is less often),
    refilled when empty."""

    left_open_minutes = LEFT_OPEN_FOR

    def _dose_at(self, opened_at: datetime, slot: datetime) -> datetime | None:
        """A dose; a bottle about to run out is refilled first (tools/fleet.py plans a few days, this 60: an empty
        bottle's counts would go negative, and the app refuses those)."""
        if self.pills < 2:
            self.pills = self.rng.randint(40, 90)
        return super()._dose_at(opened_at, slot)

    def _take_or_skip(self, slot: datetime) -> tuple[datetime | None, bool]:
        local = slot.astimezone(ZoneInfo(self.bottle.schedule["timezone"]))
        if local.hour < 10 and self._trouble_allowed(slot + self.bottle.grace):
            rate = PEAK_LATE_RATE if f"{local:%H:%M}" == PEAK_TIME else MORNING_LATE_RATE
            roll = self.rng.random()
            if roll < rate:
                self.plan.expected.add(Expected(self.bottle.bottle_id, "late_dose", slot))
                late = slot + self.bottle.grace + timedelta(minutes=self.rng.uniform(15, 40))
                return (None if roll < rate / 3 else self._dose_at(late, slot)), True
        return super()._take_or_skip(slot)

    def _plan_offline_window(self) -> None:
        if self.rng.random() >= 0.15:
            return
        busy = [at for at, _ in self.outbox] + [s.due for s in self.plan.slots if s.bottle_id == self.bottle.bottle_id]
        minutes = (self.plan.end - self.plan.start).total_seconds() / 60
        for _ in range(10):
            begin = self.plan.start + timedelta(minutes=self.rng.uniform(120, max(minutes, 121)))
            end = begin + timedelta(hours=self.rng.uniform(*OFFLINE_HOURS))
            margin = self.bottle.grace + timedelta(minutes=30)
            if self._trouble_allowed(end) and all(not (begin - margin <= t <= end + margin) for t in busy):
                self.offline.append((begin, end))
                return


def plan_lifecycle(rng: random.Random, bottles: int, days: float) -> LifecyclePlan:
    """A fleet that starts with a quarter of its bottles and grows to all of them by 85% of the run; a key
    rotation a day, a reassignment every third day, a throttling episode every fourth morning."""
    users = max(2, bottles // 3)
    fleet = [aligned_for_peak(bottle) for bottle in make_fleet(rng, bottles, users)]
    start, end = SIMULATION_START, SIMULATION_START + timedelta(days=days)
    plan = Plan(start=start, end=end, bottles=fleet, heartbeat=HEARTBEAT)
    initial = max(2, bottles // 4)
    changes, joined = [], {}
    for i, bottle in enumerate(fleet):
        late = max(bottles - initial, 1)
        joins = start if i < initial else start + (end - start) * 0.85 * (i - initial + 1) / late
        joined[bottle.bottle_id] = joins
        changes.append(Change(joins, "provision", bottle))
        life = Plan(start=joins + timedelta(minutes=1), end=end, bottles=[bottle], heartbeat=HEARTBEAT)
        LifecycleLife(rng, bottle, life, schedule_from=joins).play()  # its requests start a minute after
        plan.requests += life.requests
        plan.expected |= life.expected
        plan.slots += life.slots
    plan.requests.sort(key=lambda r: (r.at, r.bottle_id))
    for day in range(int(days) + (days % 1 > 0)):
        at = start + timedelta(days=day, hours=rng.uniform(1, 23))
        present = [b for b in fleet if joined[b.bottle_id] < at]
        if at < end and present:
            changes.append(Change(at, "rotate", rng.choice(present)))
        if day % 3 == 1 and at < end and present:
            moved = rng.choice(present)
            changes.append(Change(at + timedelta(minutes=7), "reassign", moved, f"user-{rng.randrange(users):03d}"))
        if day % THROTTLE_EVERY_DAYS == 1:
            morning = start + timedelta(days=day, hours=2)  # the run starts at 05:00 UTC: 07:00
            if morning + THROTTLE_FOR < end:
                changes += [Change(morning, "throttle"), Change(morning + THROTTLE_FOR, "unthrottle")]
    return LifecyclePlan(plan, sorted(changes, key=lambda c: c.at), joined)


def aligned_for_peak(bottle: Bottle) -> Bottle:
    """A bottle on a times schedule takes its first dose of the day at PEAK_TIME in PEAK_ZONE (tools/fleet.py's
    first times are all 07:30-09:00): the fleet's morning doses fall due together, the morning peak."""
    if "times" not in bottle.schedule:
        return bottle
    times = [PEAK_TIME, *bottle.schedule["times"][1:]]
    return replace(bottle, schedule={**bottle.schedule, "times": times, "timezone": PEAK_ZONE})


def planned_documents(life: LifecyclePlan) -> dict[str, int]:
    """How many documents each splitting collection will hold by the end of the plan (about)."""
    plan = life.plan
    actions = sum(
        1
        for r in plan.requests
        for event in (r.payload.get("events", [r.payload]) if isinstance(r.payload, dict) else [])
        if isinstance(event, dict) and event.get("type") in ("opened", "closed")
    )
    users = len({b.user_id for b in plan.bottles})
    hours = (plan.end - plan.start).total_seconds() / 3600
    return {
        schema.BOTTLE_ACTIONS: actions,
        schema.BOTTLE_HEARTBEATS: len(plan.bottles),
        schema.USER_HOURLY_REPORTS: int(users * hours * 0.8),
        schema.USER_DAILY_REPORTS: int(users * max(hours / 24, 1)),
    }


# --- splits ---------------------------------------------------------------------------------------------------


class Splitter:
    """Splits a partition once its bytes pass its collection's limit: at once for most collections; for the
    bottle actions, inside the next report worker's read of them (a split while the partition's worker is mid-
    page), or at the next step if no worker has read them for MID_PAGE_WAIT."""

    def __init__(self, proxy: Any, backend: Database[Any], planned: dict[str, int], clock: SkewedClock) -> None:
        self.proxy, self.backend, self.planned, self.clock = proxy, backend, planned, clock
        self.database = backend.name
        self.done: list[SplitDone] = []
        self.re_read_floor = 0  # documents written since each split parent's last checkpoint (and the overlap)
        self._due_since: dict[str, datetime] = {}
        self._lock = threading.Lock()

    def at_step(self) -> None:
        for name in self.planned:
            if name != schema.BOTTLE_ACTIONS:
                self._split_over_limit(name, mid_page=False)
            elif self._over(name):
                since = self._due_since.setdefault(name, self.clock.now)
                if self.clock.now - since > MID_PAGE_WAIT:
                    self._split_over_limit(name, mid_page=False)

    def in_read(self, name: str) -> None:
        if name == schema.BOTTLE_ACTIONS:
            self._split_over_limit(name, mid_page=True)

    def limit(self, name: str) -> float:
        """The collection's partition limit: its share of the bytes its planned documents will take."""
        partitions = self.proxy.partition_map(self.database, name)
        held = sum(sum(p.keys.values()) for p in partitions)
        average = sum(p.bytes for p in partitions) / held if held else 0
        return max(1_000.0, self.planned[name] * average * SPLIT_SHARES[name])

    def _over(self, name: str) -> bool:
        limit = self.limit(name)
        return any(p.bytes > limit and len(p.keys) > 1 for p in self.proxy.partition_map(self.database, name))

    def _split_over_limit(self, name: str, *, mid_page: bool) -> None:
        with self._lock:
            limit = self.limit(name)
            for partition in self.proxy.partition_map(self.database, name):
                if partition.bytes > limit and len(partition.keys) > 1:  # one shard key never splits
                    if name == schema.BOTTLE_ACTIONS:
                        self.re_read_floor += written_since_checkpoint(self.backend, self.proxy, partition)
                    for split in self.proxy.split(self.database, name, partition.id):
                        children = (split.children[0].id, split.children[1].id)
                        self.done.append(SplitDone(self.clock.now, name, split.parent.id, children, mid_page))
            self._due_since.pop(name, None)


def written_since_checkpoint(backend: Database[Any], proxy: Any, partition: Any) -> int:
    """The actions in a partition's hash range written since the last checkpoint of the current leases that
    read that range, less the polling overlap: what its children must read again at least (issue 20's bound)."""
    collection = proxy.partitions.collection(backend.name, schema.BOTTLE_ACTIONS)
    positions = [
        _position(lease)
        for lease in backend[schema.LEASES].find({"feed": schema.BOTTLE_ACTIONS, "retired_at": None})
        if lease.get("range")
        and parse_bound(lease["range"][0]) < partition.high
        and partition.low < parse_bound(lease["range"][1])
    ]
    if not positions:
        return 0
    since = min(positions) - timedelta(seconds=get_settings().reports_poll_overlap_seconds)
    found = backend[schema.BOTTLE_ACTIONS].find({"received_at": {"$gt": since}}, {"bottle_id": 1})
    return sum(1 for action in found if partition.holds(collection.hash_of(action)))


# --- the run --------------------------------------------------------------------------------------------------


Tamper = Callable[[Database[Any], Any], None]


def run_lifecycle(
    *,
    days: float,
    bottles: int,
    seed: int,
    workers: int,
    progress: bool = True,
    tamper: Tamper | None = None,
) -> LifecycleResult:
    """Play the plan through the app's functions, loaded and invoked through the Functions runtime, on the
    Cosmos-faithful store.
    `tamper(backend_db, host)` runs after the last step and before the checks (the tests plant faults with it)."""
    from tools.cosmos_store.local import cosmos_local_store
    from tools.cosmos_store.proxy import Options
    from tools.local_host import LocalHost
    from tools.local_store import secantus_process, setting_defaults

    started = time.perf_counter()
    rng = random.Random(seed)
    life = plan_lifecycle(rng, bottles, days)
    plan = life.plan
    clock = SkewedClock.for_workers(plan.start, workers, rng, MAX_SKEW)
    watch = Watch(random.Random(seed + 1), kill_rate=KILL_RATE, mark_kill_rate=MARK_KILL_RATE)
    set_clock(clock)
    logging.disable(logging.CRITICAL)  # the host logs every killed worker's traceback; the summary counts them
    try:
        with (
            setting_defaults(**SETTINGS),
            tempfile.TemporaryDirectory(prefix="lifecycle-archive-") as archive_folder,
            archive_setting(archive_folder, None),  # the archive (docs/archive.md), checked like the reports
            secantus_process(expire=False) as backend_uri,
            MongoClient[dict[str, Any]](backend_uri, directConnection=True, tz_aware=True) as observer,
            cosmos_local_store(Options(auto_split=False, seed=seed), backend_uri, expire=False) as (_, proxy),
            store_calls_watched(watch),
        ):
            settings = get_settings()
            backend = observer[settings.mongodb_database]
            splitter = Splitter(proxy, backend, planned_documents(life), clock)
            watch.before_read = splitter.in_read
            host = LocalHost.load()
            player = _Player(
                host=host, clock=clock, splitter=splitter, proxy=proxy, backend=backend, workers=workers, life=life
            )
            player.play(progress)
            if tamper is not None:
                tamper(backend, host)
            watch.killing = False
            return _result(
                player=player, life=life, backend=backend, watch=watch, days=days, workers=workers, started=started
            )
    finally:
        logging.disable(logging.NOTSET)
        set_clock(None)


class _Player:
    """Plays the timeline: device requests, timer firings (each followed by its queue deliveries), changes."""

    def __init__(
        self,
        *,
        host: Any,
        clock: SkewedClock,
        splitter: Splitter,
        proxy: Any,
        backend: Database[Any],
        workers: int,
        life: LifecyclePlan,
    ) -> None:
        self.host, self.clock, self.splitter, self.proxy, self.backend = host, clock, splitter, proxy, backend
        self.workers, self.life = workers, life
        self.keys: dict[str, str] = {}
        self.owners: dict[str, str] = {}
        self.tally = Tally()
        self.samples: list[Sample] = []
        self.changes: Counter[str] = Counter()
        self.redeliveries = 0
        self.ledger = ReportLedger()
        self.archive_ledger = ArchiveLedger.of_the_app()
        self.seconds: dict[str, float] = defaultdict(float)  # wall time per kind of step
        self.throttle_windows: list[tuple[datetime, datetime]] = []
        self.poisoned = 0
        self.late_runs: list[tuple[int, int]] = []  # per late-dose timer run: late-dose messages sent, left pending
        self._normal_ru = proxy.partitions.ru_per_second
        self.lag = LagBound(life.plan.start)
        self.extra_dispatches = 0
        self._queue: list[tuple[datetime, int, int, Any]] = []
        self._order = itertools.count()

    def schedule(self, at: datetime, rank: int, item: Any) -> None:
        heapq.heappush(self._queue, (at, rank, next(self._order), item))

    def play(self, progress: bool) -> None:
        plan = self.life.plan
        for change in self.life.changes:
            self.schedule(change.at, 0, change)
        for request in plan.requests:
            self.schedule(request.at, 1, request)
        for at, name in self.host.due_timers(plan.start, plan.end):
            self.schedule(at, 2, name)
        # A last report run once the last hour has closed, so the reports include every event sent.
        self.schedule(counted_from(plan.end), 2, REPORTS_TIMER)
        bar = Progress(len(self._queue), "lifecycle", what="requests, timer runs and changes") if progress else None
        done = 0
        while self._queue:
            at, _, _, item = heapq.heappop(self._queue)
            self.clock.now = at
            self._step(at, item)
            self.splitter.at_step()
            done += 1
            if bar is not None and done % 500 == 0:
                bar.update(done, f"simulated {at:%Y-%m-%d %H:%M} UTC, {len(self.splitter.done)} splits")
        if bar is not None:
            bar.finish(f"simulated {self.clock.now:%Y-%m-%d %H:%M} UTC")

    def _step(self, at: datetime, item: Any) -> None:
        started = time.perf_counter()
        if isinstance(item, Request):
            self._post(at, item)
        elif isinstance(item, Change):
            self._change(item)
        else:
            sent_before = len(self._queued())
            if item != REDELIVER:
                self.host.run_timer(item)
            report = self.host.deliver(now=at, workers=self.workers)
            again = redelivery_at(report)
            if again is not None:
                self.schedule(again, 2, REDELIVER)
            if item == LATE_DOSES_TIMER:
                self.late_runs.append((self._late_messages(sent_before), self._late_pending()))
            self.redeliveries += report.failed
            self.poisoned += report.poisoned
            reports_queue = report.queues.get(get_settings().reports_queue)
            if reports_queue is not None and reports_queue.failed:
                self.lag.disrupted("a report worker's run failed")
            if item == REPORTS_TIMER:
                self._sample(at)
                if one_more_dispatch(self.samples[-1], counted_from(self.life.plan.end), self.extra_dispatches):
                    self.extra_dispatches += 1
                    self.schedule(self.host.timers[REPORTS_TIMER].schedule.next_after(at), 2, REPORTS_TIMER)
                if at.hour == COMPARE_AT_HOUR and at.minute == 0:
                    self.ledger.compare(self.backend, at - SETTLED)
                    self.archive_ledger.compare(self.backend, at - SETTLED, get_settings().heartbeat_window_hours)
        self.seconds[item if isinstance(item, str) else type(item).__name__] += time.perf_counter() - started

    def _post(self, at: datetime, request: Request) -> None:
        if request.bottle_id not in self.keys:
            return  # not provisioned yet (cannot happen with the plan's order, kept for safety)
        started = time.perf_counter()
        status, body = self._send(
            "POST",
            f"/api/bottles/{request.bottle_id}/events",
            {"X-Device-Key": self.keys[request.bottle_id]},
            json.dumps(request.payload).encode(),
        )
        self.tally.record(request, status, body, time.perf_counter() - started)
        if status in (429, 503):
            self.schedule(at + DEVICE_RETRY_AFTER, 1, replace(request, at=at + DEVICE_RETRY_AFTER, kind="retry"))

    def _change(self, change: Change) -> None:
        self.changes[change.kind] += 1
        if change.kind == "throttle":
            self.lag.disrupted("throttling")
            self.proxy.partitions.ru_per_second = THROTTLED_RU_PER_SECOND
            self.throttle_windows.append((change.at, change.at + THROTTLE_FOR))
            return
        if change.kind == "unthrottle":
            self.proxy.partitions.ru_per_second = self._normal_ru
            return
        assert change.bottle is not None
        bottle_id = change.bottle.bottle_id
        if change.kind == "reassign" and change.user_id is not None:
            self.owners[bottle_id] = change.user_id
        spec = dict(change.bottle.spec(), user_id=self.owners.get(bottle_id, change.bottle.user_id))
        query = "?rotate_key=true" if change.kind == "rotate" else ""
        status, body = self._send("PUT", f"/api/bottles/{bottle_id}{query}", {}, json.dumps(spec).encode())
        if status not in (200, 201):
            raise CommandFailed(f"{change.kind} of {bottle_id} at {change.at:%Y-%m-%d %H:%M} failed: {status} {body}")
        if body.get("device_key"):
            self.keys[bottle_id] = body["device_key"]

    def _send(self, method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, Any]:
        route, _, query = path.partition("?")
        params = dict(p.split("=", 1) for p in query.split("&") if p)
        response = self.host.handle(method, route, headers=headers, params=params, body=body)
        raw = response.get_body()
        return response.status_code, json.loads(raw) if raw else None

    def _queued(self) -> list[str]:
        return list(self.host.queues.get(get_settings().notifications_queue, []))

    def _late_messages(self, since: int) -> int:
        return sum(json.loads(body)["kind"] == "late_dose" for body in self._queued()[since:])

    def _late_pending(self) -> int:
        return self.backend[schema.NOTIFICATIONS].count_documents({"kind": "late_dose", "delivery": "pending"})

    def _metered(self) -> dict[str, float]:
        database = get_settings().mongodb_database
        return {k.removeprefix(f"{database}."): v for k, v in self.proxy.metered.request_units.items()}

    def _sample(self, at: datetime) -> None:
        """The state after a report dispatch: the actions' report lag and its bound, the request units so far."""
        if self.proxy.partitions.ru_per_second == THROTTLED_RU_PER_SECOND:
            self.lag.disrupted("throttling")
        mid_page = sum(s.mid_page for s in self.splitter.done if s.collection == schema.BOTTLE_ACTIONS)
        if mid_page > self.lag.mid_page_splits:
            self.lag.mid_page_splits = mid_page
            self.lag.disrupted("a split of bottle_actions mid-page")
        bound, why = self.lag.at_dispatch(at)
        self.samples.append(Sample(at, self._report_lag(at), self._metered(), bound, why))

    def _report_lag(self, now: datetime) -> float:
        """How far behind the actions' reports are (minutes): now minus the oldest action that a current lease
        of the actions' feed has not read yet (none: 0)."""
        return report_lag(self.backend, self.proxy, now)


def redelivery_at(report: Any) -> datetime | None:
    """When the messages whose functions failed in a delivery are visible again (host.json's visibilityTimeout,
    30 s), which is when the host delivers them again; None if none failed. Left to the next timer's delivery (up
    to 15 minutes later), a check killed at the run's last firing ran only at the report dispatch after the end,
    with the devices stopped: bottles whose heartbeats had ended with the plan were notified silent."""
    times = [d.next_visible_time for d in report.deliveries if d.outcome == "retry" and d.next_visible_time]
    return min(times, default=None)


def one_more_dispatch(latest: Sample, last: datetime, extra: int) -> bool:
    """Whether the run dispatches the reports once more after the dispatch `latest`, at the schedule's next firing:
    when it is the last one (`last`: once the last hour has closed) or one more already, and something disrupted
    it (a split of bottle_actions inside a worker's read, a killed worker: they leave part of its reads to the next
    dispatch, which the app would run), up to MAX_EXTRA_DISPATCHES. Else the run would end with actions unread
    and their hours reported short, which no later dispatch of the run mends."""
    return latest.at >= last and bool(latest.disrupted_by) and extra < MAX_EXTRA_DISPATCHES


@dataclass
class LagBound:
    """How far behind the actions' reports may be at a report dispatch. A dispatch reads every partition of
    `bottle_actions` to its end, so when nothing disrupted it, nothing received before it is left unread: lag 0.
    What disrupts one, each costing the reads of one dispatch: a split of `bottle_actions` inside a worker's read
    (the worker stops; the children's leases exist from the next dispatch), a report worker's failed run (killed:
    its message comes back after the visibility timeout, its lease after it expires) and throttling (streams
    answer empty pages). So at a disrupted dispatch the lag is under the time since the last dispatch nothing
    disrupted (or the run's start): one interval for one disruption, two for two in a row, and so on."""

    clean_at: datetime  # the last dispatch nothing disrupted (the run's start before the first)
    mid_page_splits: int = 0  # of bottle_actions, seen by the dispatches so far
    reasons: set[str] = field(default_factory=set)  # what disrupted the dispatch under way, since the last one

    def disrupted(self, why: str) -> None:
        self.reasons.add(why)

    def at_dispatch(self, at: datetime) -> tuple[float, str]:
        """The bound (minutes) at the dispatch at `at`, and what disrupted it ("" when nothing did)."""
        why = ", ".join(sorted(self.reasons))
        self.reasons.clear()
        if not why:
            self.clean_at = at
            return 0.0, ""
        return (at - self.clean_at).total_seconds() / 60, why


def report_lag(backend: Database[Any], proxy: Any, now: datetime) -> float:
    """Now minus the oldest action that no live lease of the actions' feed holding its key has read (minutes;
    0 when there is none). A replaced parent stays live until its children have run, and its range is read
    once any lease holding a key has read past it."""
    leases = [
        lease
        for lease in backend[schema.LEASES].find({"feed": schema.BOTTLE_ACTIONS, "retired_at": None})
        if lease.get("range")
    ]
    if not leases:
        return 0.0
    collection = proxy.partitions.collection(get_settings().mongodb_database, schema.BOTTLE_ACTIONS)
    positions = [
        (parse_bound(lo), parse_bound(hi), _position(lease)) for lease in leases for lo, hi in [lease["range"]]
    ]
    oldest = min(p for _, _, p in positions)
    unread = [
        action["received_at"]
        for action in backend[schema.BOTTLE_ACTIONS].find({"received_at": {"$gt": oldest}})
        if action["received_at"] > max(_read_until(positions, collection.hash_of(action)), default=now)
    ]
    return max(0.0, (now - min(unread)).total_seconds() / 60) if unread else 0.0


def _read_until(positions: list[tuple[int, int, datetime]], key: int) -> list[datetime]:
    """The positions of the leases whose ranges hold `key`."""
    return [at for low, high, at in positions if low <= key < high]


def _position(lease: dict[str, Any]) -> datetime:
    at: datetime = lease.get("checkpoint_time") or lease["created_at"]
    return at


# --- what it found --------------------------------------------------------------------------------------------


def _result(
    *,
    player: _Player,
    life: LifecyclePlan,
    backend: Database[Any],
    watch: Watch,
    days: float,
    workers: int,
    started: float,
) -> LifecycleResult:
    plan = life.plan
    player.ledger.compare(backend, counted_from(plan.end))
    hourly_check, daily_check = player.ledger.checks()
    notifications = list(backend[schema.NOTIFICATIONS].find())
    scores, misses, extras = score(plan.expected, notifications)
    sent, duplicates = notifications_sent(player.host, watch.killed_marks)
    proxy = player.proxy
    partitions = {c.name.split(".", 1)[1]: len(c.partitions) for c in proxy.partitions.collections()}
    return LifecycleResult(
        days=days,
        bottles=len(plan.bottles),
        users=len({b.user_id for b in plan.bottles}),
        workers=workers,
        tally=player.tally,
        splits=player.splitter.done,
        partitions=partitions,
        throttled=proxy.metered.throttled,
        throttle_episodes=player.changes["throttle"],
        hourly_check=hourly_check,
        daily_check=daily_check,
        scores=scores,
        misses=misses,
        extras=extras,
        notifications_sent=sent,
        peak_late_doses=peak_late_doses(plan),
        duplicates=duplicates,
        kills=watch.kills,
        redeliveries=player.redeliveries,
        poisoned=player.poisoned,
        re_reads=watch.re_reads,
        re_read_floor=player.splitter.re_read_floor + watch.killed_unsaved,
        request_units=player._metered(),
        samples=player.samples,
        changes=player.changes,
        throttle_windows=player.throttle_windows,
        seconds=time.perf_counter() - started,
        step_seconds=player.seconds,
        peak=peak_drain(player.late_runs, notifications, player.host, watch.killed_marks),
        archive_check=player.archive_ledger.final(
            backend, counted_from(plan.end), get_settings().heartbeat_window_hours
        ),
    )


def peak_late_doses(plan: Plan) -> int:
    """The most late doses that fall due (their grace ended) between two late-dose checks."""
    grace = {b.bottle_id: b.grace for b in plan.bottles}
    every = timedelta(minutes=15)  # CHECK_LATE_DOSES_SCHEDULE
    due = Counter(
        (e.episode_start + grace[e.bottle_id] - plan.start) // every for e in plan.expected if e.kind == "late_dose"
    )
    return max(due.values(), default=0)


def notifications_sent(host: Any, killed_marks: Counter[Any]) -> tuple[Counter[str], list[str]]:
    """Notifications sent to the queue by kind, and the episodes (bottle, kind, episode) notified more than once:
    under two notification ids, or one id sent again more often than kills between its send and its mark
    explain (`killed_marks`: at least once by design, the consumer drops a repeated notification_id)."""
    by_kind: Counter[str] = Counter()
    seen: dict[tuple[str, str, str], Counter[Any]] = defaultdict(Counter)
    for message in _messages(host):
        by_kind[message["kind"]] += 1
        seen[(message["bottle_id"], message["kind"], message["episode_start"])][message["notification_id"]] += 1
    duplicates = [
        f"{kind} {bottle} episode {episode} x{sum(ids.values())}"
        for (bottle, kind, episode), ids in seen.items()
        if len(ids) > 1 or any(n - 1 > killed_marks[i] for i, n in ids.items())
    ]
    return by_kind, sorted(duplicates)


def _messages(host: Any) -> list[dict[str, Any]]:
    return [json.loads(body) for body in host.queues.get(get_settings().notifications_queue, [])]


def peak_drain(
    late_runs: list[tuple[int, int]], notifications: list[dict[str, Any]], host: Any, killed_marks: Counter[Any]
) -> PeakDrain:
    """The morning peaks as the late-dose check runs met them (`late_runs`: per run, the late-dose messages it
    sent and the late-dose notifications it left pending), and each pushed late-dose notification's sends."""
    largest = max((sent + left for sent, left in late_runs), default=0)
    longest = streak = 0  # a backlog's runs: from the first that sends or leaves some, to the first that leaves none
    for sent, left in late_runs:
        streak = streak + 1 if sent or left else 0
        longest = max(longest, streak)
        streak = streak if left else 0
    sends = Counter(m["notification_id"] for m in _messages(host) if m["kind"] == "late_dose")
    pushed = [n["_id"] for n in notifications if n["kind"] == "late_dose" and n.get("delivery") != "withheld"]
    return PeakDrain(
        cap=int(SETTINGS["QUEUE_MESSAGES_PER_PARTITION"]),
        largest_backlog=largest,
        runs_to_drain=longest,
        sent_once=sum(1 for i in pushed if sends[i] == 1),
        resent_after_kill=sum(1 for i in pushed if 1 < sends[i] <= 1 + killed_marks[i]),
        never_sent=sum(1 for i in pushed if sends[i] == 0),
    )


class ReportLedger:
    """Every user-hour and user-day compared with the source, over the whole run: a heartbeat ring keeps only its
    window (HEARTBEAT_WINDOW_HOURS), so the reports are compared once a day, for the hours the rings still hold
    and whose events have all arrived and been counted (SETTLED before the comparison), and once at the end for
    the rest. A later comparison of the same hour or day replaces an earlier one."""

    def __init__(self) -> None:
        self.hours: dict[tuple[str, datetime], str | None] = {}
        self.days: dict[tuple[str, datetime], str | None] = {}
        self.since: datetime | None = None

    def compare(self, db: Database[Any], until: datetime) -> None:
        """The hours and days the rings still hold that end by `until`."""
        since = complete_from(db, get_settings().heartbeat_window_hours)
        if since is None:
            return
        self.since = since if self.since is None else min(self.since, since)
        expected, reported = source_totals(db), reported_totals(db)
        for user, hour in expected.keys() | reported.keys():
            if since <= hour and hour + timedelta(hours=1) <= until:
                want, got = expected.get((user, hour)), reported.get((user, hour))
                differs = f"{user} {hour:%Y-%m-%d %H}:00: reported {got}, source {want}"
                self.hours[(user, hour)] = None if want == got else differs
        for (user, day), (want_day, got_day) in _daily(db, expected).items():
            if since <= day and day + timedelta(days=1) <= until:
                differs = f"{user} {day:%Y-%m-%d}: reported {got_day}, source {want_day}"
                self.days[(user, day)] = None if want_day == got_day else differs

    def checks(self) -> tuple[ReportCheck, ReportCheck]:
        return (
            ReportCheck(len(self.hours), self.since, sorted(m for m in self.hours.values() if m)),
            ReportCheck(len(self.days), self.since, sorted(m for m in self.days.values() if m)),
        )


def _daily(db: Database[Any], hourly: dict[tuple[str, datetime], tuple[int, ...]]) -> dict[Any, tuple[Any, Any]]:
    """Per (user, UTC day): the day's hours from the source summed, and the daily report's totals."""
    expected: dict[tuple[str, datetime], list[int]] = defaultdict(lambda: [0] * len(COUNTED))
    for (user, hour), counts in hourly.items():
        for i, value in enumerate(counts):
            expected[(user, hour.replace(hour=0))][i] += value
    reported = {
        (doc["user_id"], doc["day"]): [doc.get(c, 0) for c in COUNTED] for doc in db[schema.USER_DAILY_REPORTS].find()
    }
    zero = [0] * len(COUNTED)
    return {key: (expected.get(key, zero), reported.get(key, zero)) for key in expected.keys() | reported.keys()}


# --- the screen -----------------------------------------------------------------------------------------------


def describe(result: LifecycleResult) -> str:
    lines = [
        f"Lifecycle: {result.days:g} days, {result.bottles} bottles of {result.users} users (a quarter at the start),"
        f" {result.workers} queue workers (clocks skewed up to {MAX_SKEW.seconds // 60} min), {result.seconds:.0f} s",
        f"requests: {result.tally.requests}  statuses: {dict(sorted(result.tally.statuses.items()))}  events stored:"
        f" {result.tally.stored}  duplicates: {result.tally.duplicates}  expired: {result.tally.expired}",
        "changes: " + ", ".join(f"{kind} {n}" for kind, n in sorted(result.changes.items())),
        f"workers killed mid-run: {result.kills}  failed deliveries (redelivered or poisoned): {result.redeliveries}"
        f"  poisoned: {result.poisoned}",
        "wall time: "
        + ", ".join(f"{name} {sec:.0f} s" for name, sec in sorted(result.step_seconds.items(), key=lambda x: -x[1])),
        "",
    ]
    by_collection = Counter(s.collection for s in result.splits)
    mid_page = sum(s.mid_page for s in result.splits)
    lines.append(f"splits: {len(result.splits)} ({mid_page} while a report worker read the partition)")
    for name in sorted(result.partitions):
        ru = result.request_units.get(name, 0.0)
        peak = hourly_peak(result.samples, name)
        lines.append(
            f"  {name:<22} {result.partitions[name]:>3} partitions  {by_collection.get(name, 0):>3} splits"
            f"  {ru:>12,.0f} RU  peak {peak:>9,.0f} RU/h"
        )
    lines.append(f"throttled operations: {result.throttled} (in {result.throttle_episodes} episodes)")
    lines.append(
        f"bottle actions re-read: {result.re_reads} (documents the actions' feed readers received more than once,"
        f" after splits and kills); bound: {result.re_read_floor} ({RE_READ_BOUND})"
    )
    lines.append(lag_line(result.samples))
    lines.append("")
    for label, unit, check in (("hourly", "hour", result.hourly_check), ("daily", "day", result.daily_check)):
        since = f" from {check.since:%Y-%m-%d %H}:00" if check.since else ""
        verdict = "all match" if not check.mismatches else f"{len(check.mismatches)} differ"
        lines.append(f"{label} reports against the source ({check.user_hours} user-{unit}s{since}): {verdict}")
        lines += [f"  {m}" for m in check.mismatches[:5]]
    if result.archive_check is not None:
        lines.append(result.archive_check.describe())
    lines.append("")
    lines.append("notifications     injected  notified  matched  precision  recall  sent")
    for kind in KINDS:
        s = result.scores[kind]
        lines.append(
            f"  {kind:<15} {s.expected:>8}  {s.notified:>8}  {s.matched:>7}  {s.precision:>9.3f}  {s.recall:>6.3f}"
            f"  {result.notifications_sent.get(kind, 0):>4}"
        )
    for label, items in (("missed", result.misses), ("unexpected", result.extras)):
        lines += [f"  {label}: {e.kind} {e.bottle_id} episode {e.episode_start:%Y-%m-%d %H:%M:%S}" for e in items[:5]]
    drain = result.peak
    lines.append(
        f"morning peak: up to {result.peak_late_doses} late doses due between two checks; the largest backlog a"
        f" check run met: {drain.largest_backlog} (a run may send {drain.cap}), drained in up to {drain.runs_to_drain}"
        " runs"
    )
    lines.append(
        f"late-dose notifications: sent once {drain.sent_once}, sent again after a kill between send and mark (same"
        f" notification_id, the consumer drops it) {drain.resent_after_kill}, never sent {drain.never_sent}"
    )
    lines.append(f"duplicate notifications sent: {len(result.duplicates)}")
    lines += [f"  {d}" for d in result.duplicates[:5]]
    failures = result.failures()
    lines.append("")
    lines.append("verdict: PASS" if not failures else "verdict: FAIL: " + "; ".join(failures))
    return "\n".join(lines)


def lag_line(samples: list[Sample]) -> str:
    """The actions' report lag at the dispatches: how many were caught up, and the worst against its bound."""
    caught_up = sum(s.report_lag_minutes == 0 for s in samples)
    line = f"actions' report lag: 0 at {caught_up} of {len(samples)} dispatches"
    if caught_up == len(samples):
        return line
    over = [s for s in samples if s.report_lag_minutes > s.lag_bound_minutes]
    worst = (
        max(over, key=lambda s: s.report_lag_minutes - s.lag_bound_minutes)
        if over
        else max(samples, key=lambda s: s.report_lag_minutes)
    )
    return (
        f"{line}; {'over its bound' if over else 'the most'}: {worst.report_lag_minutes:.1f} min at"
        f" {worst.at:%Y-%m-%d %H:%M}, bound {worst.lag_bound_minutes:.0f} ({worst.disrupted_by or 'not disrupted'};"
        " the bound: the time since the last dispatch nothing disrupted)"
    )


def hourly_peak(samples: list[Sample], collection: str) -> float:
    """The most request units the collection was metered in one simulated hour (between report dispatches,
    scaled to an hour)."""
    peak = 0.0
    for before, after in itertools.pairwise(samples):
        hours = (after.at - before.at).total_seconds() / 3600
        if hours > 0:
            spent = after.request_units.get(collection, 0.0) - before.request_units.get(collection, 0.0)
            peak = max(peak, spent / hours)
    return peak


# --- the command ----------------------------------------------------------------------------------------------


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
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
    status = [0]

    def body() -> None:
        args = parse_arguments(argv)
        result = run_lifecycle(days=args.days, bottles=args.bottles, seed=args.seed, workers=args.workers)
        print(describe(result))
        from tools.lifecycle_chart import draw

        try:
            chart = draw(result, Path(args.chart))
        except OSError as error:
            raise CommandFailed(f"--chart {args.chart}: {error.strerror or error}") from None
        print(f"chart: {chart.resolve()}")
        status[0] = 1 if result.failures() else 0

    run_command("./dev lifecycle", body)
    return status[0]


if __name__ == "__main__":
    raise SystemExit(main())
