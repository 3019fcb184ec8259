"""Operator-facing logs: one line per function invocation with its counts, never secrets, each detail also a
structured field (a custom dimension in Application Insights); and Application Insights through OpenTelemetry
when the app runs in Azure, at a volume that does not grow with the instances (docs/operations.md: Telemetry).

What leaves the process (`install_filters`, on the distro's log handler):

- a record below WARNING only from the app's own loggers (`functions.*`, `shared.*`) and only in a trace the
  sampler kept (the host's trace, whose sampled flag the runtime hands the worker), or outside any trace;
- a WARNING or worse whatever the sampling, but at most RECORDS_PER_MINUTE of each kind (logger, message
  template, level) a minute per process: a fault that hits every request would otherwise send one record per
  request, unsampled, and fill the day's ingestion cap within the hour. The next record of a kind that was cut
  carries `suppressed`, how many were; the metrics (shared/telemetry/metrics.py) count every one, never sampled.
"""

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

CONNECTION_STRING_SETTING = "APPLICATIONINSIGHTS_CONNECTION_STRING"
# The trace sampler the host (azure-functions-host PR 11568) and the distro both read from the app settings.
SAMPLER_SETTING = "OTEL_TRACES_SAMPLER"
SAMPLER_ARG_SETTING = "OTEL_TRACES_SAMPLER_ARG"
FIXED_PERCENTAGE = "microsoft.fixed_percentage"
APP_LOGGERS = ("functions", "shared", "function_app")  # the loggers whose INFO lines ops read
RECORDS_PER_MINUTE = 20  # of each kind of warning or error, per process
SUPPRESSED = "suppressed"  # the field a record carries when records of its kind before it were cut
_KINDS_KEPT = 1024  # kinds the rate limit remembers before it forgets those of past minutes
_PROPAGATOR = TraceContextTextMapPropagator()

log = logging.getLogger(__name__)
_telemetry_configured = False
rate_clock: Callable[[], float] = time.monotonic  # what the rate limit's minutes are read on (a test's fake)

# What logging.LogRecord holds itself: a field of one of these names would collide with it (logging refuses to
# overwrite them, and OpenTelemetry's handler leaves them out), so fields() renames it with a trailing "_".
_RECORD_ATTRIBUTES = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}


def configure_telemetry(environ: Mapping[str, str] = os.environ) -> bool:
    """Export logs, traces and metrics to Application Insights (the azure-monitor-opentelemetry distro) when
    APPLICATIONINSIGHTS_CONNECTION_STRING is set; otherwise do nothing, silently (local runs, tests). True once
    configured; calling again does nothing. A telemetry fault is logged and never stops the app.

    The distro reads the sampler from OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG, as the host does: the
    deployment sets microsoft.fixed_percentage, whose decision is a hash of the trace id in both (the same
    traces kept by the host and the worker). Any other sampler is logged as a warning: a rate a second is per
    process, so the volume grows with the instances."""
    global _telemetry_configured  # noqa: PLW0603 - one exporter pipeline per process
    if _telemetry_configured:
        return True
    if not environ.get(CONNECTION_STRING_SETTING, "").strip():
        return False
    try:
        # Imported here: the distro is heavy and only ever needed in Azure.
        from azure.monitor.opentelemetry import configure_azure_monitor  # noqa: PLC0415

        # The exporter reads the connection and authentication strings itself. The distro's own trace-based log
        # sampling drops every record of an unsampled trace, warnings and errors included; so it stays off and
        # the handler it adds gets install_filters' instead.
        root = logging.getLogger()
        before = list(root.handlers)
        configure_azure_monitor(enable_trace_based_sampling_for_logs=False)
        for handler in root.handlers:
            if handler not in before:
                install_filters(handler, rate_clock)
    except Exception as error:  # telemetry must never take the app down
        # The type only: a parser's message could echo the connection string.
        log.warning("Application Insights telemetry is off: %s", type(error).__name__)
        return False
    _telemetry_configured = True
    sampler = environ.get(SAMPLER_SETTING, "")
    if sampler != FIXED_PERCENTAGE:
        log.warning(
            "telemetry: %s is %r, not %s: traces sampled by a rate a second grow with the instances",
            SAMPLER_SETTING,
            sampler,
            FIXED_PERCENTAGE,
            extra=fields(setting=SAMPLER_SETTING, value=sampler),
        )
    return True


def install_filters(handler: logging.Handler, clock: Callable[[], float] = time.monotonic) -> None:
    """The filters on the handler that exports to Application Insights (the module's docstring says what they
    let through): `exported`, then a RateLimit of RECORDS_PER_MINUTE on `clock` (seconds)."""
    handler.addFilter(exported)
    handler.addFilter(RateLimit(RECORDS_PER_MINUTE, clock))


def exported(record: logging.LogRecord) -> bool:
    """A WARNING or worse: yes. A lesser record: only from the app's own loggers, and not in a trace the sampler
    dropped."""
    if record.levelno >= logging.WARNING:
        return True
    if not record.name.startswith(APP_LOGGERS):
        return False
    return sampled_or_untraced()


def sampled_or_untraced() -> bool:
    """Whether the current trace (if any) was kept by the sampler: the host's decision, in the trace flags of the
    traceparent the runtime attaches to the invocation."""
    context = trace.get_current_span().get_span_context()
    return not context.is_valid or context.trace_flags.sampled


@contextmanager
def host_trace(trace_parent: str | None) -> Iterator[None]:
    """Run the block in the host's trace: its W3C traceparent (`func.Context.trace_context.Traceparent`) attached
    as the current context, unless a valid one is current already. Why: the pinned runtime (1.3.0) attaches the
    host's trace context on its event loop (azure_functions_runtime/handle_event.py, `configure_opentelemetry`)
    and then runs a synchronous function with `loop.run_in_executor`, which does not carry context variables to
    the pool's thread; so without this the app's lines belong to no trace, and the sampler's decision (the flags
    of the traceparent) would never reach them. Microsoft's Python guidance does the same ("Cohesion with Azure
    Functions": extract `context.trace_context.Traceparent` and attach it; Migrate from Application Insights SDKs
    to Azure Monitor OpenTelemetry, MicrosoftDocs/azure-monitor-docs, page dated 2026-01-26, read 2026-11-28).
    No traceparent (local runs, the tests' direct calls): the block runs as it is."""
    current = trace.get_current_span().get_span_context()
    if not trace_parent or current.is_valid:
        yield
        return
    token = otel_context.attach(_PROPAGATOR.extract({"traceparent": trace_parent}))
    try:
        yield
    finally:
        otel_context.detach(token)


def trace_parent_of(context: Any) -> str | None:
    """The host's traceparent from a function's `context` (azure.functions.Context), or None without one."""
    trace_context = getattr(context, "trace_context", None)
    parent = getattr(trace_context, "Traceparent", None)
    return parent if isinstance(parent, str) and parent else None


class RateLimit(logging.Filter):
    """At most `per_minute` records of each kind (logger, message template, level) at WARNING or worse in any
    minute of `clock`, the first ones; the next record of a kind after some were cut carries SUPPRESSED, their
    number. Lesser records pass (the sampler bounds them)."""

    def __init__(self, per_minute: int, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.per_minute, self.clock = per_minute, clock
        self._lock = threading.Lock()
        self._kinds: dict[tuple[str, str, int], list[float]] = {}  # kind -> [window start, kept, cut]

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        kind = (record.name, str(record.msg), record.levelno)
        now = self.clock()
        with self._lock:
            if kind not in self._kinds and len(self._kinds) >= _KINDS_KEPT:  # messages built by hand, not templates
                self._kinds = {k: w for k, w in self._kinds.items() if now - w[0] < 60 or w[2]}
            window = self._kinds.setdefault(kind, [now, 0, 0])
            if now - window[0] >= 60:
                window[0], window[1] = now, 0
            if window[1] >= self.per_minute:
                window[2] += 1
                return False
            window[1] += 1
            cut, window[2] = int(window[2]), 0
        if cut:
            setattr(record, SUPPRESSED, cut)
        return True


def fields(**values: Any) -> dict[str, Any]:
    """The `extra` of a log call: each value a field of the record, which OpenTelemetry's handler turns into an
    attribute and Application Insights into a custom dimension (`customDimensions.check`). None is left out; a
    datetime is written as ISO 8601; anything but a string, bool, int or float as its str(). A name the log record
    holds itself (`created`, `name`, ...) gets a trailing "_" (`created_`)."""
    found: dict[str, Any] = {}
    for name, value in values.items():
        if value is None:
            continue
        key = f"{name}_" if name in _RECORD_ATTRIBUTES else name
        if isinstance(value, datetime):
            found[key] = value.isoformat()
        elif isinstance(value, str | bool | int | float):
            found[key] = value
        else:
            found[key] = str(value)
    return found


ERROR_TEXT_LIMIT = 300


def error_text(error: BaseException) -> str:
    """`Type: message` of an exception for a log line, the message cut to ERROR_TEXT_LIMIT characters: a storage
    SDK's error text carries the whole response (body and headers), and a line's size must not grow with it."""
    message = str(error)
    if len(message) > ERROR_TEXT_LIMIT:
        message = message[:ERROR_TEXT_LIMIT] + "..."
    return f"{type(error).__name__}: {message}"


def log_invocation(logger: logging.Logger, function: str, **values: Any) -> None:
    """Log `invocation <function> {json of values}` at INFO, each value also a field, with `function`. Pass
    counts, ids and durations only: never device keys, connection strings or request bodies."""
    logger.info(
        "invocation %s %s",
        function,
        json.dumps(values, default=str, separators=(",", ":")),
        extra=fields(function=function, **values),
    )
