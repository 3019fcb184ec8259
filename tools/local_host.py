"""A thin stand-in for the Functions host: finds the app's registered functions and invokes them the
way the host would (HTTP requests by route, timers with their output bindings). No logic of its own: the
simulator and the local server both drive the real functions through it. What the checks send to the
notifications queue is kept in `queues` (a sender installed for the run) instead of going to a Storage queue."""

import json
import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import azure.functions as func

from shared.notifications.queue import use_sender
from shared.settings import get_settings
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
    handler: Callable[[func.HttpRequest], func.HttpResponse]


@dataclass
class Timer:
    name: str
    schedule: Schedule
    trigger_arg: str
    outputs: dict[str, str]  # argument name -> queue name
    handler: Callable[..., Any]


@dataclass
class LocalHost:
    routes: list[HttpRoute] = field(default_factory=list)
    timers: dict[str, Timer] = field(default_factory=dict)
    queues: dict[str, list[str]] = field(default_factory=dict)

    @classmethod
    def from_app(cls, app: func.FunctionApp) -> "LocalHost":
        """The app's functions (app.get_functions() may be called only once per process)."""
        return cls.from_functions(app.get_functions())

    @classmethod
    def from_functions(cls, functions: Iterable[Any]) -> "LocalHost":
        """Read the functions from the same binding metadata the Functions host indexes."""
        host = cls()
        for function in functions:
            name = str(function.get_function_name())
            bindings = [json.loads(raw) for raw in function.get_raw_bindings()]
            trigger = next(b for b in bindings if b["type"].endswith("Trigger"))
            handler = function.get_user_function()
            if trigger["type"] == "httpTrigger":
                host.routes.append(_http_route(name, trigger, handler))
            elif trigger["type"] == "timerTrigger":
                outputs = {b["name"]: resolve_setting(b["queueName"]) for b in bindings if b["type"] == "queue"}
                schedule = Schedule.parse(resolve_setting(trigger["schedule"]))
                host.timers[name] = Timer(name, schedule, trigger["name"], outputs, handler)
        return host

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
            return route.handler(request)
        if allowed:
            return func.HttpResponse(status_code=405, headers={"Allow": ", ".join(sorted(allowed))})
        return func.HttpResponse(status_code=404)

    def run_timer(self, name: str, *, past_due: bool = False) -> list[str]:
        """Invoke a timer function; the queue messages it sends (through its output bindings, and the
        notifications it sends with the queue SDK, by the NOTIFICATIONS_QUEUE setting) are appended to `queues`
        and returned."""
        timer = self.timers[name]
        outs = {arg: CollectingOut() for arg in timer.outputs}
        notified: list[str] = []
        use_sender(notified.append)
        try:
            timer.handler(**{timer.trigger_arg: FakeTimer(past_due=past_due)}, **outs)
        finally:
            use_sender(None)
            if notified:
                self.queues.setdefault(get_settings().notifications_queue, []).extend(notified)
        sent: list[str] = list(notified)
        for arg, out in outs.items():
            value = out.get()
            messages = value if isinstance(value, list) else ([] if value is None else [value])
            self.queues.setdefault(timer.outputs[arg], []).extend(str(m) for m in messages)
            sent += [str(m) for m in messages]
        return sent

    def due_timers(self, since: datetime, until: datetime) -> list[tuple[datetime, str]]:
        """Every (firing time, timer) in (since, until], in time order."""
        firings = []
        for name, timer in self.timers.items():
            moment = timer.schedule.next_after(since)
            while moment <= until:
                firings.append((moment, name))
                moment = timer.schedule.next_after(moment)
        return sorted(firings)


def _http_route(name: str, trigger: dict[str, Any], handler: Callable[..., Any]) -> HttpRoute:
    template = re.sub(r"\{(\w+)(?::[^}]*)?\}", r"(?P<\1>[^/]+)", trigger["route"])
    methods = frozenset(m.upper() for m in trigger["methods"])
    return HttpRoute(name, methods, re.compile(f"^{template}$"), handler)
