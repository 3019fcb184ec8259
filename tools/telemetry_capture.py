"""What the app sends to Application Insights for a unit of work, counted in memory: the functions invoked
through the pinned runtime (tools/local_host.py), as the host invokes them with its trace context, and every
span, log record and metric point they produce caught by OpenTelemetry's in-memory exporters, each sized as the
JSON item the Azure Monitor exporter would send (its own conversion: `_convert_span_to_envelope`,
`_convert_log_to_envelope`, `_convert_point_to_envelope`). The pipeline is the one production runs: the app's
log filters (shared.telemetry.observability.install_filters) on OpenTelemetry's logging handler on the root logger, the
app's meter on a provider read with the exporter's temporalities (delta for counters and histograms).

The host's own item per invocation (its span: a request in Application Insights) is made here as the host
makes it (a server span named and tagged as its source does: azure-functions-host
src/WebJobs.Script/Diagnostics/OpenTelemetry, read 2026-11-28) and sized by the same conversion: the .NET
exporter writes the same schema. Its traceparent goes to the worker with the invocation, sampled or not as the
capture is told, so what the app sends in a trace the sampler kept, and what it sends whatever the sampling,
are told apart (`Item.always`).

Nothing leaves the process. `./dev bench` (benchmarks/telemetry.py) and tests/functions/test_telemetry_volume.py
use it; the model of the bill's Application Insights line is tools/costs/telemetry.py."""

import json
import logging
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import azure.functions as func
from azure.monitor.opentelemetry.exporter._constants import _SAMPLE_RATE_KEY
from azure.monitor.opentelemetry.exporter.export.logs._exporter import _convert_log_to_envelope
from azure.monitor.opentelemetry.exporter.export.metrics._exporter import (
    APPLICATION_INSIGHTS_METRIC_TEMPORALITIES,
    _convert_point_to_envelope,
)
from azure.monitor.opentelemetry.exporter.export.trace._exporter import _convert_span_to_envelope
from opentelemetry import metrics as otel_metrics
from opentelemetry.instrumentation.logging.handler import LoggingHandler
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, MetricsData
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from shared.telemetry import metrics, observability
from tools.host import tracing
from tools.local_host import LocalHost

# What an instance of the deployed app looks like to the exporter: the Function App's name as infra/main.bicep
# makes it (`func-api-` and a 13-character token) and an instance id of a GUID's length.
RESOURCE = Resource(
    {
        "service.name": "func-api-abcdefghijklm",
        "service.instance.id": "00000000-0000-0000-0000-000000000000",
        "cloud.provider": "azure",
        "cloud.platform": "azure_functions",
    }
)
INSTRUMENTATION_KEY = "00000000-0000-0000-0000-000000000000"  # every item carries the resource's key
HOST_NAME = "func-api-abcdefghijklm.azurewebsites.net"
ROUTE_PREFIX = "api"  # host.json extensions.http.routePrefix


@dataclass(frozen=True)
class Item:
    """One telemetry item: its Application Insights table, what names it (a span's or metric's name, a log's
    logger), its size as the exporter's JSON, and whether it is sent whatever the sampling (a warning or worse,
    a metric point) or only in a trace the sampler kept; its custom dimensions."""

    table: str  # requests, dependencies, traces, customMetrics
    name: str
    bytes: int
    always: bool
    dimensions: Mapping[str, Any] = field(default_factory=dict)


@cache
def metric_reader() -> InMemoryMetricReader:
    """The process's meter provider's reader, installed the first time (OpenTelemetry takes one global provider a
    process, and the app's instruments bind to it): each read returns what was recorded since the last, with the
    Azure Monitor exporter's temporalities. Shared by every caller in the process (the metric tests too)."""
    reader = InMemoryMetricReader(preferred_temporality=APPLICATION_INSIGHTS_METRIC_TEMPORALITIES)  # type: ignore[arg-type]
    otel_metrics.set_meter_provider(MeterProvider(metric_readers=[reader], resource=RESOURCE))
    return reader


def envelope_bytes(envelope: Any) -> int:
    """The size of an Azure Monitor item as uncompressed JSON, with its instrumentation key."""
    envelope.instrumentation_key = INSTRUMENTATION_KEY
    return len(json.dumps(envelope.as_dict(), separators=(",", ":"), default=str).encode())


def metric_items(data: MetricsData | None, meter: str = metrics.METER) -> list[Item]:
    """Every data point of `meter` in a reading, one customMetrics item each."""
    found = []
    for resource_metrics in data.resource_metrics if data else []:
        for scope in resource_metrics.scope_metrics:
            if scope.scope.name != meter:
                continue
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    envelope = _convert_point_to_envelope(point, metric.name, RESOURCE, scope.scope)
                    dimensions = dict(point.attributes or {})
                    found.append(Item("customMetrics", metric.name, envelope_bytes(envelope), True, dimensions))
    return found


@cache
def distro_counters() -> tuple[Item, ...]:
    """What the distro's performance counters (on by default: `enable_performance_counters`) send each export
    interval, per process: one reading of them on a meter provider of their own."""
    from azure.monitor.opentelemetry.exporter._performance_counters import enable_performance_counters

    reader = InMemoryMetricReader(preferred_temporality=APPLICATION_INSIGHTS_METRIC_TEMPORALITIES)  # type: ignore[arg-type]
    provider = MeterProvider(metric_readers=[reader], resource=RESOURCE)
    enable_performance_counters(meter_provider=provider)
    items = []
    data = reader.get_metrics_data()
    for resource_metrics in data.resource_metrics if data else []:
        for scope in resource_metrics.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    envelope = _convert_point_to_envelope(point, metric.name, RESOURCE, scope.scope)
                    items.append(Item("performanceCounters", metric.name, envelope_bytes(envelope), True))
    provider.shutdown()
    return tuple(items)


class Capture:
    """While open: the app's logs go through the production filters into memory, its metrics are read from the
    process's provider, and each invocation made with `http`, `queue` or `timer` runs in a host span whose
    traceparent reaches the worker, flagged `sampled`. `items()` drains what was sent. `ratio`: the sampler's, as
    the request items record it (`_MS.sampleRate`)."""

    def __init__(self, host: LocalHost, *, sampled: bool = True, ratio: float = 1.0, clock: Callable[[], float]):
        self.host, self.sampled, self.ratio, self.clock = host, sampled, ratio, clock
        self._spans = InMemorySpanExporter()
        self._tracer_provider = TracerProvider(resource=RESOURCE)
        self._tracer_provider.add_span_processor(SimpleSpanProcessor(self._spans))
        self._tracer = self._tracer_provider.get_tracer("Microsoft.Azure.Functions.Host")
        self._logs = InMemoryLogRecordExporter()
        self._logger_provider = LoggerProvider(resource=RESOURCE)
        self._logger_provider.add_log_record_processor(SimpleLogRecordProcessor(self._logs))
        self._handler = LoggingHandler(logger_provider=self._logger_provider)
        observability.install_filters(self._handler, clock)
        self._level = logging.NOTSET

    def __enter__(self) -> "Capture":
        tracing.enable_runtime_tracing()
        metric_reader().get_metrics_data()  # forget what was recorded before
        root = logging.getLogger()
        self._level = root.level
        root.setLevel(logging.INFO)  # the Python worker's root level: INFO reaches the handler, which filters
        root.addHandler(self._handler)
        return self

    def __exit__(self, *_: object) -> None:
        root = logging.getLogger()
        root.removeHandler(self._handler)
        root.setLevel(self._level)
        self._logger_provider.shutdown()
        self._tracer_provider.shutdown()

    @contextmanager
    def _host_span(self, name: str, attributes: dict[str, Any]) -> Iterator[Any]:
        """The host's span of one invocation, its traceparent handed to the worker (flags per `sampled`)."""
        attributes = {**attributes, _SAMPLE_RATE_KEY: self.ratio * 100}
        with self._tracer.start_as_current_span(name, kind=SpanKind.SERVER, attributes=attributes) as span:
            context = span.get_span_context()
            flags = "01" if self.sampled else "00"
            with tracing.traced(f"00-{context.trace_id:032x}-{context.span_id:016x}-{flags}"):
                yield span

    def http(
        self,
        function: str,
        *,
        method: str,
        route: str,
        route_params: dict[str, str],
        headers: dict[str, str],
        body: bytes = b"",
    ) -> func.HttpResponse:
        """One HTTP request to `function` (its `route` template, e.g. `bottles/{bottle_id}/events`), in the span
        the host's ASP.NET Core instrumentation makes, enriched as the host does (`faas.trigger`, `http.route`)."""
        path = f"/{ROUTE_PREFIX}/" + route.format(**route_params)
        template = f"{ROUTE_PREFIX}/{route}"
        attributes = {
            "http.request.method": method,
            "url.scheme": "https",
            "url.path": path,
            "server.address": HOST_NAME,
            "network.protocol.version": "1.1",
            "http.route": template,
            "faas.trigger": "http",
        }
        with self._host_span(f"{method} {template}", attributes) as span:
            response = self.host.invoke_http(
                function,
                method=method,
                url=path,
                headers=headers,
                params={},
                route_params=route_params,
                body=body,
            )
            span.set_attribute("http.response.status_code", response.status_code)
        return response

    def queue(self, function: str, body: str, *, dequeue_count: int = 1) -> list[str]:
        """One queue message to `function`, in the span the host starts for a trigger it does not instrument (its
        ActivitySourceWrapper: the function's log name, a server span)."""
        attributes = {"faas.trigger": "pubsub", "faas.invocation_id": str(uuid.uuid4())}
        with self._host_span(f"Functions.{function}", attributes):
            return self.host.invoke_queue(function, body, dequeue_count=dequeue_count)

    def timer(self, function: str) -> list[str]:
        """One run of the timer `function`, in the host's span for it."""
        attributes = {"faas.trigger": "timer", "faas.invocation_id": str(uuid.uuid4())}
        with self._host_span(f"Functions.{function}", attributes):
            return self.host.run_timer(function)

    def items(self) -> list[Item]:
        """Everything sent since the last call: the host's spans, the app's exported log records, the metric
        points of one export."""
        found = [self._span_item(span) for span in self._spans.get_finished_spans()]
        self._spans.clear()
        self._logger_provider.force_flush()
        for record in self._logs.get_finished_logs():
            envelope = _convert_log_to_envelope(record)
            level = record.log_record.severity_number
            always = level is not None and level.value >= 13  # WARN and above (SeverityNumber.WARN is 13)
            attributes = dict(record.log_record.attributes or {})
            scope = record.instrumentation_scope.name if record.instrumentation_scope else ""
            found.append(Item("traces", scope, envelope_bytes(envelope), always, attributes))
        self._logs.clear()
        found += metric_items(metric_reader().get_metrics_data())
        return found

    def _span_item(self, span: ReadableSpan) -> Item:
        table = "requests" if span.kind in (SpanKind.SERVER, SpanKind.CONSUMER) else "dependencies"
        size = envelope_bytes(_convert_span_to_envelope(span))
        return Item(table, span.name, size, False, dict(span.attributes or {}))
