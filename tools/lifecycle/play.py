"""The lifecycle run's timeline played through the app: device requests, timer firings each followed by their
queue deliveries, the plan's changes, and what the run samples and compares on the way."""

import heapq
import itertools
import json
import time
from collections import Counter, defaultdict
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from pymongo.database import Database

from shared.instants import hour_of
from shared.reports.tally import counted_from
from shared.settings import get_settings
from shared.store import schema
from shared.store.command_line import CommandFailed
from tools.archive_truth import ArchiveLedger
from tools.fleet import Request
from tools.lifecycle.faults import SkewedClock
from tools.lifecycle.lag import LagBound, report_lag, tally_behind
from tools.lifecycle.plan import THROTTLE_FOR, Change, LifecyclePlan
from tools.lifecycle.result import Sample
from tools.lifecycle.splits import Splitter
from tools.lifecycle.verdict import ReportLedger
from tools.progress import Progress
from tools.simulate.devices import host_sender
from tools.simulate.in_process import REPORTS_TIMER
from tools.simulate.result import Tally

LATE_DOSES_TIMER = "check_late_doses"
REDELIVER = "redeliver"  # a step that only delivers: the messages that failed, once visible again
COMPARE_AT_HOUR = 18  # UTC: the daily comparison of the reports with the source (see ReportLedger)
SETTLED = timedelta(hours=10)  # buffered uploads come up to 6.5 hours late, and the reports count them within 2
THROTTLED_RU_PER_SECOND = 50.0
DEVICE_RETRY_AFTER = timedelta(minutes=1)  # a device whose request was refused (503/429) sends it again
MAX_EXTRA_DISPATCHES = 6  # after the last hour: until a report dispatch nothing disrupted (see one_more_dispatch)


class Player:
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
        self._send = host_sender(host)
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
        """Queue `item` at `at`; at the same instant lower ranks go first (changes, requests, timers), then FIFO."""
        heapq.heappush(self._queue, (at, rank, next(self._order), item))

    def play(self, progress: bool) -> None:
        """Every change, request and timer firing in time order, and a last report dispatch once the last hour
        has closed; the splitter runs after each step. `progress`: a progress bar on stderr."""
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
        """One item of the timeline at `at`; its wall time counts under its kind."""
        started = time.perf_counter()
        if isinstance(item, Request):
            self._post(at, item)
        elif isinstance(item, Change):
            self._change(item)
        else:
            self._fire(at, item)
        self.seconds[item if isinstance(item, str) else type(item).__name__] += time.perf_counter() - started

    def _fire(self, at: datetime, name: str) -> None:
        """Timer `name`'s run (REDELIVER: none) and the queue deliveries after it; the messages that failed are
        delivered again once visible."""
        sent_before = len(self._queued())
        if name != REDELIVER:
            self.host.run_timer(name)
        report = self.host.deliver(now=at, workers=self.workers)
        again = redelivery_at(report)
        if again is not None:
            self.schedule(again, 2, REDELIVER)
        if name == LATE_DOSES_TIMER:
            self.late_runs.append((self._late_messages(sent_before), self._late_pending()))
        self.redeliveries += report.failed
        self.poisoned += report.poisoned
        reports_queue = report.queues.get(get_settings().reports_queue)
        if reports_queue is not None and reports_queue.failed:
            self.lag.disrupted("a report worker's run failed")
        if name == REPORTS_TIMER:
            self._after_dispatch(at)

    def _after_dispatch(self, at: datetime) -> None:
        """After a report dispatch: its sample, one more dispatch if the run's last was disrupted, and at
        COMPARE_AT_HOUR the reports and the archive compared up to SETTLED before."""
        self._sample(at)
        last = counted_from(self.life.plan.end)
        tally_done = not tally_behind(self.backend, hour_of(self.life.plan.end) + timedelta(hours=1))
        if one_more_dispatch(self.samples[-1], last, self.extra_dispatches, tally_done=tally_done):
            self.extra_dispatches += 1
            self.schedule(self.host.timers[REPORTS_TIMER].schedule.next_after(at), 2, REPORTS_TIMER)
        if at.hour == COMPARE_AT_HOUR and at.minute == 0:
            self.ledger.compare(self.backend, at - SETTLED)
            self.archive_ledger.compare(self.backend, at - SETTLED, get_settings().heartbeat_window_hours)

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

    def _queued(self) -> list[str]:
        return list(self.host.queues.get(get_settings().notifications_queue, []))

    def _late_messages(self, since: int) -> int:
        return sum(json.loads(body)["kind"] == "late_dose" for body in self._queued()[since:])

    def _late_pending(self) -> int:
        return self.backend[schema.NOTIFICATIONS].count_documents({"kind": "late_dose", "delivery": "pending"})

    def _sample(self, at: datetime) -> None:
        """The state after a report dispatch: the actions' report lag and its bound, the request units so far."""
        if self.proxy.partitions.ru_per_second == THROTTLED_RU_PER_SECOND:
            self.lag.disrupted("throttling")
        mid_page = sum(s.mid_page for s in self.splitter.done if s.collection == schema.BOTTLE_ACTIONS)
        if mid_page > self.lag.mid_page_splits:
            self.lag.mid_page_splits = mid_page
            self.lag.disrupted("a split of bottle_actions mid-page")
        bound, why = self.lag.at_dispatch(at)
        self.samples.append(Sample(at, self._report_lag(at), request_units_by_collection(self.proxy), bound, why))

    def _report_lag(self, now: datetime) -> float:
        """How far behind the actions' reports are (minutes): now minus the oldest action that a current lease
        of the actions' feed has not read yet (none: 0)."""
        return report_lag(self.backend, self.proxy, now)


def redelivery_at(report: Any) -> datetime | None:
    """When the messages whose functions failed in `report` are visible again (host.json's visibilityTimeout, 30 s),
    which is when the host delivers them again; None if none failed. Not at the next timer: docs/lifecycle.md,
    "The run's redelivery"."""
    times = [d.next_visible_time for d in report.deliveries if d.outcome == "retry" and d.next_visible_time]
    return min(times, default=None)


def one_more_dispatch(latest: Sample, last: datetime, extra: int, *, tally_done: bool = True) -> bool:
    """Whether the run dispatches the reports once more after `latest`, at the schedule's next firing: when
    `latest` came at or after `last` (the last hour closed), something disrupted it or the heartbeat tally has
    not counted the last hour yet (`tally_done` False: its pass is paced over the hour), and fewer than
    MAX_EXTRA_DISPATCHES (`extra`) were added. Why: docs/lifecycle.md, "The run's ending"."""
    unfinished = bool(latest.disrupted_by) or not tally_done
    return latest.at >= last and unfinished and extra < MAX_EXTRA_DISPATCHES


def request_units_by_collection(proxy: Any) -> dict[str, float]:
    """The request units the proxy has metered so far, by collection name (the app's database's prefix dropped)."""
    database = get_settings().mongodb_database
    return {k.removeprefix(f"{database}."): v for k, v in proxy.metered.request_units.items()}
