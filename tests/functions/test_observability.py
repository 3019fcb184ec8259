"""Operator logs: one structured line per invocation with its counts, never a device key or a connection string;
and Application Insights through OpenTelemetry only when its connection string is set."""

import json
import logging
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from opentelemetry import trace
from pymongo.database import Database

from shared.settings import get_settings
from shared.telemetry import observability
from tests import api
from tests.api import ago, closed, heartbeat, opened
from tests.bicep import ROOT

APP_INSIGHTS = "InstrumentationKey=00000000-0000-0000-0000-000000000000;IngestionEndpoint=https://example.invalid/"
DEPLOYED = {  # as infra/modules/functionapp.bicep sets them
    observability.CONNECTION_STRING_SETTING: APP_INSIGHTS,
    observability.SAMPLER_SETTING: observability.FIXED_PERCENTAGE,
    observability.SAMPLER_ARG_SETTING: "0.01",
}
MONGODB_URI = "mongodb://pillbottle:Sup3rSecretKey==@pillbottle.mongo.cosmos.azure.com:10255/?ssl=true"


@pytest.fixture
def distro(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Stands in for azure.monitor.opentelemetry.configure_azure_monitor; records each call's arguments."""
    import azure.monitor.opentelemetry

    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(azure.monitor.opentelemetry, "configure_azure_monitor", lambda **kw: calls.append(kw))
    monkeypatch.setattr(observability, "_telemetry_configured", False)
    return calls


def test_without_a_connection_string_telemetry_stays_off_and_silent(
    distro: list[dict[str, Any]], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)

    assert observability.configure_telemetry({}) is False
    assert observability.configure_telemetry({observability.CONNECTION_STRING_SETTING: "  "}) is False

    assert distro == []
    assert caplog.records == []


def test_a_connection_string_configures_the_distro_once(distro: list[dict[str, Any]]) -> None:
    environ = {observability.CONNECTION_STRING_SETTING: APP_INSIGHTS}

    assert observability.configure_telemetry(environ) is True
    assert observability.configure_telemetry(environ) is True

    assert len(distro) == 1


@pytest.fixture
def exported_records(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[], list[tuple[str, dict[str, Any]]]]]:
    """Stands in for configure_azure_monitor's logging set-up as the distro builds it (its own trace-based sampling
    processor, the OpenTelemetry LoggingHandler on the root logger), exporting to memory; returns a reader of
    the records exported: each one's message and attributes."""
    import azure.monitor.opentelemetry
    from azure.monitor.opentelemetry.exporter.export.logs._processor import _AzureBatchLogRecordProcessor
    from opentelemetry.instrumentation.logging.handler import LoggingHandler
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter

    exporter = InMemoryLogRecordExporter()
    provider = LoggerProvider()
    handlers: list[logging.Handler] = []

    def configure_azure_monitor(enable_trace_based_sampling_for_logs: bool = False, **_: Any) -> None:
        option = {"enable_trace_based_sampling_for_logs": enable_trace_based_sampling_for_logs}
        provider.add_log_record_processor(_AzureBatchLogRecordProcessor(exporter, option))
        handlers.append(LoggingHandler(logger_provider=provider))
        logging.getLogger().addHandler(handlers[-1])

    def read() -> list[tuple[str, dict[str, Any]]]:
        provider.force_flush()
        found = [(str(d.log_record.body), dict(d.log_record.attributes or {})) for d in exporter.get_finished_logs()]
        exporter.clear()
        return found

    monkeypatch.setattr(azure.monitor.opentelemetry, "configure_azure_monitor", configure_azure_monitor)
    monkeypatch.setattr(observability, "_telemetry_configured", False)
    yield read
    for handler in handlers:
        logging.getLogger().removeHandler(handler)
    provider.shutdown()


@pytest.fixture
def exported_logs(exported_records: Callable[[], list[tuple[str, dict[str, Any]]]]) -> Callable[[], list[str]]:
    """The messages exported (exported_records)."""
    return lambda: [message for message, _ in exported_records()]


def in_trace(sampled: bool) -> Any:
    flags = trace.TraceFlags(trace.TraceFlags.SAMPLED if sampled else trace.TraceFlags.DEFAULT)
    return trace.use_span(trace.NonRecordingSpan(trace.SpanContext(0xA1, 0xB2, is_remote=True, trace_flags=flags)))


def test_warnings_and_errors_are_exported_whatever_the_sampling_and_lesser_logs_only_with_a_sampled_trace(
    exported_logs: Callable[[], list[str]],
) -> None:
    assert observability.configure_telemetry(DEPLOYED) is True
    logger = logging.getLogger("shared.sampling_probe")
    logger.setLevel(logging.INFO)

    with in_trace(sampled=False):
        logger.info("invocation of a request the sampler dropped")
        logger.warning("store unavailable in a request the sampler dropped")
        logger.error("misconfigured in a request the sampler dropped")
    with in_trace(sampled=True):
        logger.info("invocation of a sampled request")
    logger.info("outside any trace")

    assert exported_logs() == [
        "store unavailable in a request the sampler dropped",
        "misconfigured in a request the sampler dropped",
        "invocation of a sampled request",
        "outside any trace",
    ]


def test_only_the_app_s_own_info_lines_are_exported_and_every_logger_s_warnings(
    exported_logs: Callable[[], list[str]],
) -> None:
    """The runtime logs a line per invocation at INFO ("Function name: ..."), the Azure SDK one per HTTP call:
    in a sampled trace they would double what each invocation sends, for nothing an operator reads."""
    assert observability.configure_telemetry(DEPLOYED) is True
    runtime, sdk = logging.getLogger("azure.functions"), logging.getLogger("azure.core.pipeline.policies.probe")
    app = logging.getLogger("functions.probe")
    for logger in (runtime, sdk, app):
        logger.setLevel(logging.INFO)

    with in_trace(sampled=True):
        runtime.info("Function name: post_events, Function Type: sync")
        sdk.info("Request URL: 'https://example.queue.core.windows.net/notifications/messages'")
        app.info("invocation post_events {}")
        sdk.warning("a queue call failed")

    assert exported_logs() == ["invocation post_events {}", "a queue call failed"]


def test_a_sampler_that_grows_with_the_instances_is_a_warning_with_its_fields(
    exported_records: Callable[[], list[tuple[str, dict[str, Any]]]],
) -> None:
    assert observability.configure_telemetry({**DEPLOYED, observability.SAMPLER_SETTING: "microsoft.rate_limited"})

    [(message, attributes)] = exported_records()
    assert "not microsoft.fixed_percentage" in message
    assert (attributes["setting"], attributes["value"]) == ("OTEL_TRACES_SAMPLER", "microsoft.rate_limited")


def test_a_fault_on_every_request_sends_at_most_the_limit_a_minute_and_then_how_many_were_cut(
    exported_records: Callable[[], list[tuple[str, dict[str, Any]]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Warnings are never sampled away, so a fault on every request (~17 K a second at the design scale) would
    send as many records and fill the day's ingestion cap: at most RECORDS_PER_MINUTE of a kind leave a process
    a minute, the first, and the next after the cut says how many were cut."""
    now = [1_000.0]
    monkeypatch.setattr(observability, "rate_clock", lambda: now[0])
    assert observability.configure_telemetry(DEPLOYED) is True
    logger = logging.getLogger("functions.responses")
    limit = observability.RECORDS_PER_MINUTE

    for n in range(limit + 30):
        logger.warning("%s store unavailable: %s", "post_events", f"attempt {n}")
    logger.error("%s misconfigured: %s", "post_events", "no connection string")  # another kind: its own limit
    now[0] += 59.9
    logger.warning("%s store unavailable: %s", "post_events", "still in the same minute")
    now[0] += 0.2
    logger.warning("%s store unavailable: %s", "post_events", "the next minute")

    found = exported_records()
    assert [m for m, _ in found] == [
        *(f"post_events store unavailable: attempt {n}" for n in range(limit)),
        "post_events misconfigured: no connection string",
        "post_events store unavailable: the next minute",
    ]
    assert [a.get(observability.SUPPRESSED) for _, a in found][-2:] == [None, 31]
    assert all(observability.SUPPRESSED not in a for _, a in found[:-1])


def test_fields_become_attributes_of_the_exported_record_without_colliding_with_the_record_s_own(
    exported_records: Callable[[], list[tuple[str, dict[str, Any]]]],
) -> None:
    assert observability.configure_telemetry(DEPLOYED) is True
    logger = logging.getLogger("shared.fields_probe")
    when = datetime(2026, 11, 28, 8, 30, tzinfo=UTC)

    logger.warning(
        "probe",
        extra=observability.fields(
            check="late_dose", partition="2/4", created=True, name="x", skipped=None, at=when, count=3, odd=[1, 2]
        ),
    )

    [(_, attributes)] = exported_records()
    assert {k: attributes[k] for k in ("check", "partition", "created_", "name_", "at", "count", "odd")} == {
        "check": "late_dose",
        "partition": "2/4",
        "created_": True,
        "name_": "x",
        "at": "2026-11-28T08:30:00+00:00",
        "count": 3,
        "odd": "[1, 2]",
    }
    assert "skipped" not in attributes


def test_a_telemetry_fault_is_logged_without_the_connection_string_and_the_app_carries_on(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import azure.monitor.opentelemetry

    def broken(**_: Any) -> None:
        raise ValueError(f"malformed connection string {APP_INSIGHTS}")

    monkeypatch.setattr(azure.monitor.opentelemetry, "configure_azure_monitor", broken)
    monkeypatch.setattr(observability, "_telemetry_configured", False)

    assert observability.configure_telemetry({observability.CONNECTION_STRING_SETTING: APP_INSIGHTS}) is False

    assert [record.getMessage() for record in caplog.records] == ["Application Insights telemetry is off: ValueError"]


def test_importing_the_app_without_app_insights_loads_no_telemetry_and_opens_no_connection() -> None:
    probe = (
        "import socket, sys\n"
        "def refuse(*args, **kwargs):\n"
        "    raise AssertionError('network I/O at import')\n"
        "socket.socket.connect = refuse\n"
        "socket.create_connection = refuse\n"
        "socket.getaddrinfo = refuse\n"
        "import function_app\n"
        "assert 'azure.monitor.opentelemetry' not in sys.modules\n"
        "print(sorted(f.get_function_name() for f in function_app.app.get_functions()))\n"
    )
    environ = {k: v for k, v in os.environ.items() if k != observability.CONNECTION_STRING_SETTING} | {
        "MONGODB_CONNECTION_STRING": "mongodb://127.0.0.1:1/",  # what the start-up requires (none is reached)
        "AzureWebJobsStorage": "UseDevelopmentStorage=true",
    }
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, env=environ, capture_output=True, text=True, timeout=120, check=False
    )

    assert done.returncode == 0, done.stderr
    assert "post_events" in done.stdout


def invocation_lines(caplog: pytest.LogCaptureFixture, function: str) -> list[dict[str, Any]]:
    prefix = f"invocation {function} "
    return [
        json.loads(record.getMessage()[len(prefix) :])
        for record in caplog.records
        if record.getMessage().startswith(prefix)
    ]


def test_each_invocation_logs_one_line_with_its_counts_and_never_a_key_or_connection_string(
    db: Database[Any], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("MONGODB_CONNECTION_STRING", MONGODB_URI)
    get_settings.cache_clear()
    caplog.set_level(logging.DEBUG)
    events = {"events": [heartbeat(ago(minutes=9)), opened(ago(minutes=8)), closed(ago(minutes=7))]}

    key = api.provisioned("bottle-7")
    first = api.post_events("bottle-7", key, events)
    retry = api.post_events("bottle-7", key, events)
    wrong = api.post_events("bottle-7", "not-the-key-0123456789abcdef", events)
    rotated = api.put_bottle("bottle-7", rotate_key=True)
    new_key = rotated.body["device_key"]
    stale = api.post_events("bottle-7", key, {"events": [heartbeat(ago(minutes=1))]})
    fresh = api.post_events("bottle-7", new_key, {"events": [heartbeat(ago(minutes=1))]})

    assert [first.status, retry.status, wrong.status, stale.status, fresh.status] == [202, 202, 401, 401, 202]
    assert invocation_lines(caplog, "post_events") == [
        {"bottle_id": "bottle-7", "stored": 3, "duplicates": 0, "expired": 0},
        {"bottle_id": "bottle-7", "stored": 0, "duplicates": 3, "expired": 0},
        {"bottle_id": "bottle-7", "stored": 1, "duplicates": 0, "expired": 0},
    ]
    assert [line["key_issued"] for line in invocation_lines(caplog, "provision_bottle")] == [True, True]
    logged = "\n".join([caplog.text, *(record.getMessage() for record in caplog.records)])
    for secret in (key, new_key, "not-the-key-0123456789abcdef", MONGODB_URI, "Sup3rSecretKey"):
        assert secret not in logged


def test_an_error_in_a_log_line_is_its_type_and_at_most_the_limit_of_its_text() -> None:
    """A storage SDK's HttpResponseError carries the whole response: a warning that quotes it stays bounded."""
    huge = RuntimeError("<Error>" + "x" * 70_000 + "</Error>")

    assert observability.error_text(ValueError("bad page")) == "ValueError: bad page"
    text = observability.error_text(huge)
    assert text.startswith("RuntimeError: <Error>xxx")
    assert text.endswith("...")
    assert len(text) == len("RuntimeError: ") + observability.ERROR_TEXT_LIMIT + len("...")
