"""The trace context the host hands the worker with each invocation (`InvocationRequest.trace_context`), for
measuring what the app sends to Application Insights (tools/telemetry_capture.py). In Azure the host starts each
invocation's span and passes its W3C `traceparent`; the runtime gives it to the function in `func.Context`
(shared.telemetry.observability.host_trace attaches it) and, with OpenTelemetry on (PYTHON_ENABLE_OPENTELEMETRY),
attaches it on its own event loop too (azure_functions_runtime/otel.py, `configure_opentelemetry`). Local runs pass no
trace context unless a caller asks (`traced`)."""

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

_TRACE_PARENT: ContextVar[str] = ContextVar("host_trace_parent", default="")


def trace_parent() -> str:
    """The traceparent the next invocation from this thread carries ("" when none: no trace context)."""
    return _TRACE_PARENT.get()


@contextmanager
def traced(parent: str) -> Iterator[None]:
    """Invocations made in the block carry `parent` (a W3C traceparent, `00-<trace id>-<span id>-<flags>`)."""
    token = _TRACE_PARENT.set(parent)
    try:
        yield
    finally:
        _TRACE_PARENT.reset(token)


def enable_runtime_tracing() -> None:
    """Turn the runtime's OpenTelemetry support on for the rest of the process, as worker_init_request does when
    the app setting PYTHON_ENABLE_OPENTELEMETRY is true (the app is indexed once a process, before any caller could
    set it): each invocation then attaches its trace context on the runtime's event loop, an empty one when it
    carries none. For good, not for a block: the runtime never detaches what it attached, so turning it off again
    would leave the last invocation's context on its loop."""
    otel: Any = __import__("azure_functions_runtime.otel", fromlist=["otel_manager"])
    if not otel.otel_manager.get_otel_libs_available():
        otel.otel_manager.set_otel_libs_available(True)
        otel.update_opentelemetry_status()
