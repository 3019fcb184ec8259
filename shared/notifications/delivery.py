"""Delivery: each check run hands its kind's pending notifications to the notifications queue, then marks
them queued. At least once: a run that dies in between leaves them pending, and a later run sends them again
(the consumer deduplicates on `notification_id`)."""

import json
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from pymongo import InsertOne, UpdateOne
from pymongo.database import Database

from shared.instants import format_instant
from shared.notifications.documents import PENDING, QUEUED, Kind
from shared.store import schema
from shared.store.retries import RetryPolicy, with_retries, write_idempotent


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
OLDEST_FIRST = [("delivery", 1), ("kind", 1), ("created_at", 1)]


def send_pending(
    db: Database[Any],
    kind: Kind,
    *,
    now: datetime,
    limit: int,
    send: Callable[[list[str]], None],
    policy: RetryPolicy,
) -> int:
    """Hand this kind's pending notifications (oldest first, at most `limit`) to `send` (the queue output
    binding, set once per run), then mark them queued. Returns how many were sent."""
    pending = with_retries(
        lambda: list(
            db[schema.NOTIFICATIONS].find({"delivery": PENDING, "kind": kind}).sort(OLDEST_FIRST).limit(limit)
        ),
        policy,
    )
    send([queue_message(n) for n in pending])
    marks: list[InsertOne[Any] | UpdateOne] = [
        UpdateOne(
            {"_id": n["_id"], "user_id": n["user_id"], "delivery": PENDING},
            {"$set": {"delivery": QUEUED, "queued_at": now}},
        )
        for n in pending
    ]
    if marks:
        write_idempotent(db[schema.NOTIFICATIONS], marks, policy)
    return len(pending)
