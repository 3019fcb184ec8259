"""An unreachable or throttled store within one deadline per invocation: the client gets 503 + Retry-After in
bounded time, whether Cosmos DB throttles with 16500 (the app retries) or holds requests with server-side
retry and ends in code 50 (ExceededTimeLimit). Fakes follow Cosmos DB's documented behaviour."""

import itertools
import time
from typing import Any

import pytest
from pymongo import UpdateOne, _csot
from pymongo.errors import BulkWriteError, ExecutionTimeout, NetworkTimeout, OperationFailure

from functions import bottles, notifications, reports
from shared.settings import get_settings
from shared.store import client as store
from shared.store.retries import RetryPolicy, StoreUnavailable, count_matched, with_retries
from tests.api import ago, heartbeat, post_events

UNREACHABLE = "mongodb://127.0.0.1:1/?directConnection=true"  # nothing listens on port 1


class FakeClock:
    """Monotonic time that only the fakes move: a request "held" for 60 s takes no real time."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def throttled_by_cosmos(clock: FakeClock, retry_after_ms: int = 500) -> Any:
    """Cosmos DB without server-side retry: answers at once with 16500 and a RetryAfterMs hint."""
    calls: list[float] = []

    def operation() -> None:
        calls.append(clock.now)
        clock.now += 0.01
        raise OperationFailure(
            f"Request rate is large. More Request Units may be needed. RetryAfterMs={retry_after_ms}", code=16500
        )

    return operation, calls


def held_by_server_side_retry(clock: FakeClock) -> Any:
    """Cosmos DB with server-side retry (DisableRateLimitingResponses): the server retries a throttled request
    for up to 60 s, then answers code 50. The client gives up first when its own timeout is shorter."""
    calls: list[float | None] = []

    def operation() -> None:
        client_timeout = _csot.get_timeout()  # what pymongo.timeout() set for this call (None: unbounded)
        calls.append(client_timeout)
        if client_timeout is not None and client_timeout < 60:
            clock.now += client_timeout
            raise NetworkTimeout("timed out waiting for the server's reply")
        clock.now += 60
        raise ExecutionTimeout("Request timed out. Retries due to rate limiting: True.", code=50)

    return operation, calls


def test_throttling_is_retried_on_the_servers_hint_then_503_within_the_deadline():
    clock = FakeClock()
    policy = RetryPolicy(max_retries=10, base_ms=100, deadline=clock() + 8, clock=clock)
    operation, calls = throttled_by_cosmos(clock, retry_after_ms=1500)

    with pytest.raises(StoreUnavailable) as raised:
        with_retries(operation, policy, sleep=clock.sleep)

    assert clock.now - 1000 <= 8  # never waits past the deadline
    assert len(calls) == 6  # 1.5 s apart (the hint), until another wait would end past the deadline
    assert all(b - a >= 1.5 for a, b in itertools.pairwise(calls))
    assert 1 <= raised.value.retry_after_s <= 2  # throttling: the short hint, not the outage delay


def test_server_side_retry_cannot_hold_a_request_past_the_deadline():
    clock = FakeClock()
    policy = RetryPolicy(max_retries=3, deadline=clock() + 8, clock=clock)
    operation, calls = held_by_server_side_retry(clock)

    with pytest.raises(StoreUnavailable):
        with_retries(operation, policy, sleep=clock.sleep)

    assert calls[0] == pytest.approx(8)  # the call ran under a client timeout of the time left
    assert clock.now - 1000 == pytest.approx(8)  # cut at the deadline, not after the server's 60 s


def test_code_50_after_server_side_retry_is_handled_like_throttling():
    clock = FakeClock()
    policy = RetryPolicy(max_retries=1, base_ms=100, clock=clock)  # no deadline: the server's 60 s run out
    operation, calls = held_by_server_side_retry(clock)

    with pytest.raises(StoreUnavailable) as raised:
        with_retries(operation, policy, sleep=clock.sleep)

    assert calls == [None, None]  # retried once, as throttling is
    assert raised.value.retry_after_s <= 2  # a throttling answer, not an outage's


class BulkAnsweringCode50:
    """A collection whose bulk writes come back with per-op code 50 for the ops named, once."""

    def __init__(self, failing: set[int]) -> None:
        self.failing = failing
        self.sent: list[int] = []

    def bulk_write(self, ops: list[UpdateOne], ordered: bool) -> Any:
        self.sent.append(len(ops))
        if self.failing:
            errors = [{"index": i, "code": 50, "errmsg": "Request timed out."} for i in sorted(self.failing)]
            self.failing = set()
            raise BulkWriteError({"writeErrors": errors, "nMatched": len(ops) - len(errors)})
        return type("Result", (), {"matched_count": len(ops)})()


def test_per_op_code_50_retries_only_those_ops():
    collection = BulkAnsweringCode50({1})
    ops = [UpdateOne({"_id": i}, {"$set": {"x": 1}}) for i in range(3)]

    matched = count_matched(collection, ops, RetryPolicy(max_retries=2, base_ms=1), sleep=lambda _: None)

    assert matched == 3
    assert collection.sent == [3, 1]


def test_an_outage_retry_after_is_longer_than_throttlings_and_jittered():
    policy = RetryPolicy(outage_retry_after_s=30)
    outage = {policy.retry_after_s(0, NetworkTimeout("timed out")) for _ in range(200)}
    throttled = policy.retry_after_s(0, OperationFailure("RetryAfterMs=800", code=16500))

    assert min(outage) >= 30
    assert max(outage) <= 60
    assert len(outage) > 10  # spread, so a fleet does not come back at the same second
    assert throttled < min(outage)


@pytest.fixture
def unreachable_store(monkeypatch):
    store.use_client(store.create_client(UNREACHABLE))
    yield
    store.get_client().close()


def test_a_device_gets_503_within_10_s_when_the_store_is_unreachable(unreachable_store):
    started = time.monotonic()
    response = post_events("bottle-1", "some-key", heartbeat(ago(seconds=1)))
    elapsed = time.monotonic() - started

    assert response.status == 503
    assert elapsed < 10  # the default deadline (8 s), not pymongo's 30 s per server selection
    assert 30 <= int(response.headers["Retry-After"]) <= 60
    assert response.body["error"] == "the database is busy or unavailable; retry later"


def _request(handler: Any, route: dict[str, str], params: dict[str, str] | None = None) -> Any:
    import azure.functions as func

    return handler.build().get_user_function()(
        func.HttpRequest(method="GET", url="/api/x", headers={}, params=params or {}, route_params=route, body=b"")
    )


@pytest.mark.parametrize(
    ("handler", "route", "params"),
    [
        (bottles.get_bottle, {"bottle_id": "bottle-1"}, {}),
        (notifications.get_user_notifications, {"user_id": "u"}, {}),
        (reports.get_user_reports, {"user_id": "u"}, {"from": "2026-01-01T00:00Z", "to": "2026-01-02T00:00Z"}),
    ],
)
def test_every_read_route_answers_503_within_its_deadline(monkeypatch, handler, route, params):
    monkeypatch.setenv("REQUEST_DEADLINE_SECONDS", "1")
    monkeypatch.setenv("STORE_SERVER_SELECTION_TIMEOUT_MS", "200")
    get_settings.cache_clear()
    store.use_client(store.create_client(UNREACHABLE))
    try:
        started = time.monotonic()
        response = _request(handler, route, params)
        elapsed = time.monotonic() - started
    finally:
        store.get_client().close()

    assert response.status_code == 503
    assert int(response.headers["Retry-After"]) >= 30
    assert elapsed < 2.5


def test_the_device_route_is_bound_by_its_deadline_setting(monkeypatch):
    monkeypatch.setenv("REQUEST_DEADLINE_SECONDS", "1")
    get_settings.cache_clear()
    store.use_client(store.create_client(UNREACHABLE))
    try:
        started = time.monotonic()
        response = post_events("bottle-1", "some-key", heartbeat(ago(seconds=1)))
        elapsed = time.monotonic() - started
    finally:
        store.get_client().close()

    assert response.status == 503
    assert elapsed < 2.5
