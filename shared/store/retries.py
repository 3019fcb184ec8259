"""Retrying store calls: one loop (`with_retries`) that every database call goes through, and the idempotent
bulk writes built on it. Transient errors (Cosmos DB's throttling 16500 and its ExceededTimeLimit 50, dropped
connections, failovers, timeouts) are retried with bounded back-off; what persists becomes StoreUnavailable,
which the HTTP layer turns into a 503 + Retry-After. Any other database error (a bad query, a refused write, an
authorization failure) is a fault, not an outage: it is raised as it is, at once (a caller may expect it: a
rejected resume token), and where nothing handles it the HTTP layer answers a 500 with an `error_id`, counted in
`pillbottle.http.responses_500`."""

import contextlib
import math
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pymongo
from pymongo import InsertOne, UpdateOne
from pymongo.collection import Collection
from pymongo.errors import (
    AutoReconnect,
    BulkWriteError,
    ConnectionFailure,
    ExecutionTimeout,
    OperationFailure,
    PyMongoError,
    ServerSelectionTimeoutError,
    WTimeoutError,
)

from shared.settings import Settings
from shared.store.cosmos import (
    DUPLICATE_KEY,
    EXCEEDED_TIME_LIMIT,
    THROTTLED,
    delay_from_message,
    is_throttling_code,
    throttle_code,
    throttle_delay_ms,
)
from shared.telemetry import metrics

WriteError = dict[str, Any]

MAX_BACKOFF_S = 2.0
# The longest server hint (RetryAfterMs) honoured, in a wait or a Retry-After: a garbled one cannot park a run.
MAX_HINT_S = 60.0
# A throttled 503's Retry-After: the server's hint plus a random 0 to THROTTLED_SPREAD_S seconds, a spread that
# grows with the process's recent throttling towards OUTAGE_RETRY_AFTER_SECONDS (sustained throttling spreads a
# fleet as widely as an outage does).
THROTTLED_SPREAD_S = 2
# Server codes of a passing condition, which MongoDB's drivers retry too: a server stepping down or shutting down,
# or unreachable from the one answering (6, 7, 89, 91, 189, 262, 9001, 10058, 10107, 11600, 11602, 13435,
# 13436: a failover or an election, over in seconds), and a write conflict (112: the write did not apply).
TRANSIENT_CODES = frozenset({6, 7, 89, 91, 112, 189, 262, 9001, 10058, 10107, 11600, 11602, 13435, 13436})


class StoreUnavailable(Exception):
    """The database stayed throttled or unreachable through every retry; the caller may retry later."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


def is_transient(error: BaseException) -> bool:
    """Worth retrying, and a 503 if it persists: throttling (16500, 50), a dropped connection, a failover (a
    primary stepping down, a node shutting down), a timeout. Anything else is a fault that a retry repeats."""
    if throttle_delay_ms(error) is not None:
        return True
    if isinstance(
        error, AutoReconnect | ConnectionFailure | ServerSelectionTimeoutError | ExecutionTimeout | WTimeoutError
    ):
        return True
    if isinstance(error, PyMongoError) and (error.timeout or error.has_error_label("RetryableWriteError")):
        return True
    return isinstance(error, OperationFailure) and error.code in TRANSIENT_CODES


class RecentThrottling:
    """The share of this process's recent database attempts that were throttled (16500 or 50): counts that decay
    with a half-life, so the share follows what the worker sees now. A prior of `prior` unthrottled attempts keeps
    one unlucky request from reading as sustained throttling. Thread-safe (a worker serves requests on threads)."""

    def __init__(self, half_life_s: float = 30.0, prior: float = 100.0, clock: Callable[[], float] = time.monotonic):
        self._half_life_s = half_life_s
        self._prior = prior
        self._clock = clock
        self._lock = threading.Lock()
        self._throttled = 0.0
        self._attempts = 0.0
        self._at = clock()

    def record(self, throttled: bool) -> None:
        with self._lock:
            self._decay()
            self._attempts += 1
            self._throttled += throttled

    def forget(self) -> None:
        """Start again from the prior alone, as a new process does."""
        with self._lock:
            self._throttled = self._attempts = 0.0
            self._at = self._clock()

    def rate(self) -> float:
        """From 0 (no recent throttling) towards 1 (every recent attempt throttled)."""
        with self._lock:
            self._decay()
            return self._throttled / (self._attempts + self._prior)

    def _decay(self) -> None:
        now = self._clock()
        factor = 0.5 ** (max(0.0, now - self._at) / self._half_life_s)
        self._throttled *= factor
        self._attempts *= factor
        self._at = now


RECENT_THROTTLING = RecentThrottling()
_RANDOM = random.Random()


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded exponential back-off with full jitter, honouring Cosmos' RetryAfterMs when it is longer, within
    an optional deadline (a `clock` reading): past it no attempt starts and no back-off waits, and each attempt
    runs under pymongo's client-side timeout for the time left, so one slow call cannot overrun it either."""

    max_retries: int = 3
    base_ms: int = 100
    deadline: float | None = None
    outage_retry_after_s: int = 30
    clock: Callable[[], float] = field(default=time.monotonic, compare=False)
    throttling: RecentThrottling = field(default_factory=lambda: RECENT_THROTTLING, compare=False)
    rng: random.Random = field(default_factory=lambda: _RANDOM, compare=False)

    @classmethod
    def from_settings(
        cls, settings: Settings, *, budget_s: float | None = None, clock: Callable[[], float] = time.monotonic
    ) -> "RetryPolicy":
        """The policy of an operations command (`budget_s` None: no deadline) or of a run with a budget."""
        deadline = None if budget_s is None else clock() + budget_s
        return cls(
            max_retries=settings.store_max_retries,
            base_ms=settings.store_retry_base_ms,
            deadline=deadline,
            outage_retry_after_s=settings.outage_retry_after_seconds,
            clock=clock,
        )

    @classmethod
    def for_request(cls, settings: Settings, clock: Callable[[], float] = time.monotonic) -> "RetryPolicy":
        """An HTTP invocation's policy: REQUEST_DEADLINE_SECONDS from now for everything it asks of the store."""
        return cls.from_settings(settings, budget_s=settings.request_deadline_seconds, clock=clock)

    @classmethod
    def for_run(cls, settings: Settings, budget_s: float, clock: Callable[[], float] = time.monotonic) -> "RetryPolicy":
        """A timer run's policy: its time budget, plus one request's deadline for the call in flight when the
        budget runs out (the run checks its budget between batches)."""
        return cls.from_settings(settings, budget_s=budget_s + settings.request_deadline_seconds, clock=clock)

    def remaining_s(self) -> float | None:
        return None if self.deadline is None else self.deadline - self.clock()

    def delay_s(self, attempt: int, error: BaseException) -> float:
        """The wait before the next attempt: full-jitter back-off (at most 2 s), or the server's longer hint."""
        backoff = min(MAX_BACKOFF_S, self.base_ms * (2**attempt) / 1000.0)
        return max(_hint_s(error), self.rng.uniform(0, backoff))

    def retry_after_s(self, attempt: int, error: BaseException) -> int:
        """What a 503 tells the client, jittered so a fleet of devices does not come back at the same second.
        Throttled: `contended_retry_after` from the server's hint; unreachable: the outage delay plus up to as
        much again."""
        if throttle_delay_ms(error) is not None:
            return self.contended_retry_after(max(1, math.ceil(_hint_s(error))))
        return self.outage_retry_after()

    def contended_retry_after(self, at_least_s: int = 1) -> int:
        """The Retry-After of a 503 that a short wait cures (throttling, a document that kept changing under
        optimistic writes): `at_least_s` plus 0 to THROTTLED_SPREAD_S seconds, a spread that widens with the
        process's recent throttling up to OUTAGE_RETRY_AFTER_SECONDS."""
        widest = max(THROTTLED_SPREAD_S, self.outage_retry_after_s)
        spread = THROTTLED_SPREAD_S + self.throttling.rate() * (widest - THROTTLED_SPREAD_S)
        return at_least_s + self.rng.randint(0, int(spread))

    def outage_retry_after(self) -> int:
        return self.outage_retry_after_s + self.rng.randint(0, self.outage_retry_after_s)


def _hint_s(error: BaseException) -> float:
    """The server's RetryAfterMs in seconds (0 without one), at most MAX_HINT_S."""
    return min(MAX_HINT_S, (throttle_delay_ms(error) or 0) / 1000.0)


def with_retries[T](operation: Callable[[], T], policy: RetryPolicy, sleep: Callable[[float], None] = time.sleep) -> T:
    """Run an idempotent database operation, retrying transient failures; StoreUnavailable when they persist
    or the policy's deadline passes.

    The one retry loop of the app: an operation that made partial progress keeps what it did in its own
    state and raises a transient error for the rest (as the bulk writes below do). A database error that is not
    transient is raised as it is, at once: a fault, not an outage, and retrying repeats it."""
    for attempt in range(policy.max_retries + 1):
        remaining = policy.remaining_s()
        if remaining is not None and remaining <= 0:
            raise StoreUnavailable("database did not answer within the deadline", policy.outage_retry_after())
        try:
            with _client_timeout(remaining):
                result = operation()
        except PyMongoError as error:
            if _own_deadline_ran_out(error, policy):
                policy.throttling.record(False)
                raise StoreUnavailable(
                    "database did not answer within the deadline", policy.outage_retry_after()
                ) from error
            code = throttle_code(error)
            policy.throttling.record(code is not None)
            if code is not None:
                metrics.store_throttled(code)
            if not is_transient(error):
                raise
            if attempt == policy.max_retries:
                raise _unavailable(error, attempt, policy) from error
            delay = policy.delay_s(attempt, error)
            left = policy.remaining_s()
            if left is not None and left <= delay:  # waiting would only end past the deadline
                raise _unavailable(error, attempt, policy) from error
            metrics.store_retried("throttled" if code is not None else "transient")
            sleep(delay)
        else:
            policy.throttling.record(False)
            return result
    raise AssertionError("unreachable")  # pragma: no cover


def _own_deadline_ran_out(error: PyMongoError, policy: RetryPolicy) -> bool:
    """pymongo's own timeout (`_client_timeout`) ended the call: it raises ExecutionTimeout, code 50 like Cosmos
    DB's server-side retry running out, when the deadline is too near to send the command (less than a round
    trip left) or has passed while it waited for the reply. That is the app's deadline, not throttling: it is
    neither counted as code 50 nor answered with a throttled Retry-After."""
    if not isinstance(error, ExecutionTimeout):
        return False
    left = policy.remaining_s()
    return left is not None and (left <= 0 or str(error).startswith(_WOULD_EXCEED))


# How pymongo's ExecutionTimeout starts when it refuses to send a command its deadline cannot wait for
# (pymongo/pool_shared.py).
_WOULD_EXCEED = "operation would exceed time limit"


def _client_timeout(remaining_s: float | None) -> contextlib.AbstractContextManager[Any]:
    """pymongo's client-side operation timeout for the time left (server selection, connection and reply)."""
    return contextlib.nullcontext() if remaining_s is None else pymongo.timeout(remaining_s)


def write_idempotent(
    collection: Collection[Any],
    ops: Sequence[InsertOne[Any] | UpdateOne],
    policy: RetryPolicy,
    sleep: Callable[[float], None] = time.sleep,
) -> list[bool]:
    """Apply idempotent writes as unordered bulk writes; per op, True if it wrote, False if a duplicate.

    Only the ops that were throttled are sent again, so a retry never double-counts. A duplicate-key error
    on an upsert is ambiguous (a real duplicate, or two requests creating the same document at once), so
    such ops are asked once more: the second answer is definitive.
    """
    written: list[bool] = [False] * len(ops)
    pending = list(range(len(ops)))
    asked_again: set[int] = set()

    def attempt() -> None:
        nonlocal pending
        while pending:
            failures: dict[int, WriteError] = {}
            try:
                collection.bulk_write([ops[i] for i in pending], ordered=False)
            except BulkWriteError as error:
                failures = {pending[e["index"]]: e for e in error.details.get("writeErrors", [])}
            pending = _settle(ops, pending, failures, written, asked_again)
            throttled = [failures[i] for i in pending if is_throttling_code(failures.get(i, {}).get("code"))]
            if throttled:
                raise _throttling(throttled)

    with_retries(attempt, policy, sleep)
    return written


def count_matched(
    collection: Collection[Any],
    ops: Sequence[UpdateOne],
    policy: RetryPolicy,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Apply guarded (non-upsert) updates as unordered bulk writes; how many matched their document.

    An op whose guard fails simply matches nothing, so the count is all a caller learns and all it needs.
    Only throttled ops are sent again, so nothing is counted twice."""
    matched = 0
    pending = list(ops)

    def attempt() -> None:
        nonlocal matched, pending
        try:
            matched += collection.bulk_write(pending, ordered=False).matched_count
            pending = []
        except BulkWriteError as error:
            matched += error.details.get("nMatched", 0)
            failures = error.details.get("writeErrors", [])
            if not failures:  # only a write-concern error (MongoDB): every op was applied and counted
                pending = []
                return
            for failure in failures:
                if not is_throttling_code(failure.get("code")):
                    raise _rejected(failure) from error
            pending = [pending[f["index"]] for f in failures]
            raise _throttling(failures) from error

    if pending:
        with_retries(attempt, policy, sleep)
    return matched


def _settle(
    ops: Sequence[InsertOne[Any] | UpdateOne],
    pending: list[int],
    failures: dict[int, WriteError],
    written: list[bool],
    asked_again: set[int],
) -> list[int]:
    """Record the outcome of one bulk round; return the ops to send again (throttled, or asked again)."""
    again: list[int] = []
    for i in pending:
        failure = failures.get(i)
        if failure is None:
            written[i] = True
        elif failure.get("code") == DUPLICATE_KEY:
            if isinstance(ops[i], UpdateOne) and i not in asked_again:
                asked_again.add(i)
                again.append(i)
        elif is_throttling_code(failure.get("code")):
            again.append(i)
        else:
            raise _rejected(failure)
    return again


def _throttling(failures: Sequence[WriteError]) -> OperationFailure:
    """One throttling error for the throttled ops of a bulk write, carrying the longest RetryAfterMs: 16500 if
    any op was throttled so, else 50 (server-side retry ran out), so the metrics tell the two apart."""
    longest = max(failures, key=lambda f: delay_from_message(f.get("errmsg", "")))
    code = THROTTLED if any(f.get("code") == THROTTLED for f in failures) else EXCEEDED_TIME_LIMIT
    return OperationFailure(longest.get("errmsg", "throttled"), code=code)


def _rejected(failure: WriteError) -> OperationFailure:
    """A write the database refused (not throttling, not a duplicate): a fault, raised as its own error."""
    # Not the server's message: it can quote the document (a duplicate key's value).
    return OperationFailure(f"database rejected a write (code {failure.get('code')})", code=failure.get("code"))


def _unavailable(error: BaseException, retries: int, policy: RetryPolicy) -> StoreUnavailable:
    return StoreUnavailable(
        f"database unavailable after {retries + 1} attempts: {type(error).__name__}",
        retry_after_s=policy.retry_after_s(retries, error),
    )


def find_all[D: Mapping[str, Any]](
    collection: Collection[D], query: Mapping[str, Any], policy: RetryPolicy, projection: Any = None
) -> list[D]:
    """Every document a query matches, read again from the start if throttling interrupts it."""
    return with_retries(lambda: list(collection.find(query, projection)), policy)
