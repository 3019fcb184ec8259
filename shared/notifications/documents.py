"""Notification documents: one per (bottle, kind, episode), recorded once and resolved when the episode ends.

A notification's `_id` is `"{bottle_id}|{kind}|{episode_start}"`, so recording the same episode again (a re-run,
overlapping or retried timer runs, a restart) is a duplicate-key answer, never a second notification.

Delivery is at least once: a notification is inserted `pending`, then its check run sends it to the queue and,
once the queue accepted it, marks it `queued`. A failed send, or a run that dies in between, leaves it `pending`,
and a later run of the same check partition sends it again (the consumer deduplicates on `notification_id`):
a notification carries its bottle's `bucket`, and each partition sends only its own. A late-dose
slot found more than a day after it went late (the checks were down) is recorded `withheld`: kept, never sent.
"""

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, TypedDict

from pymongo import InsertOne, UpdateMany, UpdateOne
from pymongo.collection import Collection
from pymongo.database import Database

from shared.instants import format_instant
from shared.store import schema
from shared.store.partitioning import BUCKET_FIELD, bucket_of
from shared.store.retries import RetryPolicy, with_retries, write_idempotent

Kind = Literal["late_dose", "left_open", "silent"]
KINDS: tuple[Kind, ...] = ("late_dose", "left_open", "silent")
DeliveryState = Literal["pending", "queued", "withheld"]
PENDING: DeliveryState = "pending"
QUEUED: DeliveryState = "queued"
WITHHELD: DeliveryState = "withheld"


class NotificationDocument(TypedDict, total=False):
    """A stored notification (`notifications`), as `notification_document` writes it and delivery, the read API
    and the resolve sweep read it: one definition, so that a field renamed in one place fails the type check in
    every other. Not total: a read with a projection returns some of the fields."""

    _id: str  # notification_id: bottle, kind, episode start
    user_id: str  # the owner it was recorded for (the shard key)
    bottle_id: str
    medication: str
    kind: Kind
    episode_start: datetime
    created_at: datetime
    resolved_at: datetime | None  # None while the episode lasts
    delivery: DeliveryState
    queued_at: datetime | None  # when the queue accepted its message
    feed_key: str  # created_at, then _id: a user's notifications newest first
    bucket: int  # its bottle's bucket (BUCKET_FIELD): the check partition that sends it


class NotificationFilter(TypedDict, total=False):
    """What a guarded write or a read of notifications selects by: a field's value, or a query operator's
    document for it."""

    _id: str
    user_id: str
    bottle_id: str
    kind: Kind | dict[str, list[Kind]]
    episode_start: dict[str, datetime]
    resolved_at: None  # not resolved yet
    delivery: DeliveryState
    feed_key: dict[str, str]


class NotificationFields(TypedDict, total=False):
    """The fields a notification's writes after its insert set: its resolution, its delivery."""

    resolved_at: datetime
    delivery: DeliveryState
    queued_at: datetime


NotificationUpdate = TypedDict("NotificationUpdate", {"$set": NotificationFields})


def stored_notifications(db: Database[Any]) -> "Collection[NotificationDocument]":
    """The `notifications` collection, its documents typed."""
    collection: Collection[NotificationDocument] = db[schema.NOTIFICATIONS]
    return collection


def notification_id(bottle_id: str, kind: str, episode_start: datetime) -> str:
    return f"{bottle_id}|{kind}|{format_instant(episode_start)}"


@dataclass(frozen=True)
class Episode:
    """One episode of trouble, as a check finds it."""

    bottle_id: str
    user_id: str
    medication: str
    kind: Kind
    start: datetime
    push: bool = True  # False: recorded but never sent to the user (found too long after it happened)

    @property
    def notification_id(self) -> str:
        return notification_id(self.bottle_id, self.kind, self.start)


def notification_document(episode: Episode, now: datetime) -> NotificationDocument:
    """The stored notification, created at `now` (when it is written, not when its check run began). `feed_key`
    orders a user's notifications newest first (created_at, then _id), and the read API's cursor follows it."""
    _id = episode.notification_id
    return {
        "_id": _id,
        "user_id": episode.user_id,
        "bottle_id": episode.bottle_id,
        "medication": episode.medication,
        "kind": episode.kind,
        "episode_start": episode.start,
        "created_at": now,
        "resolved_at": None,
        "delivery": PENDING if episode.push else WITHHELD,
        "queued_at": None,
        "feed_key": f"{format_instant(now)}|{_id}",
        # The bucket of its bottle: the check partition that swept the bottle is the one that sends it.
        BUCKET_FIELD: bucket_of(episode.bottle_id),
    }


def record(db: Database[Any], episodes: Iterable[Episode], now: datetime, policy: RetryPolicy) -> list[Episode]:
    """Insert a notification per episode in one bulk write, created at `now` (the instant of the write); the
    episodes that were new (not recorded before)."""
    episodes = list(episodes)
    if not episodes:
        return []
    ops: list[InsertOne[Any] | UpdateOne] = [InsertOne(notification_document(e, now)) for e in episodes]
    written = write_idempotent(db[schema.NOTIFICATIONS], ops, policy)
    return [episode for episode, new in zip(episodes, written, strict=True) if new]


def resolve_episode(user_id: str, bottle_id: str, kind: Kind, episode_start: datetime, now: datetime) -> UpdateOne:
    """Resolve one notification (a no-op if it is resolved already, or was never recorded)."""
    selector: NotificationFilter = {
        "_id": notification_id(bottle_id, kind, episode_start),
        "user_id": user_id,
        "resolved_at": None,
    }
    update: NotificationUpdate = {"$set": {"resolved_at": now}}
    return UpdateOne(selector, update)


def resolve_up_to(user_id: str, bottle_id: str, kind: Kind, latest_start: datetime, now: datetime) -> UpdateMany:
    """Resolve every unresolved notification of this bottle and kind whose episode started by `latest_start`."""
    selector: NotificationFilter = {
        "user_id": user_id,
        "bottle_id": bottle_id,
        "kind": kind,
        "episode_start": {"$lte": latest_start},
        "resolved_at": None,
    }
    update: NotificationUpdate = {"$set": {"resolved_at": now}}
    return UpdateMany(selector, update)


def apply_resolutions(db: Database[Any], ops: list[UpdateOne | UpdateMany], policy: RetryPolicy) -> int:
    """One bulk write of resolutions (each guarded by `resolved_at: null`, so a retry is harmless)."""
    if not ops:
        return 0
    result = with_retries(lambda: db[schema.NOTIFICATIONS].bulk_write(ops, ordered=False), policy)
    return int(result.modified_count)
