"""When the app retries and when it stops: the back-off between retries (STORE_RETRY_BASE_MS doubling up to 2 s),
the deadline (no call starts at it, no wait ends at it), and how the worker's recent throttling widens a throttled
503's Retry-After (docs/api.md#retry-after: a 30-second half-life). Time is a fake clock that only waits move."""

import pytest
from pymongo import _csot
from pymongo.errors import AutoReconnect, ExecutionTimeout, OperationFailure

from shared.settings import get_settings
from shared.store import retries
from shared.store.retries import RecentThrottling, RetryPolicy, StoreUnavailable, with_retries
from shared.telemetry import metrics
from tests.draws import Highest, Lowest
from tests.report_client import set_setting


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def throttled(retry_after_ms: int = 800) -> OperationFailure:
    return OperationFailure(f"Request rate is large. RetryAfterMs={retry_after_ms}", code=16500)


def dropped() -> None:
    raise AutoReconnect("connection reset by peer")


def test_waits_between_retries_double_from_the_base_up_to_two_seconds():
    policy = RetryPolicy(max_retries=7, base_ms=100, throttling=RecentThrottling(), rng=Highest())
    sleeps: list[float] = []

    with pytest.raises(StoreUnavailable):
        with_retries(dropped, policy, sleep=sleeps.append)

    assert sleeps == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0])  # the top of each full-jitter range


def test_the_retry_settings_set_how_often_and_how_long_the_app_waits(monkeypatch):
    set_setting(monkeypatch, "STORE_RETRY_BASE_MS", "250")
    set_setting(monkeypatch, "STORE_MAX_RETRIES", "2")
    monkeypatch.setattr(retries, "_RANDOM", Highest())
    attempts: list[int] = []
    sleeps: list[float] = []

    def drops() -> None:
        attempts.append(1)
        dropped()

    with pytest.raises(StoreUnavailable):
        with_retries(drops, RetryPolicy.from_settings(get_settings()), sleep=sleeps.append)

    assert len(attempts) == 3
    assert sleeps == pytest.approx([0.25, 0.5])


def test_a_request_and_a_run_measure_their_deadlines_on_the_clock_they_are_given():
    clock = FakeClock(now=0.0)  # far behind the process's monotonic clock
    timeouts: list[float | None] = []

    def operation() -> None:
        timeouts.append(_csot.get_timeout())  # what pymongo.timeout() set for this call

    with_retries(operation, RetryPolicy.for_request(get_settings(), clock))
    with_retries(operation, RetryPolicy.for_run(get_settings(), 60, clock))

    assert timeouts == [8.0, 68.0]  # REQUEST_DEADLINE_SECONDS; a run's budget plus one request's deadline


def test_no_call_starts_once_the_deadline_is_reached():
    clock = FakeClock()
    policy = RetryPolicy(deadline=clock(), clock=clock, throttling=RecentThrottling(clock=clock), rng=Lowest())
    calls: list[float] = []

    with pytest.raises(StoreUnavailable) as raised:
        with_retries(lambda: calls.append(clock()), policy, sleep=clock.sleep)

    assert calls == []
    assert str(raised.value) == "database did not answer within the deadline"
    assert raised.value.retry_after_s == 30  # an outage's: the store took the request's whole deadline


def test_a_throttled_wait_that_would_end_at_the_deadline_is_not_taken():
    """Waiting until the deadline leaves no time for the call: the 503 comes at once, with the throttling
    Retry-After (the server's hint), not an outage's after a wasted wait."""
    clock = FakeClock()
    policy = RetryPolicy(
        max_retries=10, deadline=clock() + 4, clock=clock, throttling=RecentThrottling(clock=clock), rng=Lowest()
    )
    calls: list[float] = []

    def operation() -> None:
        calls.append(clock())
        raise throttled(retry_after_ms=2000)

    with pytest.raises(StoreUnavailable) as raised:
        with_retries(operation, policy, sleep=clock.sleep)

    assert calls == [1000.0, 1002.0]
    assert clock() == 1002.0
    assert raised.value.retry_after_s == 2


def throttled_503(policy: RetryPolicy) -> int:
    """The Retry-After of a call throttled through its (no) retries, the server asking for 800 ms."""

    def operation() -> None:
        raise throttled()

    once = RetryPolicy(max_retries=0, throttling=policy.throttling, rng=policy.rng)
    with pytest.raises(StoreUnavailable) as raised:
        with_retries(operation, once, sleep=lambda _: None)
    return raised.value.retry_after_s


@pytest.mark.parametrize(("failure", "widest"), [("throttled", 14), ("dropped", 3)])
def test_throttled_calls_widen_the_workers_retry_after_and_dropped_connections_do_not(failure, widest):
    clock = FakeClock()
    policy = RetryPolicy(max_retries=1, base_ms=1, throttling=RecentThrottling(clock=clock), rng=Highest())
    for _ in range(200):  # each call fails once, then succeeds
        failures: list[Exception] = [throttled() if failure == "throttled" else AutoReconnect("connection reset")]

        def flaky(failures: list[Exception] = failures) -> str:
            if failures:
                raise failures.pop()
            return "done"

        assert with_retries(flaky, policy, sleep=lambda _: None) == "done"  # all within a moment

    # 1 s (800 ms rounded up) plus 0-2 s, widened by the share of recent calls throttled: 201 of 401 plus a
    # prior of 100 unthrottled ones (0.40) widens it by 11 s; dropped connections are not throttling.
    assert throttled_503(policy) == widest


def test_recent_throttling_starts_at_none_and_halves_every_30_s():
    clock = FakeClock()
    seen = RecentThrottling(clock=clock)
    policy = RetryPolicy(throttling=seen, rng=Highest())
    assert seen.rate() == 0.0

    for _ in range(100):
        seen.record(throttled=True)
    assert seen.rate() == 0.5  # 100 throttled of 100, plus the prior of 100 unthrottled
    assert policy.retry_after_s(0, throttled()) == 1 + 2 + 14  # half of the way from 2 s to 30 s

    clock.now += 30
    assert seen.rate() == pytest.approx(50 / 150, abs=1e-4)  # what was seen weighs half


def would_exceed() -> ExecutionTimeout:
    """What pymongo raises, code 50, when its timeout leaves less than a round trip to send a command in."""
    message = "operation would exceed time limit, remaining timeout:0.00100 <= network round trip time:0.00200"
    return ExecutionTimeout(message, 50, {"ok": 0, "errmsg": message, "code": 50})


@pytest.mark.parametrize(
    ("what", "left_after_s"),
    [("too near to send", 0.001), ("the reply came after the deadline", -0.5), ("the reply came at it", 0.0)],
)
def test_pymongos_own_timeout_is_the_deadline_an_outage_503_not_throttling(what, left_after_s, monkeypatch):
    """pymongo's timeout raises code 50 as Cosmos DB's server-side retry does; when it is the app's own deadline
    that ran out, the 503 is an outage's, at once, and the throttling metric and Retry-After are untouched."""
    clock = FakeClock()
    policy = RetryPolicy(
        max_retries=5, deadline=clock() + 2, clock=clock, throttling=RecentThrottling(clock=clock), rng=Lowest()
    )
    counted: list[int] = []
    monkeypatch.setattr(metrics, "store_throttled", counted.append)
    calls: list[float] = []

    def operation() -> None:
        calls.append(clock())
        clock.now = policy.deadline - left_after_s
        error = would_exceed() if left_after_s > 0 else ExecutionTimeout("timed out", 50, {"ok": 0, "code": 50})
        raise error

    with pytest.raises(StoreUnavailable) as raised:
        with_retries(operation, policy, sleep=clock.sleep)

    assert (len(calls), str(raised.value), raised.value.retry_after_s) == (
        1,
        "database did not answer within the deadline",
        30,
    ), what
    assert (counted, policy.throttling.rate()) == ([], 0.0)


@pytest.mark.parametrize("left_s", [20, 0.9])
def test_a_servers_code_50_with_time_left_is_still_throttling_retried_and_counted(left_s, monkeypatch):
    clock = FakeClock()
    policy = RetryPolicy(
        max_retries=5, deadline=clock() + left_s, clock=clock, throttling=RecentThrottling(clock=clock), rng=Lowest()
    )
    counted: list[int] = []
    monkeypatch.setattr(metrics, "store_throttled", counted.append)
    failures = [ExecutionTimeout("Request timed out. RetryAfterMs=500", 50, {"ok": 0, "code": 50})]

    def operation() -> str:
        if failures:
            raise failures.pop()
        return "done"

    assert with_retries(operation, policy, sleep=clock.sleep) == "done"
    assert (counted, clock()) == ([50], 1000.5)  # counted as code 50, and the server's hint was waited
