"""Operator logs: one structured line per invocation with its counts, never a device key or a connection string;
and Application Insights through OpenTelemetry only when its connection string is set."""

import json
import logging
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from opentelemetry import trace
from pymongo.database import Database

from shared import observability
from shared.settings import get_settings
from tests import api
from tests.api import ago, closed, heartbeat, opened
from tests.bicep import ROOT

APP_INSIGHTS = "InstrumentationKey=00000000-0000-0000-0000-000000000000;IngestionEndpoint=https://example.invalid/"
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
def exported_logs(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[], list[str]]]:
    """Stands in for configure_azure_monitor's logging set-up as the distro builds it (its own trace-based sampling
    processor, the OpenTelemetry LoggingHandler on the root logger), exporting to memory; returns a reader of
    the messages exported."""
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

    def read() -> list[str]:
        provider.force_flush()
        return [str(data.log_record.body) for data in exporter.get_finished_logs()]

    monkeypatch.setattr(azure.monitor.opentelemetry, "configure_azure_monitor", configure_azure_monitor)
    monkeypatch.setattr(observability, "_telemetry_configured", False)
    yield read
    for handler in handlers:
        logging.getLogger().removeHandler(handler)
    provider.shutdown()


def in_trace(sampled: bool) -> Any:
    flags = trace.TraceFlags(trace.TraceFlags.SAMPLED if sampled else trace.TraceFlags.DEFAULT)
    return trace.use_span(trace.NonRecordingSpan(trace.SpanContext(0xA1, 0xB2, is_remote=True, trace_flags=flags)))


def test_warnings_and_errors_are_exported_whatever_the_sampling_and_lesser_logs_only_with_a_sampled_trace(
    exported_logs: Callable[[], list[str]],
) -> None:
    assert observability.configure_telemetry({observability.CONNECTION_STRING_SETTING: APP_INSIGHTS}) is True
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
