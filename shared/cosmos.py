"""Cosmos DB for MongoDB specifics behind one seam: throttling, retries, sharded collections, RU charges.

Everything here also works on plain MongoDB, where the Cosmos-only commands are simply not used.
"""

import math
import random
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from pymongo import InsertOne, UpdateOne
from pymongo.collection import Collection
from pymongo.database import Database
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

T = TypeVar("T")

THROTTLED = 16500  # Cosmos DB "TooManyRequests": the request exceeded the provisioned RU/s.
DUPLICATE_KEY = 11000
MAX_BACKOFF_S = 2.0
_RETRY_AFTER = re.compile(r"RetryAfterMs=(\d+)")


class StoreUnavailable(Exception):
    """The database stayed throttled or unreachable through every retry; the caller may retry later."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


def is_cosmos_uri(uri: str) -> bool:
    """Cosmos DB for MongoDB (RU) endpoints live under *.mongo.cosmos.azure.com (or .cosmos.azure.us/.cn)."""
    return ".mongo.cosmos." in uri.lower() or ".cosmos.azure." in uri.lower()


def throttle_delay_ms(error: BaseException) -> int | None:
    """The server's suggested wait if `error` is Cosmos throttling (16500), else None."""
    if isinstance(error, BulkWriteError):
        delays = [
            _delay_from_message(e.get("errmsg", ""))
            for e in error.details.get("writeErrors", [])
            if e.get("code") == THROTTLED
        ]
        return max(delays) if delays else None
    if isinstance(error, OperationFailure) and (error.code == THROTTLED or "TooManyRequests" in str(error)):
        return _delay_from_message(str(error))
    return None


def _delay_from_message(message: str) -> int:
    match = _RETRY_AFTER.search(message)
    return int(match.group(1)) if match else 0


def is_transient(error: BaseException) -> bool:
    """Worth retrying: throttling, a dropped connection, a failover, a timeout."""
    if throttle_delay_ms(error) is not None:
        return True
    return isinstance(
        error, AutoReconnect | ConnectionFailure | ServerSelectionTimeoutError | ExecutionTimeout | WTimeoutError
    )


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded exponential back-off with full jitter, honouring Cosmos' RetryAfterMs when it is longer."""

    max_retries: int = 3
    base_ms: int = 100

    @classmethod
    def from_settings(cls, settings: Settings) -> "RetryPolicy":
        return cls(max_retries=settings.store_max_retries, base_ms=settings.store_retry_base_ms)

    def delay_s(self, attempt: int, error: BaseException) -> float:
        backoff = min(MAX_BACKOFF_S, self.base_ms * (2**attempt) / 1000.0)
        suggested = (throttle_delay_ms(error) or 0) / 1000.0
        return min(MAX_BACKOFF_S, max(suggested, random.uniform(0, backoff)))


def with_retries(operation: Callable[[], T], policy: RetryPolicy, sleep: Callable[[float], None] = time.sleep) -> T:
    """Run an idempotent database operation, retrying transient failures; StoreUnavailable when they persist."""
    for attempt in range(policy.max_retries + 1):
        try:
            return operation()
        except PyMongoError as error:
            if not is_transient(error) or attempt == policy.max_retries:
                raise _unavailable(error, attempt, policy) from error
            sleep(policy.delay_s(attempt, error))
    raise AssertionError("unreachable")  # pragma: no cover


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
    retries = 0
    while pending:
        failures: dict[int, dict[str, Any]] = {}
        try:
            collection.bulk_write([ops[i] for i in pending], ordered=False)
        except BulkWriteError as error:
            failures = {pending[e["index"]]: e for e in error.details.get("writeErrors", [])}
        except PyMongoError as error:  # the whole command failed: nothing, or an unknown part, was applied
            if not is_transient(error) or retries == policy.max_retries:
                raise _unavailable(error, retries, policy) from error
            sleep(policy.delay_s(retries, error))
            retries += 1
            continue
        pending, throttled = _settle(ops, pending, failures, written, asked_again)
        if throttled is not None:
            if retries == policy.max_retries:
                raise _unavailable(throttled, retries, policy)
            sleep(policy.delay_s(retries, throttled))
            retries += 1
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
    retries = 0
    while pending:
        try:
            matched += collection.bulk_write(pending, ordered=False).matched_count
            return matched
        except BulkWriteError as error:
            matched += error.details.get("nMatched", 0)
            failures = error.details.get("writeErrors", [])
            if any(f.get("code") != THROTTLED for f in failures):
                code = next(f.get("code") for f in failures if f.get("code") != THROTTLED)
                raise StoreUnavailable(f"database rejected a write (code {code})", retry_after_s=1) from error
            pending = [pending[f["index"]] for f in failures]
            last: PyMongoError = error
        except PyMongoError as error:  # the whole command failed: nothing, or an unknown part, was applied
            if not is_transient(error):
                raise _unavailable(error, retries, policy) from error
            last = error
        if retries == policy.max_retries:
            raise _unavailable(last, retries, policy)
        sleep(policy.delay_s(retries, last))
        retries += 1
    return matched


def _settle(
    ops: Sequence[InsertOne[Any] | UpdateOne],
    pending: list[int],
    failures: dict[int, dict[str, Any]],
    written: list[bool],
    asked_again: set[int],
) -> tuple[list[int], OperationFailure | None]:
    """Record the outcome of one bulk round; return the ops to send again and the throttling error, if any."""
    again: list[int] = []
    throttled: OperationFailure | None = None
    for i in pending:
        failure = failures.get(i)
        if failure is None:
            written[i] = True
        elif failure.get("code") == DUPLICATE_KEY:
            if isinstance(ops[i], UpdateOne) and i not in asked_again:
                asked_again.add(i)
                again.append(i)
        elif failure.get("code") == THROTTLED:
            throttled = OperationFailure(failure.get("errmsg", "throttled"), code=THROTTLED)
            again.append(i)
        else:
            raise StoreUnavailable(f"database rejected a write (code {failure.get('code')})", retry_after_s=1)
    return again, throttled


def _unavailable(error: BaseException, retries: int, policy: RetryPolicy) -> StoreUnavailable:
    if not is_transient(error):
        return StoreUnavailable(f"database error: {type(error).__name__}", retry_after_s=1)
    return StoreUnavailable(
        f"database unavailable after {retries + 1} attempts: {type(error).__name__}",
        retry_after_s=max(1, math.ceil(policy.delay_s(retries, error))),
    )


def create_sharded_collection(db: Database[Any], name: str, shard_key: str | None) -> None:
    """Create `name` sharded on `shard_key` on Cosmos DB (its `customAction` extension command).

    Cosmos answers an existing collection with an error that we treat as success, so setup is idempotent.
    """
    command: dict[str, Any] = {"customAction": "CreateCollection", "collection": name}
    if shard_key is not None:
        command["shardKey"] = shard_key
    try:
        db.command(command)
    except OperationFailure as error:
        if error.code != 48 and "already exists" not in str(error).lower():  # 48 = NamespaceExists
            raise


def last_request_charge(db: Database[Any]) -> float | None:
    """Request units charged for this connection's last operation (Cosmos only); None elsewhere."""
    try:
        stats = db.command({"getLastRequestStatistics": 1})
    except OperationFailure:
        return None
    charge = stats.get("RequestCharge")
    return float(charge) if charge is not None else None
