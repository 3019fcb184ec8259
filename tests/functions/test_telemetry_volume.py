"""What the app sends to Application Insights, read back from in-memory OpenTelemetry exporters with the functions
invoked through the pinned runtime as the host invokes them (tools/telemetry_capture.py): each unit of work sends
what the bill's model counts (tools/costs/telemetry.py MEASURED), an invocation's line follows the host's sampling
decision, operator lines carry their details as custom dimensions, and a fault on every request stays bounded."""

import json
import logging
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from azure.monitor.opentelemetry.exporter.export.logs._exporter import _convert_log_to_envelope
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor

from benchmarks import telemetry as benchmark
from functions import device_events, invocations
from shared.instants import set_clock, utc_now
from shared.store import schema
from shared.telemetry import metrics, observability
from tests.cosmos_fakes import ThrottlingDatabase
from tools.costs.telemetry import MEASURED
from tools.host.worker import InvocationFailed
from tools.local_host import LocalHost
from tools.telemetry_capture import Capture, Item

ROOT = Path(__file__).resolve().parents[2]
ROUTE = "bottles/{bottle_id}/events"


class Ticks:
    """A clock for the rate limit's minutes that the test moves."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def host(mock_db: Any) -> LocalHost:
    return LocalHost.load()


@pytest.fixture
def clock() -> Iterator[None]:
    start = utc_now().replace(second=0, microsecond=0)
    set_clock(lambda: start)
    yield
    set_clock(None)


def provisioned(capture: Capture, bottle_id: str) -> str:
    body = {"user_id": "user-1", "medication": "Cordrazine", "schedule": {"every_hours": 8}}
    response = capture.http(
        "provision_bottle",
        method="PUT",
        route="bottles/{bottle_id}",
        route_params={"bottle_id": bottle_id},
        headers={"content-type": "application/json"},
        body=json.dumps(body).encode(),
    )
    return str(json.loads(response.get_body())["device_key"])


def heartbeat(capture: Capture, bottle_id: str, key: str, minutes_ago: int = 1) -> int:
    at = (utc_now() - timedelta(minutes=minutes_ago)).isoformat()
    response = capture.http(
        "post_events",
        method="POST",
        route=ROUTE,
        route_params={"bottle_id": bottle_id},
        headers={"content-type": "application/json", "x-device-key": key},
        body=json.dumps({"type": "heartbeat", "time": at}).encode(),
    )
    return int(response.status_code)


def lines(items: list[Item], table: str = "traces") -> list[Item]:
    return [item for item in items if item.table == table]


def test_each_unit_of_work_sends_what_the_bill_counts(host: LocalHost) -> None:
    """The model's MEASURED is the benchmark's last run: the same counts now, and sizes within a few percent (ids
    and times vary in length), through the runtime on the default store."""
    found = {unit.unit: unit for unit in benchmark.measure(host, utc_now().replace(second=0, microsecond=0))}

    assert set(found) == set(MEASURED)
    for name, unit in found.items():
        model = MEASURED[name]
        counts = (unit.requests, unit.traces, unit.always_items, unit.metric_points)
        assert counts == (model.requests, model.traces, model.always_items, model.metric_points), name
        for measured, recorded in ((unit.sampled_bytes, model.sampled_bytes), (unit.metric_bytes, model.metric_bytes)):
            assert measured == pytest.approx(recorded, rel=0.05, abs=8), name
    # Every request and run is one request item and one line of the app's, kept or dropped together; a page more
    # of a report run sends nothing more; no warning in normal operation.
    assert all(
        (u.requests, u.traces) == (1, 1) for u in found.values() if "minute" not in u.unit and "more" not in u.unit
    )
    assert (found["a report page more"].traces, found["a report page more"].metric_points) == (0, 0)
    assert all(u.always_items == 0 for u in found.values())


@pytest.mark.parametrize("sampled", [True, False])
def test_an_invocation_s_line_follows_the_host_s_sampling_decision_through_the_runtime(
    host: LocalHost, clock: None, sampled: bool
) -> None:
    """The host hands the worker its traceparent; the runtime runs a synchronous function on a thread without
    the context it attached, so the app attaches it (shared.telemetry.observability.host_trace): a line of a trace the
    sampler dropped is not sent, and a kept one carries the host's operation id."""
    with Capture(host, clock=Ticks()) as capture:
        key = provisioned(capture, "bottle-7")
        capture.items()
        capture.sampled = sampled
        assert heartbeat(capture, "bottle-7", key) == 202
        items = capture.items()

    [request] = lines(items, "requests")
    sent = lines(items)
    assert [item.dimensions.get("function") for item in sent] == (["post_events"] if sampled else [])
    if sampled:
        assert sent[0].dimensions["bottle_id"] == "bottle-7"
    assert lines(items, "customMetrics")  # metrics are never sampled
    assert request.name == "POST api/bottles/{bottle_id}/events"


def test_a_kept_line_belongs_to_the_host_s_trace(host: LocalHost, clock: None) -> None:
    """Its operation id is the host request's: the portal shows the request and its line together."""
    exported = InMemoryLogRecordExporter()
    with Capture(host, clock=Ticks()) as capture:
        key = provisioned(capture, "bottle-8")
        capture.items()
        capture._logger_provider.add_log_record_processor(SimpleLogRecordProcessor(exported))  # records whole
        assert heartbeat(capture, "bottle-8", key) == 202
        [span] = capture._spans.get_finished_spans()
        capture._logger_provider.force_flush()
        [record] = [r for r in exported.get_finished_logs() if (r.log_record.attributes or {}).get("function")]

    assert record.log_record.trace_id == span.context.trace_id
    envelope = _convert_log_to_envelope(record).as_dict()
    assert envelope["tags"]["ai.operation.id"] == f"{span.context.trace_id:032x}"


def test_operator_lines_reach_application_insights_with_their_details_as_custom_dimensions(
    host: LocalHost, clock: None, mock_db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An invocation's counts, a refusal, a 500's error_id, a check run's check and partition, a failed
    message's function and dequeue count: each a property of the item (customDimensions), so a query filters on
    it without parsing text."""
    with Capture(host, clock=Ticks()) as capture:
        key = provisioned(capture, "bottle-9")
        capture.items()
        assert heartbeat(capture, "bottle-9", key) == 202
        assert heartbeat(capture, "bottle-9", "not-the-key-0123456789abcdef") == 401
        broken = ThrottlingDatabase(mock_db, {schema.BOTTLE_HEARTBEATS: 1}, error=lambda: KeyError("boom"))
        monkeypatch.setattr(device_events, "get_database", lambda: broken)
        assert heartbeat(capture, "bottle-9", key) == 500
        monkeypatch.undo()
        capture.queue("run_check_partition", json.dumps({"kind": "left_open", "partition": 1, "of": 4}))
        with pytest.raises(InvocationFailed):
            capture.queue("aggregate_report_partition", "not json", dequeue_count=invocations.MAX_DEQUEUE_COUNT)
        items = lines(capture.items())

    [counted] = [i.dimensions for i in items if "stored" in i.dimensions]
    assert {k: counted[k] for k in ("function", "bottle_id", "stored", "duplicates", "expired")} == {
        "function": "post_events",
        "bottle_id": "bottle-9",
        "stored": 1,
        "duplicates": 0,
        "expired": 0,
    }
    refused = next(i.dimensions for i in items if i.dimensions.get("status") == 401)
    assert (refused["function"], refused["bottle_id"]) == ("post_events", "bottle-9")
    failed = next(i for i in items if i.dimensions.get("status") == 500)
    assert failed.always
    assert len(failed.dimensions["error_id"]) == 32
    assert failed.dimensions["error"] == "KeyError"
    check = next(i.dimensions for i in items if i.dimensions.get("function") == "run_check_partition")
    assert (check["check"], check["partition"], check["dequeue_count"]) == ("left_open", "left_open:1/4", 1)
    poison = next(i for i in items if i.dimensions.get("function") == "aggregate_report_partition")
    assert poison.always
    assert (poison.dimensions["poison"], poison.dimensions["dequeue_count"]) == (True, 5)
    assert poison.dimensions["error"] == "ValueError"


def test_a_fault_on_every_request_sends_a_bounded_number_of_lines_and_counts_every_one(
    host: LocalHost, clock: None, mock_db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store unavailable for every request (throttled through its retries): each answers 503, each is
    counted in the metrics, and at most RECORDS_PER_MINUTE of its warnings leave the process a minute."""
    ticks = Ticks()
    requests = observability.RECORDS_PER_MINUTE + 15
    with Capture(host, clock=ticks) as capture:
        key = provisioned(capture, "bottle-10")
        capture.items()
        throttled = ThrottlingDatabase(mock_db, {schema.BOTTLE_HEARTBEATS: float("inf")})
        monkeypatch.setattr(device_events, "get_database", lambda: throttled)
        assert {heartbeat(capture, "bottle-10", key) for _ in range(requests)} == {503}
        ticks.now += 60
        assert heartbeat(capture, "bottle-10", key) == 503
        items = capture.items()

    warnings = [i for i in lines(items) if i.always]
    assert len(warnings) == observability.RECORDS_PER_MINUTE + 1
    assert warnings[-1].dimensions[observability.SUPPRESSED] == requests - observability.RECORDS_PER_MINUTE
    answered = [i for i in lines(items, "customMetrics") if i.name == metrics.HTTP_REQUESTS]
    assert [i.dimensions for i in answered] == [{"function": "post_events", "status": 503}]


def test_the_poison_count_fires_on_the_attempt_host_json_makes_last() -> None:
    queues = json.loads((ROOT / "host.json").read_text())["extensions"]["queues"]
    assert queues["maxDequeueCount"] == invocations.MAX_DEQUEUE_COUNT


def test_a_capture_leaves_the_root_logger_as_it_found_it(host: LocalHost) -> None:
    root = logging.getLogger()
    before = (root.level, list(root.handlers))
    with Capture(host, clock=Ticks()):
        pass
    assert (root.level, list(root.handlers)) == before
