"""The metrics an operator watches and alerts on (infra/modules/alerts.bicep; the workbook, infra/workbook.json;
docs/operations.md: Metrics and alerts), as OpenTelemetry instruments. In Azure the distro that
shared/telemetry/observability.py configures exports them to Application Insights (the `customMetrics` table), never
sampled; without it the OpenTelemetry API's default provider makes every call a no-op.

A common module: the jobs call it with plain values and it imports none of them.

Per-run values (lag, pending) are histograms, not gauges: a histogram exports each run's sample once, so a run
that stops happening shows as missing data, where a gauge would repeat its last value for as long as the worker
lives."""

from typing import Literal

from opentelemetry import metrics

METER = "pillbottle"

REPORT_LAG = "pillbottle.reports.lag_seconds"
PENDING_NOTIFICATIONS = "pillbottle.notifications.pending"
CHECK_RUNS = "pillbottle.checks.runs"
CHECK_BUDGET_EXHAUSTED = "pillbottle.checks.budget_exhausted"
HTTP_503 = "pillbottle.http.responses_503"
STORE_THROTTLED = "pillbottle.store.throttled"
REPORT_UNPARTITIONED = "pillbottle.reports.unpartitioned"
REPORT_UNCOVERED = "pillbottle.reports.uncovered_ranges"
HTTP_500 = "pillbottle.http.responses_500"
HTTP_REQUESTS = "pillbottle.http.requests"
EVENTS = "pillbottle.events.received"
NOTIFICATIONS_SENT = "pillbottle.notifications.sent"
NOTIFICATION_DELAY = "pillbottle.notifications.delay_seconds"
PARTITION_LAG = "pillbottle.reports.partition_lag_seconds"
STORE_RETRIES = "pillbottle.store.retries"
QUEUE_FAILURES = "pillbottle.queue.failures"
POISON_MESSAGES = "pillbottle.queue.poison_messages"
NAMES = (
    REPORT_LAG,
    PENDING_NOTIFICATIONS,
    CHECK_RUNS,
    CHECK_BUDGET_EXHAUSTED,
    HTTP_503,
    HTTP_500,
    STORE_THROTTLED,
    REPORT_UNPARTITIONED,
    REPORT_UNCOVERED,
    HTTP_REQUESTS,
    EVENTS,
    NOTIFICATIONS_SENT,
    NOTIFICATION_DELAY,
    PARTITION_LAG,
    STORE_RETRIES,
    QUEUE_FAILURES,
    POISON_MESSAGES,
)
# The attributes each metric carries (custom dimensions in Application Insights, which the alert rules split by).
ATTRIBUTES: dict[str, tuple[str, ...]] = {
    REPORT_LAG: ("feed",),
    # `partition` (`index/count`): each check partition runs on its own; the alert rules add partitions up
    # (pending) or watch each (budget).
    PENDING_NOTIFICATIONS: ("kind", "partition"),
    CHECK_RUNS: ("kind", "partition"),
    CHECK_BUDGET_EXHAUSTED: ("kind", "partition"),
    HTTP_503: ("function", "reason"),
    STORE_THROTTLED: ("code",),
    REPORT_UNPARTITIONED: ("feed",),
    REPORT_UNCOVERED: ("feed", "problem"),
    HTTP_500: ("function", "error"),
    HTTP_REQUESTS: ("function", "status"),
    EVENTS: ("outcome",),
    NOTIFICATIONS_SENT: ("kind",),
    NOTIFICATION_DELAY: ("kind",),
    PARTITION_LAG: ("feed", "partition"),
    STORE_RETRIES: ("reason",),
    QUEUE_FAILURES: ("function",),
    POISON_MESSAGES: ("function",),
}

Unavailable = Literal["store_unavailable", "not_configured"]
EventOutcome = Literal["stored", "duplicate", "expired"]
RetryReason = Literal["throttled", "transient"]

_meter = metrics.get_meter(METER)
_report_lag = _meter.create_histogram(
    REPORT_LAG,
    unit="s",
    description="At the end of each report consumer run, per feed: the run's time minus the feed's saved checkpoint "
    "time (everything the feed received before the checkpoint is in the reports)",
)
_pending = _meter.create_histogram(
    PENDING_NOTIFICATIONS,
    unit="{notification}",
    description="After each check partition run's delivery: the partition's notifications of its kind still "
    "waiting to be sent to the queue",
)
_check_runs = _meter.create_counter(
    CHECK_RUNS, unit="{run}", description="Check partition runs, per kind and partition"
)
_budget_exhausted = _meter.create_counter(
    CHECK_BUDGET_EXHAUSTED,
    unit="{run}",
    description="Check partition runs that stopped at CHECKS_TIME_BUDGET_SECONDS with bottles left to sweep, per "
    "kind and partition",
)
_http_503 = _meter.create_counter(
    HTTP_503,
    unit="{response}",
    description="HTTP 503 answers, per function and reason (the store stayed unavailable through its retries, "
    "or is not configured)",
)
_store_throttled = _meter.create_counter(
    STORE_THROTTLED,
    unit="{error}",
    description="Database calls answered with throttling, per code: 16500 (TooManyRequests) or 50 "
    "(ExceededTimeLimit: Cosmos DB's server-side retry ran out); each attempt counts, retried or not",
)

_unpartitioned = _meter.create_counter(
    REPORT_UNPARTITIONED,
    unit="{dispatch}",
    description="Report dispatches that could not partition a feed, per feed: Cosmos DB's GetChangeStreamTokens gave "
    "no token, or tokens without a feed range; the feed is not read until it does",
)
_uncovered = _meter.create_counter(
    REPORT_UNCOVERED,
    unit="{dispatch}",
    description="Report dispatches whose GetChangeStreamTokens reply for a feed left part of the hash space out "
    "(problem=gap: no lease reads it) or gave two tokens for one part (problem=overlap: read twice), per feed",
)
_http_500 = _meter.create_counter(
    HTTP_500,
    unit="{response}",
    description="HTTP 500 answers, per function and error (the exception's type, and a database error's code: a "
    "bad query, a refused write, denied access are faults, not outages, so not 503s)",
)

_http_requests = _meter.create_counter(
    HTTP_REQUESTS,
    unit="{response}",
    description="Every answer of an HTTP function, per function and status code: 2xx accepted, 4xx refused (bad "
    "input, unknown bottle, wrong key), 503 throttled or unavailable (the device retries), 500 a fault",
)
_events = _meter.create_counter(
    EVENTS,
    unit="{event}",
    description="Device events answered 202, per outcome: stored (new, kept), duplicate (a repeat of one kept), "
    "expired (a heartbeat older than the heartbeat window, accepted and not kept)",
)
_notifications_sent = _meter.create_counter(
    NOTIFICATIONS_SENT,
    unit="{notification}",
    description="Notifications the notifications queue accepted, per check kind",
)
_notification_delay = _meter.create_histogram(
    NOTIFICATION_DELAY,
    unit="s",
    description="For each notification the queue accepted: how long after its episode began (a dose due, a "
    "bottle opened, the last heartbeat), per check kind",
)
_partition_lag = _meter.create_histogram(
    PARTITION_LAG,
    unit="s",
    description="At the end of each report worker run on a change feed's partition: the run's time minus the "
    "partition's checkpoint time (the newest change its reports hold), per feed and partition",
)
_store_retries = _meter.create_counter(
    STORE_RETRIES,
    unit="{retry}",
    description="Database calls retried after a transient failure, per reason: throttled (16500, or 50), "
    "transient (a network error, a failover)",
)
_queue_failures = _meter.create_counter(
    QUEUE_FAILURES,
    unit="{invocation}",
    description="Queue-triggered invocations that failed (the host retries the message), per function",
)
_poison = _meter.create_counter(
    POISON_MESSAGES,
    unit="{message}",
    description="Queue messages whose last attempt (host.json maxDequeueCount) failed: the host moves them to "
    "<queue>-poison and nothing retries them, per function",
)


def report_lag(feed: str, seconds: float) -> None:
    """Record a report feed's lag (`feed`: its source collection: now minus the checkpoint time of its
    furthest-behind partition) at each dispatch."""
    _report_lag.record(max(0.0, seconds), {"feed": feed})


def feed_unpartitioned(feed: str) -> None:
    """Count a dispatch that could not partition `feed` (no usable GetChangeStreamTokens reply)."""
    _unpartitioned.add(1, {"feed": feed})


def feed_ranges_uncovered(feed: str, problem: Literal["gap", "overlap"]) -> None:
    """Count a dispatch whose token reply for `feed` left a range out (`gap`) or named one twice (`overlap`)."""
    _uncovered.add(1, {"feed": feed, "problem": problem})


def check_run(kind: str, *, partition: str, budget_exhausted: bool, pending: int | None) -> None:
    """Count a check run of `kind` on `partition` (`index/count`); whether it hit its time budget; the partition's
    notifications it left pending (None: unknown, not recorded)."""
    attributes = {"kind": kind, "partition": partition}
    _check_runs.add(1, attributes)
    if budget_exhausted:
        _budget_exhausted.add(1, attributes)
    if pending is not None:
        _pending.record(pending, attributes)


def unavailable_response(function: str, reason: Unavailable) -> None:
    """Count a 503 answered by an HTTP function."""
    _http_503.add(1, {"function": function, "reason": reason})


def store_throttled(code: int) -> None:
    """Count one throttled database call (an attempt: with_retries may retry it)."""
    _store_throttled.add(1, {"code": code})


def internal_error(function: str, error: str) -> None:
    """Count a 500 answered by an HTTP function; `error` names the exception (`OperationFailure:13`)."""
    _http_500.add(1, {"function": function, "error": error})


def http_request(function: str, status: int) -> None:
    """Count an answer of an HTTP function with its status code."""
    _http_requests.add(1, {"function": function, "status": status})


def events_received(*, stored: int, duplicate: int, expired: int) -> None:
    """Count the events of a request answered 202 by what became of each."""
    counts: dict[EventOutcome, int] = {"stored": stored, "duplicate": duplicate, "expired": expired}
    for outcome, count in counts.items():
        if count:
            _events.add(count, {"outcome": outcome})


def notification_sent(kind: str, delay_seconds: float) -> None:
    """Count a notification the queue accepted, and how long after its episode began (never below 0)."""
    _notifications_sent.add(1, {"kind": kind})
    _notification_delay.record(max(0.0, delay_seconds), {"kind": kind})


def partition_lag(feed: str, partition: str, seconds: float) -> None:
    """Record a change feed partition's lag at the end of a worker run (`partition`: its lease id)."""
    _partition_lag.record(max(0.0, seconds), {"feed": feed, "partition": partition})


def store_retried(reason: RetryReason) -> None:
    """Count a database call about to be retried."""
    _store_retries.add(1, {"reason": reason})


def queue_failure(function: str, *, last_attempt: bool) -> None:
    """Count a failed queue-triggered invocation; `last_attempt`: its message goes to the poison queue."""
    _queue_failures.add(1, {"function": function})
    if last_attempt:
        _poison.add(1, {"function": function})
