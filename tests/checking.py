"""The notification checks' test bench: a controlled server clock, the app's real HTTP functions for
provisioning and device events, the three timer functions invoked the way the Functions host does (a timer
request) with each work message they dispatch delivered to the partition worker `run_check_partition` (as a
queue trigger would), and a fake notifications queue in place of the Storage queue client."""

import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from shared.instants import set_clock, utc_now
from shared.notifications import delivery
from shared.notifications.checks.partitions import CheckPartition, dispatch
from shared.notifications.checks.rules import CHECKS
from shared.notifications.checks.run import CheckRun, run_check
from shared.notifications.delivery import SendFailed, pending_selector
from shared.notifications.documents import Kind
from shared.notifications.queue import use_sender
from shared.settings import Settings, get_settings
from shared.store import schema
from shared.store.partitioning import BucketRange
from tests import invoke
from tests.api import SPEC, closed, get_bottle, heartbeat, opened, post_events, put_bottle

TIMERS: dict[Kind, str] = {
    "left_open": "check_open_bottles",
    "silent": "check_silent_bottles",
    "late_dose": "check_late_doses",
}
WORKER = "run_check_partition"


def dispatched(kind: Kind, *, past_due: bool = False) -> list[str]:
    """One run of the check's timer function, through the runtime: the work messages it output."""
    return invoke.timer(TIMERS[kind], past_due=past_due)


def work(message: str | bytes, *, dequeue_count: int = 1) -> None:
    """One delivery of a work message to the partition worker function, through the runtime as the host hands
    it over (a failing run raises `InvocationFailed` with the runtime's message)."""
    invoke.queue(WORKER, message, dequeue_count=dequeue_count)


def sweep(kind: Kind, *, past_due: bool = False) -> list[str]:
    """A check as the host runs it: its timer, then each work message it sent delivered to the worker, in order,
    as one queue worker would. The work messages."""
    messages = dispatched(kind, past_due=past_due)
    for message in messages:
        work(message)
    return messages


@dataclass
class Sweep:
    """What one dispatch and a run of each partition it named did, summed over the partitions."""

    runs: list[CheckRun] = field(default_factory=list)

    @property
    def examined(self) -> int:
        return sum(r.examined for r in self.runs)

    @property
    def notified(self) -> int:
        return sum(r.notified for r in self.runs)

    @property
    def withheld(self) -> int:
        return sum(r.withheld for r in self.runs)

    @property
    def resolved(self) -> int:
        return sum(r.resolved for r in self.runs)

    @property
    def queued(self) -> int:
        return sum(r.queued for r in self.runs)

    @property
    def send_failed(self) -> bool:
        return any(r.send_failed for r in self.runs)

    @property
    def complete(self) -> bool:
        return all(r.complete for r in self.runs)


def sweep_all(
    db: Any, kind: Kind, *, now: datetime, send: delivery.Send, settings: Settings | None = None, **options: Any
) -> Sweep:
    """The domain's side of a check on `db` (a fake may stand in for the store): `dispatch`, then `run_check` on
    each partition a work message names, one after the other; `options` go to each run (e.g. `clock`)."""
    settings = settings or get_settings()
    messages: list[str] = []
    dispatch(kind, settings=settings, send=messages.extend)
    done = Sweep()
    for message in messages:
        partition = CheckPartition.from_message(json.loads(message))
        done.runs.append(
            run_check(db, kind, partition=partition.buckets, now=now, settings=settings, send=send, **options)
        )
    return done


class FakeQueue:
    """The notifications queue as the checks' sender sees it: keeps every message it accepts, in order. After
    `accepting` more messages (None: no limit) every send fails, as an unreachable queue's would."""

    def __init__(self) -> None:
        self.messages: list[str] = []
        self.accepting: int | None = None
        self._lock = threading.Lock()  # a run sends side by side (QUEUE_SEND_CONCURRENCY)

    def __call__(self, message: str) -> None:
        with self._lock:
            if self.accepting is not None:
                if self.accepting <= 0:
                    raise SendFailed("queue unreachable")
                self.accepting -= 1
            self.messages.append(message)


class World:
    """One store, one clock: provision bottles, post events at the current instant, run checks."""

    def __init__(
        self,
        db: Any,
        start: datetime,
        *,
        fake_queue: bool = True,
        runtime: bool = True,
        settings: Settings | None = None,
    ) -> None:
        """`fake_queue=False`: the checks send with the app's own queue client (settings `AzureWebJobsStorage`,
        `NOTIFICATIONS_QUEUE`), and `check` returns nothing of what they sent. `runtime=False`: `check` runs the
        domain's side of a check (`sweep_all`, with the worker's server clock and unpaced: a world of a few bottles
        never fills a paced sweep) instead of its timer and workers through the runtime, for a test of the checks'
        rules to which the runtime adds nothing (tests/functions/test_check_triggers.py holds the triggers), with
        `settings` (default: the app's)."""
        self.db = db
        self.now = start
        self.runtime = runtime
        self.settings = settings
        self.keys: dict[str, str] = {}
        self.sent: list[dict[str, Any]] = []  # every queue message, parsed, in order
        self.queue = FakeQueue()
        set_clock(lambda: self.now)
        use_sender(self.queue if fake_queue else None)

    def stop(self) -> None:
        set_clock(None)
        use_sender(None)

    def at(self, moment: datetime) -> "World":
        self.now = moment
        return self

    def after(self, **delta: float) -> "World":
        self.now += timedelta(**delta)
        return self

    def provision(self, bottle_id: str = "bottle-1", **spec: Any) -> dict[str, Any]:
        response = put_bottle(bottle_id, {**SPEC, **spec})
        assert response.status in (200, 201), response.body
        if "device_key" in response.body:
            self.keys[bottle_id] = response.body["device_key"]
        return dict(response.body)

    def post(self, bottle_id: str, *events: dict[str, Any]) -> None:
        response = post_events(bottle_id, self.keys[bottle_id], {"events": list(events)})
        assert response.status == 202, response.body

    def heartbeat(self, bottle_id: str = "bottle-1", at: datetime | None = None) -> None:
        self.post(bottle_id, heartbeat(at or self.now))

    def open(self, bottle_id: str = "bottle-1", at: datetime | None = None) -> None:
        self.post(bottle_id, opened(at or self.now))

    def close(self, bottle_id: str = "bottle-1", at: datetime | None = None, taken: int = 0) -> None:
        self.post(bottle_id, closed(at or self.now, taken=taken))

    def dose(self, bottle_id: str = "bottle-1", at: datetime | None = None) -> None:
        """Open, take a pill, close: the dose is the close, at `at` (default now)."""
        taken_at = at or self.now
        self.post(bottle_id, opened(taken_at - timedelta(seconds=30)), closed(taken_at, taken=1))

    def check(self, kind: Kind, *, past_due: bool = False) -> list[dict[str, Any]]:
        """Run a check's timer function and its partitions' workers (`runtime=False`: `sweep_all`); the
        notification queue messages they sent."""
        before = len(self.queue.messages)
        if self.runtime:
            sweep(kind, past_due=past_due)
        else:
            # Created at the server clock's instant, as the worker function writes them (`wall`): the world's.
            sweep_all(self.db, kind, now=self.now, send=self.queue, settings=self.settings, wall=utc_now)
        messages = [json.loads(message) for message in self.queue.messages[before:]]
        self.sent += messages
        return messages

    def has_work(self, kind: Kind) -> bool:
        """Whether a run of the check now would read anything: a document in one of its sweeps' ranges at this
        instant (the rules' own selectors) or a notification of its kind waiting to be sent. A run with neither
        reads nothing, so it records, resolves, marks and sends nothing (shared/notifications/checks/run.py):
        `every` and `live` skip it, and run the check at every instant of their grid where it could change what
        is stored or sent. So an early notification, or one too many, is still made at the instant the app would
        make it (the selectors and the stored state that put a bottle in range are the app's), and an episode is
        still found, created and resolved at the first grid instant after it started or ended."""
        check = CHECKS[kind]
        collection = self.db[check.collection]
        for swept in check.sweeps(self.now, self.settings or get_settings()):
            if collection.find_one(swept.selector, {"_id": 1}) is not None:
                return True
        return self.db[schema.NOTIFICATIONS].find_one(pending_selector(kind, BucketRange(0, 1)), {"_id": 1}) is not None

    def every(self, kind: Kind, until: datetime, step: timedelta = timedelta(minutes=5)) -> list[dict[str, Any]]:
        """Run a check every `step` from now until `until` (inclusive), as its timer would (but only where it has
        work: `has_work`)."""
        messages = []
        while self.now <= until:
            if self.has_work(kind):
                messages += self.check(kind)
            self.now += step
        self.now = until
        return messages

    def live(
        self,
        kind: Kind,
        until: datetime,
        doses: Sequence[datetime] = (),
        step: timedelta = timedelta(minutes=5),
    ) -> list[dict[str, Any]]:
        """Time passes until `until`: each dose is taken (and sent) at its instant, and the check runs every
        `step` from now, as its timer would (but only where it has work: `has_work`). The messages sent."""
        pending = sorted(doses)
        next_check = self.now
        messages: list[dict[str, Any]] = []
        while min([next_check, *pending]) <= until:
            if pending and pending[0] <= next_check:
                self.now = pending.pop(0)
                self.dose()
            else:
                self.now = next_check
                if self.has_work(kind):
                    messages += self.check(kind)
                next_check += step
        self.now = until
        return messages

    def notifications(self, kind: Kind | None = None, bottle_id: str | None = None) -> list[dict[str, Any]]:
        selector: dict[str, Any] = {}
        if kind is not None:
            selector["kind"] = kind
        if bottle_id is not None:
            selector["bottle_id"] = bottle_id
        return sorted(self.db[schema.NOTIFICATIONS].find(selector), key=lambda n: (n["kind"], n["episode_start"]))

    def episodes(self, kind: Kind, bottle_id: str = "bottle-1") -> list[datetime]:
        return [n["episode_start"] for n in self.notifications(kind, bottle_id)]

    def status(self, bottle_id: str = "bottle-1") -> dict[str, Any]:
        return dict(get_bottle(bottle_id).body["status"])
