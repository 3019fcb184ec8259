"""The metrics operators alert on (shared/telemetry/metrics.py), read through the OpenTelemetry SDK as Application
Insights would get them: each is recorded when its event happens, with the value and attributes the alert rules
query."""

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from opentelemetry.sdk.metrics.export import (
    HistogramDataPoint,
    InMemoryMetricReader,
    MetricsData,
    NumberDataPoint,
)
from pymongo import UpdateOne
from pymongo.errors import AutoReconnect, BulkWriteError, ExecutionTimeout, OperationFailure

from functions import device_events
from shared.consumers import plugged
from shared.feeds.partitions import NoPartitionTokens
from shared.feeds.settling import hours_due
from shared.instants import hour_of, set_clock, utc_now
from shared.notifications.checks.run import CheckRun, run_check
from shared.reports.feeds import HEARTBEAT_TALLY
from shared.settings import get_settings
from shared.store import schema
from shared.store.cosmos import feed_range
from shared.store.partitioning import BUCKETS, BucketRange, bucket_of
from shared.store.retries import RetryPolicy, StoreUnavailable, count_matched, with_retries
from shared.telemetry import metrics
from tests import invoke
from tests.api import ago, closed, get_bottle, heartbeat, opened, post_events, provisioned
from tests.checking import World, sweep_all
from tests.cosmos_fakes import CosmosTokens, ThrottlingDatabase, throttled
from tests.report_client import run_round, set_setting
from tools import telemetry_capture
from tools.host.worker import InvocationFailed

START = datetime(2026, 5, 4, 9, 0, tzinfo=UTC)
# (metric name, its attributes sorted) -> a counter's sum, or a histogram's (count, min, max)
Readings = dict[tuple[str, tuple[tuple[str, Any], ...]], Any]


@pytest.fixture(scope="session")
def reader() -> InMemoryMetricReader:
    """The process's MeterProvider (set once for the process, shared with tools/telemetry_capture.py), read with the
    Azure Monitor exporter's temporalities: counters and histograms by delta, each read returning what was recorded
    since the last."""
    return telemetry_capture.metric_reader()


def readings(data: MetricsData | None) -> Readings:
    found: Readings = {}
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            if scope.scope.name != metrics.METER:
                continue
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    attributes = dict(point.attributes or {})
                    assert set(attributes) == set(metrics.ATTRIBUTES[metric.name]), metric.name
                    key = (metric.name, tuple(sorted(attributes.items())))
                    if isinstance(point, HistogramDataPoint):
                        found[key] = (point.count, point.min, point.max)
                    elif isinstance(point, NumberDataPoint) and point.value:
                        found[key] = point.value
    return found


@pytest.fixture
def recorded(reader: InMemoryMetricReader) -> Callable[[], Readings]:
    """What the app records from now on: call it to read (and reset)."""
    reader.get_metrics_data()
    return lambda: readings(reader.get_metrics_data())


def of(found: Readings, name: str) -> dict[tuple[tuple[str, Any], ...], Any]:
    return {attributes: value for (metric, attributes), value in found.items() if metric == name}


# --- the store and HTTP -----------------------------------------------------------------------------------------


@pytest.fixture
def throttle(mock_db: Any, monkeypatch: pytest.MonkeyPatch) -> Callable[[dict[str, float]], ThrottlingDatabase]:
    def install(failures: dict[str, float]) -> ThrottlingDatabase:
        fake = ThrottlingDatabase(mock_db, failures)
        monkeypatch.setattr(device_events, "get_database", lambda: fake)
        return fake

    return install


def test_each_throttled_attempt_is_counted_even_when_the_retry_succeeds(
    throttle: Any, recorded: Callable[[], Readings]
) -> None:
    key = provisioned()
    throttle({f"{schema.BOTTLE_HEARTBEATS}.update_one": 2})

    assert post_events("bottle-1", key, heartbeat(ago(minutes=1))).status == 202

    found = recorded()
    assert of(found, metrics.STORE_THROTTLED) == {(("code", 16500),): 2}
    assert of(found, metrics.HTTP_503) == {}


def test_a_request_throttled_through_its_retries_counts_a_503_of_its_function(
    throttle: Any, recorded: Callable[[], Readings]
) -> None:
    key = provisioned()
    throttle({schema.BOTTLE_HEARTBEATS: float("inf")})

    assert post_events("bottle-1", key, heartbeat(ago(minutes=1))).status == 503

    found = recorded()
    assert of(found, metrics.HTTP_503) == {(("function", "post_events"), ("reason", "store_unavailable")): 1}
    assert of(found, metrics.STORE_THROTTLED) == {(("code", 16500),): 4}  # the first try and 3 retries


def test_a_store_that_is_not_configured_counts_a_503_of_its_function(recorded: Callable[[], Readings]) -> None:
    assert get_bottle("bottle-1").status == 503

    assert of(recorded(), metrics.HTTP_503) == {(("function", "get_bottle"), ("reason", "not_configured")): 1}


def test_server_side_retry_running_out_counts_as_throttling_and_a_dropped_connection_does_not(
    recorded: Callable[[], Readings],
) -> None:
    failures = iter([ExecutionTimeout("Request timed out. Retries due to rate limiting: True.", code=50), throttled()])

    def flaky() -> str:
        error = next(failures, None)
        if error is not None:
            raise error
        return "done"

    def disconnected() -> None:
        raise AutoReconnect("connection closed")

    assert with_retries(flaky, RetryPolicy(max_retries=3, base_ms=1), sleep=lambda _: None) == "done"
    with pytest.raises(StoreUnavailable):
        with_retries(disconnected, RetryPolicy(max_retries=1, base_ms=1), sleep=lambda _: None)

    assert of(recorded(), metrics.STORE_THROTTLED) == {(("code", 50),): 1, (("code", 16500),): 1}


def test_a_database_fault_counts_a_500_of_its_function_naming_the_code_and_no_503(
    mock_db: Any, monkeypatch: pytest.MonkeyPatch, recorded: Callable[[], Readings]
) -> None:
    key = provisioned()
    fake = ThrottlingDatabase(
        mock_db, {schema.BOTTLE_HEARTBEATS: 1}, error=lambda: OperationFailure("not authorized", code=13)
    )
    monkeypatch.setattr(device_events, "get_database", lambda: fake)

    assert post_events("bottle-1", key, heartbeat(ago(minutes=1))).status == 500

    found = recorded()
    assert of(found, metrics.HTTP_500) == {(("error", "OperationFailure:13"), ("function", "post_events")): 1}
    assert of(found, metrics.HTTP_503) == {}
    assert of(found, metrics.STORE_THROTTLED) == {}


def test_ops_of_a_bulk_write_that_ran_out_of_time_count_as_code_50_not_16500(
    recorded: Callable[[], Readings],
) -> None:
    rounds = [[{"index": 0, "code": 50, "errmsg": "Request timed out."}], []]

    class TimingOut:
        def bulk_write(self, ops: list[Any], ordered: bool) -> Any:
            errors = rounds.pop(0)
            if errors:
                raise BulkWriteError({"writeErrors": errors, "nMatched": 0})
            return type("Result", (), {"matched_count": len(ops)})()

    assert count_matched(TimingOut(), [UpdateOne({"_id": 1}, {"$set": {"x": 1}})], RetryPolicy(base_ms=1)) == 1

    assert of(recorded(), metrics.STORE_THROTTLED) == {(("code", 50),): 1}


# --- the checks --------------------------------------------------------------------------------------------------


@pytest.fixture
def world(mock_db: Any) -> Iterator[World]:
    bench = World(mock_db, START)
    yield bench
    bench.stop()


def left_open(world: World, count: int) -> None:
    for i in range(count):
        world.provision(f"bottle-{i}")
        world.open(f"bottle-{i}")
    world.after(minutes=10)


def run_left_open(world: World, partition: BucketRange, **kwargs: Any) -> CheckRun:
    return run_check(
        world.db,
        "left_open",
        partition=partition,
        now=world.now,
        settings=get_settings(),
        send=lambda _: None,
        **kwargs,
    )


def labels(kind: str, partition: BucketRange) -> tuple[tuple[str, Any], ...]:
    return (("kind", kind), ("partition", f"{partition.index}/{partition.count}"))


def test_a_run_that_hits_its_time_budget_is_counted_by_kind_and_partition(
    world: World, monkeypatch: pytest.MonkeyPatch, recorded: Callable[[], Readings]
) -> None:
    set_setting(monkeypatch, "CHECK_BATCH_SIZE", "1")
    set_setting(monkeypatch, "CHECKS_TIME_BUDGET_SECONDS", "1")
    left_open(world, 3)
    partition = BucketRange(bucket_of("bottle-0") * 4 // BUCKETS, 4)  # bottle-0's, with bottle-1's
    ticks = iter(range(0, 1000, 2))  # every batch takes two "seconds"

    stopped = run_left_open(world, partition, clock=lambda: float(next(ticks)))
    between = recorded()
    finished = run_left_open(world, partition)
    after = recorded()

    assert (stopped.complete, finished.complete) == (False, True)
    assert of(between, metrics.CHECK_BUDGET_EXHAUSTED) == {labels("left_open", partition): 1}
    assert of(between, metrics.CHECK_RUNS) == {labels("left_open", partition): 1}
    assert of(after, metrics.CHECK_BUDGET_EXHAUSTED) == {}
    assert of(after, metrics.CHECK_RUNS) == {labels("left_open", partition): 1}


def test_notifications_left_pending_by_a_partition_s_message_cap_are_recorded_for_it_after_each_run(
    world: World, monkeypatch: pytest.MonkeyPatch, recorded: Callable[[], Readings]
) -> None:
    set_setting(monkeypatch, "QUEUE_MESSAGES_PER_PARTITION", "2")
    left_open(world, 5)  # three bottles in partition 2 of 4, two in partition 3

    pending = []
    for _ in range(2):
        sweep_all(world.db, "left_open", now=world.now, send=lambda _: None)
        pending.append(of(recorded(), metrics.PENDING_NOTIFICATIONS))

    none = (1, 0, 0)  # one run recorded, none pending
    partitions = [BucketRange(i, 4) for i in range(4)]
    first = {labels("left_open", p): none for p in partitions} | {labels("left_open", partitions[2]): (1, 1, 1)}
    assert pending == [first, {labels("left_open", p): none for p in partitions}]


# --- the report consumer -----------------------------------------------------------------------------------------


def test_each_dispatch_records_every_feed_s_lag_behind_its_furthest_behind_partition(
    mock_db: Any, monkeypatch: pytest.MonkeyPatch, recorded: Callable[[], Readings]
) -> None:
    set_setting(monkeypatch, "CHANGE_SOURCE", "polling")
    now = utc_now()
    run_round(mock_db)  # makes the leases
    mock_db[schema.LEASES].update_many({}, {"$set": {"checkpoint_time": now - timedelta(minutes=1)}})
    behind = mock_db[schema.LEASES].find_one({"feed": schema.BOTTLE_ACTIONS})["_id"]
    mock_db[schema.LEASES].update_one({"_id": behind}, {"$set": {"checkpoint_time": now - timedelta(minutes=7)}})
    # The tally is behind by the closed hours it has yet to count: two, for one of its partitions.
    tally = mock_db[schema.LEASES].find_one({"feed": HEARTBEAT_TALLY.key})["_id"]
    two_hours_behind = hours_due(now) - timedelta(hours=2)
    mock_db[schema.LEASES].update_one({"_id": tally}, {"$set": {"checkpoint_time": two_hours_behind}})
    recorded()  # forget the first round's readings

    run = plugged.dispatch(mock_db, now=now, settings=get_settings(), send=lambda messages: None)

    assert run.lag_seconds == {schema.BOTTLE_ACTIONS: 420.0, HEARTBEAT_TALLY.key: 7200.0}
    lags = of(recorded(), metrics.REPORT_LAG)
    assert lags[(("feed", schema.BOTTLE_ACTIONS),)] == (1, 420.0, 420.0)
    assert lags[(("feed", HEARTBEAT_TALLY.key),)] == (1, 7200.0, 7200.0)


def test_a_tally_that_has_counted_every_closed_hour_is_not_behind(
    mock_db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    set_setting(monkeypatch, "CHANGE_SOURCE", "polling")
    now = hour_of(utc_now()) + timedelta(minutes=30)  # no hour falls due between the round and the dispatch
    set_clock(lambda: now)
    try:
        run_round(mock_db)
    finally:
        set_clock(None)

    run = plugged.dispatch(mock_db, now=now + timedelta(minutes=1), settings=get_settings(), send=list)

    assert run.lag_seconds[HEARTBEAT_TALLY.key] == 0.0


def test_a_feed_that_keeps_failing_shows_its_growing_lag(
    mock_db: Any, monkeypatch: pytest.MonkeyPatch, recorded: Callable[[], Readings]
) -> None:
    set_setting(monkeypatch, "CHANGE_SOURCE", "polling")
    key = provisioned()
    assert post_events("bottle-1", key, {"events": [heartbeat(ago(minutes=3)), opened(ago(minutes=2))]}).status == 202
    run_round(mock_db)
    broken = ThrottlingDatabase(mock_db, {f"{schema.BOTTLE_ACTIONS}.find": float("inf")})
    assert post_events("bottle-1", key, closed(ago(minutes=1))).status == 202
    failed = run_round(broken)
    recorded()

    later = utc_now() + timedelta(minutes=30)
    run = plugged.dispatch(mock_db, now=later, settings=get_settings(), send=lambda messages: None)

    assert failed.failed == [schema.BOTTLE_ACTIONS]
    assert 30 * 60 <= run.lag_seconds[schema.BOTTLE_ACTIONS] < 30 * 60 + 10
    (_, actions_lag, _) = of(recorded(), metrics.REPORT_LAG)[(("feed", schema.BOTTLE_ACTIONS),)]
    assert actions_lag == run.lag_seconds[schema.BOTTLE_ACTIONS]


def test_a_token_reply_leaving_a_range_out_is_counted_for_its_feed_as_a_gap(
    mock_db: Any, monkeypatch: pytest.MonkeyPatch, recorded: Callable[[], Readings]
) -> None:
    """What `report-feed-ranges-uncovered` reads: one count per dispatch whose GetChangeStreamTokens reply left part
    of a feed's hash space out, with the feed and the problem."""
    set_setting(monkeypatch, "CHANGE_SOURCE", "change_stream")

    class Gap(CosmosTokens):
        def tokens(self) -> list[dict[str, Any]]:
            return [t for t in super().tokens() if feed_range(t)[0] != ""]  # the lowest range left out

    plugged.dispatch(Gap(mock_db, 2), now=utc_now(), settings=get_settings(), send=lambda m: None, on_cosmos=True)

    counted = of(recorded(), metrics.REPORT_UNCOVERED)
    assert counted == {(("feed", schema.BOTTLE_ACTIONS), ("problem", "gap")): 1}


def test_a_dispatch_that_cannot_partition_a_feed_is_counted_for_that_feed(
    mock_db: Any, monkeypatch: pytest.MonkeyPatch, recorded: Callable[[], Readings]
) -> None:
    """What `report-feed-unpartitioned` reads: one count per dispatch whose GetChangeStreamTokens reply gave a feed
    no token it can be read by, with the feed."""
    set_setting(monkeypatch, "CHANGE_SOURCE", "change_stream")

    class Unreadable(CosmosTokens):
        def tokens(self) -> list[dict[str, Any]]:
            return [{"_data": "no feed range"}]

    with pytest.raises(NoPartitionTokens):
        plugged.dispatch(Unreadable(mock_db, 2), now=utc_now(), settings=get_settings(), send=list, on_cosmos=True)

    assert of(recorded(), metrics.REPORT_UNPARTITIONED) == {(("feed", schema.BOTTLE_ACTIONS),): 1}


# --- what ops watch: requests, events, notifications, partitions, retries, poison ---------------------------------


def test_every_answer_is_counted_by_function_and_status_and_each_event_by_what_became_of_it(
    mock_db: Any, recorded: Callable[[], Readings]
) -> None:
    key = provisioned()
    events = {"events": [heartbeat(ago(minutes=3)), opened(ago(minutes=2)), closed(ago(minutes=1))]}
    recorded()

    assert post_events("bottle-1", key, events).status == 202
    assert post_events("bottle-1", key, events).status == 202  # a device's retry
    assert post_events("bottle-1", "not-the-key-0123456789abcdef", events).status == 401

    found = recorded()
    assert of(found, metrics.HTTP_REQUESTS) == {
        (("function", "post_events"), ("status", 202)): 2,
        (("function", "post_events"), ("status", 401)): 1,
    }
    assert of(found, metrics.EVENTS) == {(("outcome", "stored"),): 3, (("outcome", "duplicate"),): 3}


def test_each_notification_sent_is_counted_with_how_long_after_its_episode_began(
    world: World, recorded: Callable[[], Readings]
) -> None:
    left_open(world, 2)  # opened, then 10 minutes later the check runs
    recorded()

    sweep_all(world.db, "left_open", now=world.now, send=lambda _: None)

    found = recorded()
    assert of(found, metrics.NOTIFICATIONS_SENT) == {(("kind", "left_open"),): 2}
    [(count, least, most)] = of(found, metrics.NOTIFICATION_DELAY).values()
    assert (count, least, most) == (2, 600.0, 600.0)


def test_each_retry_is_counted_by_its_reason(throttle: Any, recorded: Callable[[], Readings]) -> None:
    key = provisioned()
    throttle({f"{schema.BOTTLE_HEARTBEATS}.update_one": 2})

    assert post_events("bottle-1", key, heartbeat(ago(minutes=1))).status == 202

    assert of(recorded(), metrics.STORE_RETRIES) == {(("reason", "throttled"),): 2}


def test_each_change_feed_partition_s_run_records_its_lag(
    mock_db: Any, monkeypatch: pytest.MonkeyPatch, recorded: Callable[[], Readings]
) -> None:
    set_setting(monkeypatch, "CHANGE_SOURCE", "polling")
    key = provisioned()
    assert post_events("bottle-1", key, {"events": [opened(ago(minutes=3)), closed(ago(minutes=2))]}).status == 202
    recorded()

    run_round(mock_db)

    lags = of(recorded(), metrics.PARTITION_LAG)
    assert lags, "no partition lag recorded"
    assert {dict(attributes)["feed"] for attributes in lags} == {schema.BOTTLE_ACTIONS}
    # each named by its lease (those whose run checkpointed)
    leases = {lease["_id"] for lease in mock_db[schema.LEASES].find({"feed": schema.BOTTLE_ACTIONS})}
    assert {dict(attributes)["partition"] for attributes in lags} <= leases
    assert all(count == 1 and 0 <= most < 600 for count, _, most in lags.values())


@pytest.mark.parametrize(("dequeue_count", "poisoned"), [(1, 0), (5, 1)])
def test_a_failed_queue_message_is_counted_and_on_its_last_attempt_as_poison(
    mock_db: Any, recorded: Callable[[], Readings], dequeue_count: int, poisoned: int
) -> None:
    recorded()

    with pytest.raises(InvocationFailed):
        invoke.queue("run_check_partition", "not json", dequeue_count=dequeue_count)

    found = recorded()
    assert of(found, metrics.QUEUE_FAILURES) == {(("function", "run_check_partition"),): 1}
    assert of(found, metrics.POISON_MESSAGES) == ({(("function", "run_check_partition"),): 1} if poisoned else {})
