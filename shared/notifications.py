"""Notifications: one document per (bottle, kind, episode), its queue message, and reading a user's notifications.

A notification's `_id` is `"{bottle_id}|{kind}|{episode_start}"`, so recording the same episode again (a re-run,
overlapping or retried timer runs, a restart) is a duplicate-key answer, never a second notification.

Delivery is at least once: a notification is inserted `pending`, then its check run hands it to the queue output
binding and marks it `queued`. A run that dies in between leaves it `pending`, and a later run of the same check
sends it again (the consumer deduplicates on `notification_id`). A late-dose slot found more than a day after it
went late (the checks were down) is recorded `withheld`: kept, never sent.
"""

import base64
import binascii
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from pymongo import InsertOne, UpdateMany, UpdateOne
from pymongo.database import Database

from shared import schema
from shared.cosmos import RetryPolicy, with_retries, write_idempotent
from shared.errors import BadRequest, Detail
from shared.instants import format_instant, parse_instant

Kind = Literal["late_dose", "left_open", "silent"]
KINDS: tuple[Kind, ...] = ("late_dose", "left_open", "silent")
PENDING, QUEUED, WITHHELD = "pending", "queued", "withheld"
DEFAULT_PAGE, MAX_PAGE = 50, 200


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


def notification_document(episode: Episode, now: datetime) -> dict[str, Any]:
    """The stored notification. `feed_key` orders a user's notifications newest first (created_at, then _id)."""
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
    }


def record(db: Database[Any], episodes: Iterable[Episode], now: datetime, policy: RetryPolicy) -> list[Episode]:
    """Insert a notification per episode in one bulk write; the episodes that were new (not recorded before)."""
    episodes = list(episodes)
    if not episodes:
        return []
    ops: list[InsertOne[Any] | UpdateOne] = [InsertOne(notification_document(e, now)) for e in episodes]
    written = write_idempotent(db[schema.NOTIFICATIONS], ops, policy)
    return [episode for episode, new in zip(episodes, written, strict=True) if new]


def resolve_episode(user_id: str, bottle_id: str, kind: Kind, episode_start: datetime, now: datetime) -> UpdateOne:
    """Resolve one notification (a no-op if it is resolved already, or was never recorded)."""
    return UpdateOne(
        {"_id": notification_id(bottle_id, kind, episode_start), "user_id": user_id, "resolved_at": None},
        {"$set": {"resolved_at": now}},
    )


def resolve_up_to(user_id: str, bottle_id: str, kind: Kind, latest_start: datetime, now: datetime) -> UpdateMany:
    """Resolve every unresolved notification of this bottle and kind whose episode started by `latest_start`."""
    return UpdateMany(
        {
            "user_id": user_id,
            "bottle_id": bottle_id,
            "kind": kind,
            "episode_start": {"$lte": latest_start},
            "resolved_at": None,
        },
        {"$set": {"resolved_at": now}},
    )


def apply_resolutions(db: Database[Any], ops: list[UpdateOne | UpdateMany], policy: RetryPolicy) -> int:
    """One bulk write of resolutions (each guarded by `resolved_at: null`, so a retry is harmless)."""
    if not ops:
        return 0
    result = with_retries(lambda: db[schema.NOTIFICATIONS].bulk_write(ops, ordered=False), policy)
    return int(result.modified_count)


# --- the queue ------------------------------------------------------------------------------------------------


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
            db[schema.NOTIFICATIONS].find({"delivery": PENDING, "kind": kind}).sort("created_at", 1).limit(limit)
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


# --- reading: GET /api/users/{user_id}/notifications ---------------------------------------------------------


@dataclass(frozen=True)
class NotificationQuery:
    user_id: str
    since: datetime | None = None
    kinds: tuple[Kind, ...] = ()
    limit: int = DEFAULT_PAGE
    before: str | None = None  # the feed key of the last notification of the previous page


def parse_query(user_id: str, params: Mapping[str, str]) -> NotificationQuery:
    """`since` (ISO-8601 with offset), `kind` (one or more, comma-separated), `limit` (1-200), `page` (the
    `next_page` of the previous answer). Every problem is reported; other parameters (`code`) are ignored."""
    problems: list[Detail] = []
    since = _parse_field(params, "since", parse_instant, problems)
    kinds = _parse_field(params, "kind", _kinds, problems) or ()
    limit = _parse_field(params, "limit", _limit, problems)
    before = _parse_field(params, "page", _decode_page, problems)
    if problems:
        raise BadRequest("invalid query parameters", problems)
    return NotificationQuery(user_id, since, kinds, DEFAULT_PAGE if limit is None else limit, before)


def _parse_field(params: Mapping[str, str], name: str, parse: Callable[[str], Any], problems: list[Detail]) -> Any:
    raw = params.get(name)
    if raw is None:
        return None
    try:
        return parse(raw)
    except ValueError as error:
        problems.append({"field": name, "message": str(error)})
        return None


def _kinds(raw: str) -> tuple[Kind, ...]:
    names = [part.strip() for part in raw.split(",")]
    unknown = [name for name in names if name not in KINDS]
    if unknown:
        raise ValueError(f"unknown kind {', '.join(repr(u) for u in unknown)}; one of {', '.join(KINDS)}")
    return tuple(k for k in KINDS if k in names)


def _limit(raw: str) -> int:
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_PAGE:
        raise ValueError(f"must be a whole number from 1 to {MAX_PAGE}")
    return int(raw)


def _encode_page(feed_key: str) -> str:
    return base64.urlsafe_b64encode(feed_key.encode()).decode().rstrip("=")


def _decode_page(raw: str) -> str:
    try:
        key = base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)).decode()
        parse_instant(key.split("|", 1)[0])
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise ValueError("is not a page token from a previous answer's next_page") from None
    return key


def list_notifications(
    db: Database[Any], query: NotificationQuery, policy: RetryPolicy
) -> tuple[list[dict[str, Any]], str | None]:
    """A page of the user's notifications, newest first, and the token of the next page (None at the end)."""
    selector: dict[str, Any] = {"user_id": query.user_id}
    feed: dict[str, str] = {}
    if query.since is not None:
        feed["$gte"] = format_instant(query.since)
    if query.before is not None:
        feed["$lt"] = query.before
    if feed:
        selector["feed_key"] = feed
    if query.kinds:
        selector["kind"] = {"$in": list(query.kinds)}
    found = with_retries(
        lambda: list(db[schema.NOTIFICATIONS].find(selector).sort("feed_key", -1).limit(query.limit + 1)), policy
    )
    page = found[: query.limit]
    next_page = _encode_page(page[-1]["feed_key"]) if len(found) > query.limit else None
    return [notification_view(n) for n in page], next_page


def notification_view(notification: Mapping[str, Any]) -> dict[str, Any]:
    resolved = notification.get("resolved_at")
    return {
        "id": notification["_id"],
        "user_id": notification["user_id"],
        "bottle_id": notification["bottle_id"],
        "medication": notification["medication"],
        "kind": notification["kind"],
        "episode_start": format_instant(notification["episode_start"]),
        "created_at": format_instant(notification["created_at"]),
        "resolved_at": format_instant(resolved) if resolved is not None else None,
    }
