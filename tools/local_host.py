"""The Functions host's side, locally: it loads the app through the pinned Azure Functions Python runtime (which
indexes and validates it as in Azure) and invokes every function through the runtime's `invocation_request`, HTTP
requests by route, timers on their schedules, queue triggers through the host's queue listener
(tools/local_delivery.py); queue output bindings send to in-process Storage queues, and so do the notifications the
checks send with the queue SDK. No logic of its own: the simulator, the local server, the lifecycle run and the
tests drive the real functions through it (tools/host/ has the protocol's messages and the worker)."""

import json
import logging
import re
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from types import MappingProxyType
from typing import Any

import azure.functions as func

from functions.responses import json_response
from shared.notifications.queue import use_sender
from shared.settings import get_settings
from tools.host import bindings
from tools.host.protocol import ParameterBinding, RpcFunctionMetadata, TypedData
from tools.host.worker import InvocationFailed, LoadedApp, current_invocation_id, load_app, load_app_object
from tools.http_answers import HttpAnswer, answered, observing
from tools.local_delivery import PROCESSING_LEASE, Delivery, DeliveryReport, QueueListener, QueueTrigger
from tools.local_queues import Clock, QueueOptions, QueueService, check_queue_name
from tools.ncrontab import Schedule

log = logging.getLogger(__name__)
_SETTING = re.compile(r"^%([A-Za-z0-9_]+)%$")
APP_ROOT = Path(__file__).resolve().parent.parent  # the folder of function_app.py


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


@dataclass
class HttpRoute:
    name: str
    methods: frozenset[str]
    pattern: re.Pattern[str]
    function: RpcFunctionMetadata
    trigger_arg: str = "req"
    outputs: dict[str, str] = field(default_factory=dict)  # argument name -> queue name
    auth_level: str = "ANONYMOUS"
    template: str = ""  # the route as declared: bottles/{bottle_id}


@dataclass
class Timer:
    name: str
    schedule: Schedule
    trigger_arg: str
    outputs: dict[str, str]  # argument name -> queue name
    function: RpcFunctionMetadata


@dataclass
class LocalHost:
    app: LoadedApp
    routes: list[HttpRoute] = field(default_factory=list)
    timers: dict[str, Timer] = field(default_factory=dict)
    triggers: dict[str, QueueTrigger] = field(default_factory=dict)  # queue-triggered functions by name
    service: QueueService = field(default_factory=QueueService)
    options: QueueOptions = field(default_factory=QueueOptions.from_host_json)
    # True: the notifications a function sends with the queue SDK go to this host's in-process queue; False: to
    # whatever sender the caller installed (`use_sender`), or the SDK's own client for the settings.
    local_notifications: bool = True
    # None: function keys are not checked (as under `func start`); a key: a function whose auth level is not
    # anonymous answers 401 without it (`x-functions-key` or `?code=`), before it runs, as the host in Azure does.
    function_key: str | None = None
    _listener: QueueListener = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._listener = QueueListener(self.service, self.options, self.triggers, self._invoke_trigger)

    @classmethod
    def load(
        cls,
        directory: Path = APP_ROOT,
        script: str = "function_app.py",
        *,
        clock: Clock | None = None,
        options: QueueOptions | None = None,
        local_notifications: bool = True,
    ) -> "LocalHost":
        """The app at `directory/script`, loaded through the runtime (once per process; `AppRefused` with the
        runtime's message if it refuses the app). `clock` is the queues' time (default: the app's server clock,
        `shared.instants.utc_now`, which the simulator sets); `options` the queue trigger's settings (default:
        host.json's `extensions.queues`)."""
        host = cls.from_app(load_app(directory, script), clock=clock, options=options)
        host.local_notifications = local_notifications
        return host

    @classmethod
    def for_app_object(
        cls, app: func.FunctionApp, *, clock: Clock | None = None, options: QueueOptions | None = None
    ) -> "LocalHost":
        """A scratch app built in this process (tests), indexed and invoked through the runtime like a file."""
        return cls.from_app(load_app_object(app), clock=clock, options=options)

    @classmethod
    def from_app(
        cls, app: LoadedApp, *, clock: Clock | None = None, options: QueueOptions | None = None
    ) -> "LocalHost":
        """Routes, timers and queue triggers from the functions' raw bindings as the runtime reported them to the
        host (its `functions_metadata_request` answer), with `%SETTING%` expressions resolved as the host does."""
        host = cls(
            app,
            service=QueueService() if clock is None else QueueService(clock),
            options=QueueOptions.from_host_json() if options is None else options,
        )
        for function in app.functions:
            name = function.name
            declared = [json.loads(raw) for raw in function.raw_bindings]
            trigger = next(b for b in declared if b["type"].endswith("Trigger"))
            outputs = {
                b["name"]: check_queue_name(resolve_setting(b["queueName"]))
                for b in declared
                if b["type"] == "queue" and b.get("direction", "OUT") == "OUT"
            }
            if trigger["type"] == "httpTrigger":
                host.routes.append(_http_route(function, trigger, outputs))
            elif trigger["type"] == "timerTrigger":
                schedule = Schedule.parse(resolve_setting(trigger["schedule"]))
                host.timers[name] = Timer(name, schedule, trigger["name"], outputs, function)
            elif trigger["type"] == "queueTrigger":
                queue = check_queue_name(resolve_setting(trigger["queueName"]))
                host.triggers[name] = QueueTrigger(name, queue, trigger["name"], outputs, function)
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
        """Route `/api/...` (the decoded path) to its function, as the host does; 404/405 otherwise. `url` is
        what the function sees as `req.url` (the path by default). A function that fails (raises through the
        runtime) is the host's empty 500."""
        relative = path.removeprefix("/api/")
        allowed: set[str] = set()
        for route in self.routes:
            match = route.pattern.match(relative)
            if match is None:
                continue
            if method not in route.methods:
                allowed |= route.methods
                continue
            if not self._key_accepted(route, headers, params):
                rejected = func.HttpResponse(b"", status_code=401)
                return self._observed(route, method, url or path, rejected, by_host=True)
            return self.invoke_http(
                route.name,
                method=method,
                url=url or path,
                headers=headers,
                params=params,
                route_params=match.groupdict(),
                body=body,
            )
        if allowed:
            methods = ", ".join(sorted(allowed))
            error = {"error": f"method {method} is not allowed on {path}; allowed: {methods}", "details": []}
            return json_response(405, error, {"Allow": methods})
        return no_route(path)

    def _key_accepted(self, route: HttpRoute, headers: dict[str, str], params: dict[str, str]) -> bool:
        if self.function_key is None or route.auth_level.upper() == "ANONYMOUS":
            return True
        given = {value for name, value in headers.items() if name.lower() == "x-functions-key"} | {params.get("code")}
        return self.function_key in given

    def invoke_http(
        self,
        name: str,
        *,
        method: str,
        url: str,
        headers: dict[str, str],
        params: dict[str, str],
        route_params: dict[str, str],
        body: bytes,
    ) -> func.HttpResponse:
        """Invoke the HTTP function `name` with this request (its route already matched): the function's
        response, or the host's empty 500 when the invocation fails."""
        route = next((r for r in self.routes if r.name == name), None)
        if route is None:
            raise KeyError(f"no HTTP function named {name!r}")
        request = bindings.http_request(
            route.trigger_arg,
            method=method,
            url=url,
            headers=headers,
            query=params,
            route_params=route_params,
            body=body,
            capabilities=self.app.capabilities,
        )
        try:
            returned, _ = self._invoke(route.function, [request], {}, route.outputs)
        except InvocationFailed:
            log.exception("function %s failed: the host answers 500", route.name)
            return self._observed(route, method, url, func.HttpResponse(b"", status_code=500), by_host=True)
        return self._observed(route, method, url, bindings.http_response(returned, route.name), by_host=False)

    def _observed(
        self, route: HttpRoute, method: str, url: str, response: func.HttpResponse, *, by_host: bool
    ) -> func.HttpResponse:
        """`response`, once every observer (tools/http_answers.py) has seen it."""
        if observing():
            answer = HttpAnswer(
                app=self.app.key,
                route=route.template,
                method=method,
                url=url,
                status=response.status_code,
                headers=dict(response.headers),
                body=response.get_body(),
                by_host=by_host,
            )
            answered(answer)
        return response

    def invoke_queue(self, name: str, body: str, *, dequeue_count: int = 1, now: datetime | None = None) -> list[str]:
        """Hand one message to the queue-triggered function `name` (outside any queue: no retry, no poison
        queue); the messages its output bindings sent. A failing function raises `InvocationFailed`."""
        trigger = self.triggers[name]
        at = self.clock() if now is None else now
        received, metadata = bindings.queue_message(
            trigger.trigger_arg,
            id=str(uuid.uuid4()),
            body=body,
            dequeue_count=dequeue_count,
            insertion_time=at,
            expiration_time=at + timedelta(days=7),
            next_visible_time=at + PROCESSING_LEASE,
            pop_receipt=str(uuid.uuid4()),
        )
        _, sent = self._invoke(trigger.function, [received], metadata, trigger.outputs, now)
        return sent

    def run_timer(self, name: str, *, past_due: bool = False, now: datetime | None = None) -> list[str]:
        """Invoke a timer function; the queue messages it outputs are sent (at `now`, default the clock's
        time) and returned. A timer that fails raises `InvocationFailed` with the runtime's message."""
        timer = self.timers[name]
        at = self.clock() if now is None else now
        info = bindings.timer_info(
            timer.trigger_arg, past_due=past_due, last=at, next_firing=timer.schedule.next_after(at)
        )
        _, sent = self._invoke(timer.function, [info], {}, timer.outputs, now)
        return sent

    def _invoke(
        self,
        function: RpcFunctionMetadata,
        inputs: list[ParameterBinding],
        trigger_metadata: dict[str, TypedData],
        outputs: dict[str, str],
        now: datetime | None = None,
    ) -> tuple[TypedData | None, list[str]]:
        """One invocation through the runtime; when it succeeds, send what its queue output bindings were set
        to (as the host does: a function that fails sends nothing). The notifications the function sends with
        the queue SDK meanwhile go to this host's queues at once. Returns its return value and the bodies sent."""
        invocation = _Invocation(self, now)
        invocation_id = str(uuid.uuid4())
        with _invocations_lock:
            _invocations[invocation_id] = invocation
            if self.local_notifications:
                use_sender(_send_notification)
        try:
            response = self.app.invoke(function, inputs, trigger_metadata, invocation_id=invocation_id)
        finally:
            with _invocations_lock:
                del _invocations[invocation_id]
                if self.local_notifications and not any(i.host.local_notifications for i in _invocations.values()):
                    use_sender(None)
        by_name = {binding.name: binding.data for binding in response.output_data}
        for arg, queue in outputs.items():
            for body in bindings.queue_messages(by_name.get(arg)):
                self.service.send(queue, body, now=now)
                invocation.sent.append(body)
        return response.return_value, invocation.sent

    def _invoke_trigger(
        self, trigger: QueueTrigger, received: ParameterBinding, metadata: dict[str, TypedData], now: datetime
    ) -> None:
        """The queue listener's invocation of `trigger`'s function with one received message, at `now`."""
        self._invoke(trigger.function, [received], metadata, trigger.outputs, now)

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
        clock = self.clock if now is None else (lambda: now)
        return self._listener.deliver(clock=clock, workers=workers, on_delivery=on_delivery)

    def due_timers(self, since: datetime, until: datetime) -> list[tuple[datetime, str]]:
        """Every (firing time, timer) in (since, until], in time order."""
        firings = []
        for name, timer in self.timers.items():
            moment = timer.schedule.next_after(since)
            while moment <= until:
                firings.append((moment, name))
                moment = timer.schedule.next_after(moment)
        return sorted(firings)


class _Invocation:
    """What the host tracks of one invocation in flight: its host, its time and what it sent."""

    def __init__(self, host: LocalHost, now: datetime | None) -> None:
        self.host = host
        self.now = now
        self.sent: list[str] = []
        self.caller = threading.current_thread().name  # the client's thread, not the runtime's pool thread


_invocations: dict[str, _Invocation] = {}
_invocations_lock = threading.Lock()


def invoking_thread_name() -> str:
    """The name of the thread that asked this host for the invocation running here (the function itself runs on
    the runtime's thread pool); outside an invocation, this thread's name. Tests that pause one caller's request
    mid-way tell the requests apart by it."""
    invocation = _invocations.get(current_invocation_id() or "")
    return threading.current_thread().name if invocation is None else invocation.caller


def _send_notification(body: str) -> None:
    """The queue SDK's send, locally: to the notifications queue of the host whose invocation is running on this
    thread (the runtime's invocation id, carried into the function's own threads by its context)."""
    invocation_id = current_invocation_id()
    invocation = _invocations.get(invocation_id or "")
    if invocation is None:
        raise RuntimeError(f"a notification was sent outside a local invocation (invocation id {invocation_id})")
    invocation.host.service.send(get_settings().notifications_queue, body, now=invocation.now)
    invocation.sent.append(body)


def no_route(path: str) -> func.HttpResponse:
    """A 404 for a path no function serves, in the app's error shape (functions/responses.py)."""
    return json_response(404, {"error": f"no function serves {path}", "details": []})


def _http_route(function: RpcFunctionMetadata, trigger: dict[str, Any], outputs: dict[str, str]) -> HttpRoute:
    template = re.sub(r"\{(\w+)(?::[^}]*)?\}", r"(?P<\1>[^/]+)", trigger["route"])
    methods = frozenset(m.upper() for m in trigger["methods"])
    return HttpRoute(
        function.name,
        methods,
        re.compile(f"^{template}$"),
        function,
        trigger["name"],
        outputs,
        auth_level=str(trigger.get("authLevel", "FUNCTION")),
        template=str(trigger["route"]),
    )
