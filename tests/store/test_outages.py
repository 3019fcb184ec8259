"""An unreachable or throttled store within one deadline per invocation: the client gets 503 + Retry-After in
bounded time, whether Cosmos DB throttles with 16500 (the app retries) or holds requests with server-side
retry and ends in code 50 (ExceededTimeLimit). Fakes follow Cosmos DB's documented behaviour."""

import itertools
import random
import statistics
import time
from typing import Any

import pytest
from pymongo import UpdateOne, _csot
from pymongo.errors import BulkWriteError, ExecutionTimeout, NetworkTimeout, OperationFailure

from functions import bottles, notifications, reports
from shared.settings import get_settings
from shared.store import client as store
from shared.store.retries import RecentThrottling, RetryPolicy, StoreUnavailable, count_matched, with_retries
from tests.api import ago, heartbeat, post_events
from tests.fake_time import QUIET_HOUR

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
    policy = RetryPolicy(
        max_retries=10, base_ms=100, deadline=clock() + 8, clock=clock, throttling=RecentThrottling(clock=clock)
    )
    operation, calls = throttled_by_cosmos(clock, retry_after_ms=1500)

    with pytest.raises(StoreUnavailable) as raised:
        with_retries(operation, policy, sleep=clock.sleep)

    assert clock.now - 1000 <= 8  # never waits past the deadline
    assert len(calls) == 6  # 1.5 s apart (the hint), until another wait would end past the deadline
    assert all(b - a >= 1.5 for a, b in itertools.pairwise(calls))
    # Throttling: the hint and a short jitter (its own six throttled attempts widen it a little), not an outage's.
    assert 2 <= raised.value.retry_after_s <= 5


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
    # No deadline: the server's 60 s run out.
    policy = RetryPolicy(max_retries=1, base_ms=100, clock=clock, throttling=RecentThrottling(clock=clock))
    operation, calls = held_by_server_side_retry(clock)

    with pytest.raises(StoreUnavailable) as raised:
        with_retries(operation, policy, sleep=clock.sleep)

    assert calls == [None, None]  # retried once, as throttling is
    assert raised.value.retry_after_s <= 3  # a throttling answer, not an outage's


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
    policy = RetryPolicy(outage_retry_after_s=30, throttling=RecentThrottling())  # a process not throttled lately
    outage = {policy.retry_after_s(0, NetworkTimeout("timed out")) for _ in range(200)}
    throttled = policy.retry_after_s(0, OperationFailure("RetryAfterMs=800", code=16500))

    assert min(outage) >= 30
    assert max(outage) <= 60
    assert len(outage) > 10  # spread, so a fleet does not come back at the same second
    assert throttled < min(outage)


def throttled_answers(policy: RetryPolicy, retry_after_ms: int = 800, answers: int = 2000) -> list[int]:
    error = OperationFailure(f"Request rate is large. RetryAfterMs={retry_after_ms}", code=16500)
    return [policy.retry_after_s(0, error) for _ in range(answers)]


def test_a_throttled_retry_after_is_jittered_so_a_fleet_does_not_come_back_in_step():
    quiet = RetryPolicy(rng=random.Random(7), throttling=RecentThrottling())

    answers = throttled_answers(quiet)

    assert set(answers) == {1, 2, 3}  # the hint (at least 1 s) plus 0-2 s, each value about as often
    assert all(answers.count(value) > len(answers) / 5 for value in (1, 2, 3))


def test_the_spread_of_throttled_retry_afters_grows_with_sustained_throttling_and_shrinks_after_it():
    clock = FakeClock()
    seen = RecentThrottling(half_life_s=30, clock=clock)
    policy = RetryPolicy(outage_retry_after_s=30, rng=random.Random(7), throttling=seen)
    for _ in range(5000):  # a worker whose every call is throttled for a while
        seen.record(throttled=True)

    sustained = throttled_answers(policy)
    clock.now += 20 * 30  # twenty half-lives without throttling
    after = throttled_answers(policy)

    assert min(sustained) == 1
    assert max(sustained) <= 1 + 30  # never wider than an outage's spread
    assert max(sustained) >= 25
    assert statistics.mean(sustained) > 10  # spread over about half a minute, not bunched at the hint
    assert set(after) == {1, 2, 3}


def test_forgetting_the_recent_throttling_starts_again_from_the_prior():
    clock = FakeClock()
    seen = RecentThrottling(half_life_s=30, clock=clock)
    for _ in range(5000):
        seen.record(throttled=True)
    assert seen.rate() > 0.9

    seen.forget()
    assert seen.rate() == 0
    seen.record(throttled=True)
    assert seen.rate() == pytest.approx(1 / 101)  # one attempt against the prior of 100, as in a new process


def test_the_throttled_share_is_the_recent_share_of_attempts():
    clock = FakeClock()
    seen = RecentThrottling(half_life_s=30, prior=0.001, clock=clock)
    for i in range(1000):
        seen.record(throttled=i % 4 == 0)
    assert seen.rate() == pytest.approx(0.25, abs=0.01)
    clock.now += 30
    for _ in range(1000):
        seen.record(throttled=False)
    assert seen.rate() == pytest.approx(125 / 1500, abs=0.005)  # the first thousand weigh half: 125 of 1500


def test_a_retry_after_ms_longer_than_two_seconds_is_honoured():
    policy = RetryPolicy(rng=random.Random(7), throttling=RecentThrottling())
    error = OperationFailure("Request rate is large. RetryAfterMs=5500", code=16500)

    answers = throttled_answers(policy, retry_after_ms=5500)

    assert min(answers) == 6  # never earlier than the server asked
    assert max(answers) <= 8
    assert all(policy.delay_s(attempt, error) >= 5.5 for attempt in range(4))  # nor a retry in the process


@pytest.fixture
def unreachable_store(monkeypatch):
    store.use_client(store.create_client(UNREACHABLE))
    yield
    store.get_client().close()


@pytest.mark.own_clock(QUIET_HOUR)  # a deadline kept by the monotonic clock: the instant cannot matter
def test_a_device_gets_503_within_10_s_when_the_store_is_unreachable(unreachable_store):
    started = time.monotonic()
    response = post_events("bottle-1", "some-key", heartbeat(ago(seconds=1)))
    elapsed = time.monotonic() - started

    assert response.status == 503
    assert elapsed < 10  # the default deadline (8 s), not pymongo's 30 s per server selection
    assert 30 <= int(response.headers["Retry-After"]) <= 60
    assert response.body["error"] == "the database is busy or unavailable; retry later"


def _request(handler: Any, route: dict[str, str], params: dict[str, str] | None = None) -> Any:

    from tests import invoke

    return invoke.http(handler, route_params=route, params=params)


@pytest.mark.parametrize(
    ("handler", "route", "params"),
    [
        (bottles.get_bottle, {"bottle_id": "bottle-1"}, {}),
        (notifications.get_user_notifications, {"user_id": "u"}, {}),
        (reports.get_user_reports, {"user_id": "u"}, {"from": "2026-01-01T00:00:00Z", "to": "2026-01-02T00:00:00Z"}),
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


@pytest.mark.own_clock(QUIET_HOUR)  # a deadline kept by the monotonic clock: the instant cannot matter
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
