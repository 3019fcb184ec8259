"""Delivery: each check partition's run sends the pending notifications of its kind and its buckets to the
notifications queue, one message each, inside the run, and marks a notification queued only after its message was
accepted (at least once; the consumer deduplicates on `notification_id`). Another partition's notifications are
never read or marked. Why and how: docs/checks.md, "The queue message" and "The morning peak"."""

import contextvars
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pymongo import UpdateOne
from pymongo.database import Database

from shared.notifications.documents import (
    PENDING,
    QUEUED,
    Kind,
    NotificationDocument,
    NotificationFilter,
    NotificationUpdate,
    stored_notifications,
)
from shared.notifications.outside import queue_message
from shared.store.partitioning import BUCKET_FIELD, BucketRange
from shared.store.retries import RetryPolicy, count_matched, with_retries
from shared.telemetry import metrics
from shared.telemetry.observability import fields

log = logging.getLogger(__name__)

# Sent notifications are marked queued this many at a time: a run that dies resends at most this many.
MARK_BATCH = 100

Send = Callable[[str], None]
"""Sends one queue message, or raises SendFailed (shared/notifications/queue.py; a fake in tests)."""


class SendFailed(Exception):
    """The queue did not take a message (unreachable, timed out, refused): it stays pending."""


@dataclass(frozen=True)
class Delivery:
    """What a run's sending did: notifications it marked queued (their messages accepted), how many pending ones it
    found (at most its limit), whether a send failed, and whether the send deadline stopped it with notifications
    left to send."""

    queued: int
    found: int
    failed: bool
    out_of_time: bool = False


@dataclass(frozen=True)
class Sending:
    """How a run sends: `send_until` (a `clock` reading) past which no batch starts, `concurrency` sends at once,
    and `request_policy`, a fresh deadline for each store request (the pending read, each batch's mark)."""

    send_until: float
    concurrency: int
    request_policy: Callable[[], RetryPolicy]
    clock: Callable[[], float] = time.monotonic


# The index delivery_pending's keys, all of them: Cosmos DB serves a sort only from an index it matches exactly.
OLDEST_FIRST = [("delivery", 1), ("kind", 1), ("created_at", 1), (BUCKET_FIELD, 1)]


def pending_selector(kind: Kind, partition: BucketRange) -> dict[str, Any]:
    """The partition's notifications of `kind` not yet accepted by the queue."""
    return {"delivery": PENDING, "kind": kind, **partition.selector(BUCKET_FIELD)}


def send_pending(
    db: Database[Any],
    kind: Kind,
    *,
    partition: BucketRange,
    now: datetime,
    limit: int,
    send: Send,
    sending: Sending,
) -> Delivery:
    """Send the partition's pending notifications of this kind (oldest first, at most `limit`), a batch of
    MARK_BATCH at a time, side by side, marking each batch's accepted ones queued once its sends are done. A
    failed send stops the sending after its batch: it and the ones after it stay pending for the partition's
    next run. No batch starts past `sending.send_until`. The sends run on a bounded pool of `sending.concurrency`
    threads, sharing one queue client: "All Azure SDK client objects are thread-safe and independent of each
    other" (https://learn.microsoft.com/dotnet/azure/sdk/thread-safety; for Python, the guidelines'
    https://azure.github.io/azure-sdk/python_design.html)."""
    pending = with_retries(
        lambda: list(stored_notifications(db).find(pending_selector(kind, partition)).sort(OLDEST_FIRST).limit(limit)),
        sending.request_policy(),
    )
    queued = 0
    with ThreadPoolExecutor(max_workers=sending.concurrency, thread_name_prefix="notify") as pool:
        for start in range(0, len(pending), MARK_BATCH):
            if sending.clock() >= sending.send_until:
                log.warning(
                    "notifications: the run's send deadline passed; %d %s notifications stay pending for the next "
                    "run of partition %d/%d",
                    len(pending) - start,
                    kind,
                    partition.index,
                    partition.count,
                    extra=fields(
                        check=kind, partition=f"{partition.index}/{partition.count}", pending=len(pending) - start
                    ),
                )
                return Delivery(queued, len(pending), failed=False, out_of_time=True)
            batch = pending[start : start + MARK_BATCH]
            # Each send in a copy of the invocation's context: the trace context (and the runtime's invocation
            # id) follow it onto the pool's thread, so its logs and telemetry stay the invocation's.
            contexts = [contextvars.copy_context() for _ in batch]
            errors = list(pool.map(lambda n, context: context.run(_send_one, send, n), batch, contexts))
            accepted = [n for n, error in zip(batch, errors, strict=True) if error is None]
            queued += _mark_queued(db, accepted, now=now, policy=sending.request_policy())
            _count_sent(kind, accepted, now)
            if len(accepted) < len(batch):
                first = next(e for e in errors if e is not None)
                log.warning(
                    "notifications: %d of %d sends failed; %d %s notifications stay pending for the next run of "
                    "partition %d/%d: %s",
                    len(batch) - len(accepted),
                    len(batch),
                    len(pending) - start - len(accepted),
                    kind,
                    partition.index,
                    partition.count,
                    first,
                    extra=fields(
                        check=kind,
                        partition=_label(partition),
                        failed=len(batch) - len(accepted),
                        pending=len(pending) - start - len(accepted),
                        error=type(first).__name__,
                    ),
                )
                return Delivery(queued, len(pending), failed=True)
    return Delivery(queued, len(pending), failed=False)


def _label(partition: BucketRange) -> str:
    """A partition as the log lines and metrics name it: `index/count`."""
    return f"{partition.index}/{partition.count}"


def _count_sent(kind: Kind, accepted: list[NotificationDocument], now: datetime) -> None:
    """Count the notifications the queue accepted, each with how long after its episode began (at the run's
    `now`: a run sends within its budget)."""
    for notification in accepted:
        began = notification["episode_start"]
        began = began if began.tzinfo is not None else began.replace(tzinfo=UTC)
        metrics.notification_sent(kind, (now - began).total_seconds())


def _send_one(send: Send, notification: NotificationDocument) -> SendFailed | None:
    """Send one notification's message; the SendFailed if the queue did not take it (anything else raises: the
    run dies, and what it sent unmarked is sent again by a later run)."""
    try:
        send(queue_message(notification))
    except SendFailed as error:
        return error
    return None


def _still_pending(notification: NotificationDocument) -> NotificationFilter:
    """The notification, if it is still pending (an overlapping run may have marked it)."""
    return {"_id": notification["_id"], "user_id": notification["user_id"], "delivery": PENDING}


def _mark_queued(db: Database[Any], sent: list[NotificationDocument], *, now: datetime, policy: RetryPolicy) -> int:
    """Mark notifications whose messages the queue accepted. How many this run marked: one an overlapping run
    of the partition marked first is not counted (its message went out twice; the consumer deduplicates)."""
    queued: NotificationUpdate = {"$set": {"delivery": QUEUED, "queued_at": now}}
    marks = [UpdateOne(_still_pending(n), queued) for n in sent]
    return count_matched(stored_notifications(db), marks, policy)
