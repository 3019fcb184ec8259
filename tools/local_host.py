"""A thin stand-in for the Functions host: finds the app's registered functions and invokes them the
way the host would (HTTP requests by route, timers on their schedules, queue triggers with the queue
trigger's delivery rules; queue output bindings send to in-process Storage queues, and so do the notifications
the checks send with the queue SDK). No logic of its own: the simulator and the local server both drive the
real functions through it."""

import asyncio
import inspect
import json
import logging
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import Any, Literal

import azure.functions as func
from azure.functions.queue import QueueMessage as HostQueueMessage

from functions.responses import json_response
from shared.notifications.queue import use_sender
from shared.settings import get_settings
from tools.local_queues import (
    Clock,
    MessageNotFound,
    QueueOptions,
    QueueService,
    ReceivedMessage,
    check_queue_name,
)
from tools.ncrontab import Schedule

log = logging.getLogger(__name__)
_SETTING = re.compile(r"^%([A-Za-z0-9_]+)%$")


def resolve_setting(value: str) -> str:
    """`%NAME%` binding expressions read app settings, as the host does."""
    match = _SETTING.match(value)
    if not match:
        return value
    name = match.group(1)
    setting = getattr(get_settings(), name.lower(), None)
    if setting is None:
        raise KeyError(f"binding expression {value} names no setting")
    return str(setting)


class CollectingOut(func.Out[Any]):
    """An output binding that keeps what the function set."""

    def __init__(self) -> None:
        self.value: Any = None

    def set(self, val: Any) -> None:
        self.value = val

    def get(self) -> Any:
        return self.value


@dataclass
class FakeTimer:
    """What a timer trigger receives."""

    past_due: bool = False


@dataclass
class HttpRoute:
    name: str
    methods: frozenset[str]
    pattern: re.Pattern[str]
    handler: Callable[..., func.HttpResponse]
    trigger_arg: str = "req"
    outputs: dict[str, str] = field(default_factory=dict)  # argument name -> queue name


@dataclass
class Timer:
    name: str
    schedule: Schedule
    trigger_arg: str
    outputs: dict[str, str]  # argument name -> queue name
    handler: Callable[..., Any]


@dataclass
class QueueTrigger:
    name: str
    queue: str
    trigger_arg: str
    outputs: dict[str, str]  # argument name -> queue name
    handler: Callable[..., Any]


Outcome = Literal["delivered", "retry", "poisoned"]


@dataclass(frozen=True)
class Delivery:
    """One message handed to a queue-triggered function (or moved to the poison queue unseen).

    `delivered`: the function returned, its output messages were sent and the message deleted; `retry`:
    it raised and the message is visible again at `next_visible_time`; `poisoned`: it raised on the
    last allowed dequeue (or the message came back over the limit) and the message moved to `poison_queue`."""

    queue: str
    function: str
    message_id: str
    dequeue_count: int
    outcome: Outcome
    error: str | None = None  # what the function raised
    next_visible_time: datetime | None = None
    poison_queue: str | None = None

    @property
    def invoked(self) -> bool:
        return self.outcome != "poisoned" or self.error is not None


@dataclass(frozen=True)
class QueueTally:
    delivered: int = 0  # invocations that succeeded
    failed: int = 0  # invocations that raised (the last one before a poisoning included)
    poisoned: int = 0  # messages moved to the poison queue


@dataclass
class DeliveryReport:
    """What one `LocalHost.deliver` call did, in the order it happened."""

    deliveries: list[Delivery] = field(default_factory=list)

    @property
    def queues(self) -> dict[str, QueueTally]:
        """Per triggered queue: its deliveries, failures and poisonings."""
        counts: dict[str, Counter[str]] = {}
        for item in self.deliveries:
            count = counts.setdefault(item.queue, Counter())
            count["delivered"] += item.outcome == "delivered"
            count["failed"] += item.error is not None
            count["poisoned"] += item.outcome == "poisoned"
        return {queue: QueueTally(c["delivered"], c["failed"], c["poisoned"]) for queue, c in counts.items()}

    @property
    def delivered(self) -> int:
        return sum(1 for item in self.deliveries if item.outcome == "delivered")

    @property
    def failed(self) -> int:
        return sum(1 for item in self.deliveries if item.error is not None)

    @property
    def poisoned(self) -> int:
        return sum(1 for item in self.deliveries if item.outcome == "poisoned")


# How long the host keeps a message it is processing invisible (it renews this lease at half time while
# the function runs, and a function runs at most host.json's functionTimeout).
PROCESSING_LEASE = timedelta(minutes=10)


@dataclass
class LocalHost:
    routes: list[HttpRoute] = field(default_factory=list)
    timers: dict[str, Timer] = field(default_factory=dict)
    triggers: dict[str, QueueTrigger] = field(default_factory=dict)  # queue-triggered functions by name
    service: QueueService = field(default_factory=QueueService)
    options: QueueOptions = field(default_factory=QueueOptions.from_host_json)
    _turn: int = field(default=0, repr=False)  # which trigger's queue is polled first next

    @classmethod
    def from_app(
        cls, app: func.FunctionApp, *, clock: Clock | None = None, options: QueueOptions | None = None
    ) -> "LocalHost":
        """The app's functions (app.get_functions() may be called only once per process)."""
        return cls.from_functions(app.get_functions(), clock=clock, options=options)

    @classmethod
    def from_functions(
        cls, functions: Iterable[Any], *, clock: Clock | None = None, options: QueueOptions | None = None
    ) -> "LocalHost":
        """Read the functions from the same binding metadata the Functions host indexes. `clock` is the
        queues' time (default: the app's server clock, `shared.instants.utc_now`, which the simulator
        sets); `options` the queue trigger's settings (default: host.json's `extensions.queues`)."""
        host = cls(
            service=QueueService() if clock is None else QueueService(clock),
            options=QueueOptions.from_host_json() if options is None else options,
        )
        for function in functions:
            name = str(function.get_function_name())
            bindings = [json.loads(raw) for raw in function.get_raw_bindings()]
            trigger = next(b for b in bindings if b["type"].endswith("Trigger"))
            handler = function.get_user_function()
            outputs = {
                b["name"]: check_queue_name(resolve_setting(b["queueName"]))
                for b in bindings
                if b["type"] == "queue" and b.get("direction", "OUT") == "OUT"
            }
            if trigger["type"] == "httpTrigger":
                host.routes.append(_http_route(name, trigger, handler, outputs))
            elif trigger["type"] == "timerTrigger":
                schedule = Schedule.parse(resolve_setting(trigger["schedule"]))
                host.timers[name] = Timer(name, schedule, trigger["name"], outputs, handler)
            elif trigger["type"] == "queueTrigger":
                queue = check_queue_name(resolve_setting(trigger["queueName"]))
                host.triggers[name] = QueueTrigger(name, queue, trigger["name"], outputs, handler)
        return host

    @property
    def queues(self) -> Mapping[str, list[str]]:
        """Every message ever sent, by queue (a snapshot): output bindings' and the host's poison moves,
        whether since delivered or not."""
        return MappingProxyType(self.service.sent())

    @property
    def clock(self) -> Clock:
        return self.service.clock

    def handle(
        self,
        method: str,
        path: str,
        *,
        headers: dict[str, str],
        params: dict[str, str],
        body: bytes,
        url: str | None = None,
    ) -> func.HttpResponse:
        """Route `/api/...` (the decoded path) to its function, as the host does; 404/405 otherwise.
        `url` is what the function sees as `req.url` (the path by default)."""
        relative = path.removeprefix("/api/")
        allowed: set[str] = set()
        for route in self.routes:
            match = route.pattern.match(relative)
            if match is None:
                continue
            if method not in route.methods:
                allowed |= route.methods
                continue
            request = func.HttpRequest(
                method=method,
                url=url or path,
                headers=headers,
                params=params,
                route_params=match.groupdict(),
                body=body,
            )
            response: func.HttpResponse
            response, _ = self._invoke(route.handler, {route.trigger_arg: request}, route.outputs)
            return response
        if allowed:
            methods = ", ".join(sorted(allowed))
            error = {"error": f"method {method} is not allowed on {path}; allowed: {methods}", "details": []}
            return json_response(405, error, {"Allow": methods})
        return no_route(path)

    def run_timer(self, name: str, *, past_due: bool = False, now: datetime | None = None) -> list[str]:
        """Invoke a timer function; the queue messages it outputs are sent (at `now`, default the clock's
        time) and returned."""
        timer = self.timers[name]
        _, sent = self._invoke(timer.handler, {timer.trigger_arg: FakeTimer(past_due=past_due)}, timer.outputs, now)
        return sent

    def _invoke(
        self, handler: Callable[..., Any], inputs: dict[str, Any], outputs: dict[str, str], now: datetime | None = None
    ) -> tuple[Any, list[str]]:
        """Call a function with its inputs and a collector per queue output binding; when it returns, send
        what it set (as the host does: a function that raises sends nothing). Returns its result and the
        bodies sent."""
        outs = {arg: CollectingOut() for arg in outputs}
        sent: list[str] = []
        notifications = get_settings().notifications_queue

        def send_notification(body: str) -> None:  # what the checks send with the queue SDK, sent at once
            self.service.send(notifications, body, now=now)
            sent.append(body)

        use_sender(send_notification)
        try:
            result = handler(**inputs, **outs)
            if inspect.iscoroutine(result):
                result = asyncio.run(result)
        finally:
            use_sender(None)
        for arg, out in outs.items():
            for body in _bodies(out.get()):
                self.service.send(outputs[arg], body, now=now)
                sent.append(body)
        return result, sent

    # --- queue triggers ---------------------------------------------------------------------------

    def deliver(
        self,
        *,
        now: datetime | None = None,
        workers: int = 1,
        on_delivery: Callable[[Delivery], None] | None = None,
    ) -> DeliveryReport:
        """Hand every visible message of a triggered queue to its function until none is visible and no
        worker holds one: messages the functions send to triggered queues meanwhile are delivered in the
        same call. `workers` threads take batches side by side (1: on the calling thread). Time is `now`
        throughout (the simulator's instant) or the clock's. `on_delivery` sees each delivery as it
        happens (from the worker's thread). Queues nobody triggers on just accumulate."""
        if workers < 1:
            raise ValueError("deliver needs at least one worker")
        run = _Run(self.clock if now is None else (lambda: now), on_delivery)
        if workers == 1:
            self._work(run)
        else:
            threads = [
                threading.Thread(target=self._work, args=(run,), name=f"queue-worker-{i}") for i in range(workers)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        if run.errors:
            raise run.errors[0]
        return run.report

    def _work(self, run: "_Run") -> None:
        """One worker: take a batch, process it, again, until nothing is visible and nobody is busy."""
        try:
            while True:
                with run.idle:
                    while (taken := self._next_batch(run.clock())) is None:
                        if run.busy == 0:
                            run.idle.notify_all()
                            return
                        run.idle.wait(0.05)  # a busy worker may send more, or finish
                    run.busy += 1
                try:
                    trigger, batch = taken
                    for message in batch:
                        self._process(trigger, message, run)
                finally:
                    with run.idle:
                        run.busy -= 1
                        run.idle.notify_all()
        except Exception as error:  # not the function's (those are handled): the host's own, re-raised
            run.errors.append(error)

    def _next_batch(self, now: datetime) -> tuple[QueueTrigger, list[ReceivedMessage]] | None:
        """The next trigger (in turn) with visible messages, and up to batchSize of them, leased."""
        triggers = list(self.triggers.values())
        for step in range(len(triggers)):
            trigger = triggers[(self._turn + step) % len(triggers)]
            batch = self.service.receive(
                trigger.queue, self.options.batch_size, visibility_timeout=PROCESSING_LEASE, now=now
            )
            if batch:
                self._turn = (self._turn + step + 1) % len(triggers)
                return trigger, batch
        return None

    def _process(self, trigger: QueueTrigger, message: ReceivedMessage, run: "_Run") -> None:
        now = run.clock()
        if now >= message.next_visible_time - PROCESSING_LEASE / 2:  # a long batch: renew, as the host does
            try:
                message = self.service.update_visibility(
                    message.queue, message.id, message.pop_receipt, PROCESSING_LEASE, now=now
                )
            except MessageNotFound:
                return  # the lease ran out and another worker has it now
        if message.dequeue_count > self.options.max_dequeue_count:  # came back without a verdict
            run.record(self._poison(trigger, message, None, now))
            return
        inputs = {
            trigger.trigger_arg: HostQueueMessage(
                id=message.id,
                body=message.body,
                dequeue_count=message.dequeue_count,
                expiration_time=message.expiration_time,
                insertion_time=message.insertion_time,
                time_next_visible=message.next_visible_time,
                pop_receipt=message.pop_receipt,
            )
        }
        try:
            self._invoke(trigger.handler, inputs, trigger.outputs, now)
        except Exception as error:
            log.exception(
                "function %s failed on message %s of queue %s (dequeue count %d)",
                trigger.name,
                message.id,
                message.queue,
                message.dequeue_count,
            )
            if message.dequeue_count >= self.options.max_dequeue_count:
                run.record(self._poison(trigger, message, error, now))
                return
            try:
                released = self.service.update_visibility(
                    message.queue, message.id, message.pop_receipt, self.options.visibility_timeout, now=now
                )
            except MessageNotFound:
                released = None
            run.record(
                Delivery(
                    message.queue,
                    trigger.name,
                    message.id,
                    message.dequeue_count,
                    "retry",
                    error=repr(error),
                    next_visible_time=released.next_visible_time if released else None,
                )
            )
            return
        try:
            self.service.delete(message.queue, message.id, message.pop_receipt)
        except MessageNotFound:  # the lease ran out: it will be delivered again (at least once)
            log.warning("message %s of queue %s was done after its lease ran out", message.id, message.queue)
        run.record(Delivery(message.queue, trigger.name, message.id, message.dequeue_count, "delivered"))

    def _poison(
        self, trigger: QueueTrigger, message: ReceivedMessage, error: Exception | None, now: datetime
    ) -> Delivery:
        """Copy the message to `<queue>-poison` and delete it, as the host does."""
        poison = f"{message.queue}-poison"
        log.warning(
            "Message has reached MaxDequeueCount of %d. Moving message %s to queue '%s'.",
            self.options.max_dequeue_count,
            message.id,
            poison,
        )
        self.service.send(poison, message.body, now=now)
        try:
            self.service.delete(message.queue, message.id, message.pop_receipt)
        except MessageNotFound:
            log.warning("message %s of queue %s was poisoned after its lease ran out", message.id, message.queue)
        return Delivery(
            message.queue,
            trigger.name,
            message.id,
            message.dequeue_count,
            "poisoned",
            error=None if error is None else repr(error),
            poison_queue=poison,
        )

    def due_timers(self, since: datetime, until: datetime) -> list[tuple[datetime, str]]:
        """Every (firing time, timer) in (since, until], in time order."""
        firings = []
        for name, timer in self.timers.items():
            moment = timer.schedule.next_after(since)
            while moment <= until:
                firings.append((moment, name))
                moment = timer.schedule.next_after(moment)
        return sorted(firings)


class _Run:
    """One deliver call's shared state: its clock, how many workers hold a batch, what happened."""

    def __init__(self, clock: Clock, on_delivery: Callable[[Delivery], None] | None) -> None:
        self.clock = clock
        self.on_delivery = on_delivery
        self.idle = threading.Condition()
        self.busy = 0
        self.report = DeliveryReport()
        self.errors: list[Exception] = []
        self._lock = threading.Lock()

    def record(self, delivery: Delivery) -> None:
        with self._lock:
            self.report.deliveries.append(delivery)
        if self.on_delivery is not None:
            self.on_delivery(delivery)


def no_route(path: str) -> func.HttpResponse:
    """A 404 for a path no function serves, in the app's error shape (functions/responses.py)."""
    return json_response(404, {"error": f"no function serves {path}", "details": []})


def _bodies(value: Any) -> list[str]:
    """The messages an output binding was set to: one (str, bytes, QueueMessage) or a list of them."""
    if value is None:
        return []
    if isinstance(value, list | tuple):
        return [body for item in value for body in _bodies(item)]
    if isinstance(value, bytes):
        return [value.decode()]
    if isinstance(value, func.QueueMessage):
        return [value.get_body().decode()]
    return [str(value)]


def _http_route(name: str, trigger: dict[str, Any], handler: Callable[..., Any], outputs: dict[str, str]) -> HttpRoute:
    template = re.sub(r"\{(\w+)(?::[^}]*)?\}", r"(?P<\1>[^/]+)", trigger["route"])
    methods = frozenset(m.upper() for m in trigger["methods"])
    return HttpRoute(name, methods, re.compile(f"^{template}$"), handler, trigger["name"], outputs)
