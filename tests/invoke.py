"""The app's functions invoked as the Functions host invokes them: through the pinned runtime's
`invocation_request` (tools/local_host.py), one function at a time, by name. A fresh host per call: nothing is
queued between calls, and the notifications a check sends go to whatever sender the test installed."""

from typing import Any

import azure.functions as func

from tools.local_host import LocalHost


def host() -> LocalHost:
    """A host over the app the runtime indexed (once per process), sending notifications through the installed
    sender (`use_sender`) or the SDK's client."""
    return LocalHost.load(local_notifications=False)


def name_of(function: Any) -> str:
    """A function's name, given as a name or as its blueprint decorator's builder (`functions.bottles.get_bottle`)."""
    return function if isinstance(function, str) else str(function.build().get_function_name())


def http(
    function: Any,
    *,
    method: str = "GET",
    url: str = "/api/x",
    route_params: dict[str, str] | None = None,
    headers: dict[str, str] | None = None,
    params: dict[str, str] | None = None,
    body: bytes = b"",
) -> func.HttpResponse:
    """One HTTP invocation, its route already matched: the function's response, or the host's empty 500."""
    return host().invoke_http(
        name_of(function),
        method=method,
        url=url,
        headers=headers or {},
        params=params or {},
        route_params=route_params or {},
        body=body,
    )


def timer(function: Any, *, past_due: bool = False) -> list[str]:
    """One timer invocation: the queue messages its output binding sent."""
    return host().run_timer(name_of(function), past_due=past_due)


def queue(function: Any, body: str | bytes, *, dequeue_count: int = 1) -> list[str]:
    """One queue-trigger invocation (raises `InvocationFailed` with the runtime's message if it fails)."""
    text = body.decode() if isinstance(body, bytes) else body
    return host().invoke_queue(name_of(function), text, dequeue_count=dequeue_count)
