"""Delivery: each check partition's run sends the pending notifications of its kind and its buckets to the
notifications queue, one message each, inside the run, and marks a notification queued only after its message was
accepted. At least once: a run that dies between a send and its mark leaves the notification pending, and a later
run of that partition sends it again (the consumer deduplicates on `notification_id`); a send that fails leaves it
and the rest pending for the partition's next run. Another partition's notifications are never read or marked."""

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pymongo import InsertOne, UpdateOne
from pymongo.database import Database

from shared.instants import format_instant
from shared.notifications.documents import PENDING, QUEUED, Kind
from shared.store import schema
from shared.store.partitioning import BUCKET_FIELD, BucketRange
from shared.store.retries import RetryPolicy, with_retries, write_idempotent

log = logging.getLogger(__name__)

# Sent notifications are marked queued this many at a time: a run that dies resends at most this many.
MARK_BATCH = 100

Send = Callable[[str], None]
"""Sends one queue message, or raises SendFailed (shared/notifications/queue.py; a fake in tests)."""


class SendFailed(Exception):
    """The queue did not take a message (unreachable, timed out, refused): it stays pending."""


@dataclass(frozen=True)
class Delivery:
    """What a run's sending did: messages the queue accepted (and marked queued), and whether a send failed."""

    queued: int
    failed: bool


def queue_message(notification: Mapping[str, Any]) -> str:
    """The queue message of a notification: JSON, `notification_id` being the key to deduplicate on."""
    return json.dumps(
        {
            "notification_id": notification["_id"],
            "user_id": notification["user_id"],
            "bottle_id": notification["bottle_id"],
            "medication": notification["medication"],
            "kind": notification["kind"],
            "episode_start": format_instant(notification["episode_start"]),
            "created_at": format_instant(notification["created_at"]),
        },
        separators=(",", ":"),
    )


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
    policy: RetryPolicy,
) -> Delivery:
    """Send the partition's pending notifications of this kind (oldest first, at most `limit`), one `send`
    each, marking them queued in batches as their sends succeed. The first failed send stops the sending: that
    notification and the ones after it stay pending for the partition's next run."""
    pending = with_retries(
        lambda: list(db[schema.NOTIFICATIONS].find(pending_selector(kind, partition)).sort(OLDEST_FIRST).limit(limit)),
        policy,
    )
    sent: list[Mapping[str, Any]] = []
    queued = 0
    failed = False
    for index, notification in enumerate(pending):
        try:
            send(queue_message(notification))
        except SendFailed as error:
            log.warning(
                "notifications: sending %s failed; %d %s notifications stay pending for the next run of partition "
                "%d/%d: %s",
                notification["_id"],
                len(pending) - index,
                kind,
                partition.index,
                partition.count,
                error,
            )
            failed = True
            break
        sent.append(notification)
        if len(sent) == MARK_BATCH:
            queued += _mark_queued(db, sent, now=now, policy=policy)
            sent = []
    if sent:
        queued += _mark_queued(db, sent, now=now, policy=policy)
    return Delivery(queued, failed)


def _mark_queued(db: Database[Any], sent: list[Mapping[str, Any]], *, now: datetime, policy: RetryPolicy) -> int:
    """Mark notifications whose messages the queue accepted. How many were marked."""
    marks: list[InsertOne[Any] | UpdateOne] = [
        UpdateOne(
            {"_id": n["_id"], "user_id": n["user_id"], "delivery": PENDING},
            {"$set": {"delivery": QUEUED, "queued_at": now}},
        )
        for n in sent
    ]
    if marks:
        write_idempotent(db[schema.NOTIFICATIONS], marks, policy)
    return len(sent)
