"""Reading a user's notifications (GET /api/users/{user_id}/notifications): newest first, filtered, paged."""

import base64
import binascii
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pymongo.database import Database

from shared.errors import BadRequest, Detail
from shared.instants import format_instant, parse_instant
from shared.notifications.documents import KINDS, Kind
from shared.notifications.outside import notification_view
from shared.settings import Settings
from shared.store import schema
from shared.store.retries import RetryPolicy, with_retries

DEFAULT_PAGE, MAX_PAGE = 50, 200


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
    if not (raw.isascii() and raw.isdigit()) or not 1 <= int(raw) <= MAX_PAGE:
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
    db: Database[Any], query: NotificationQuery, *, settings: Settings
) -> tuple[list[dict[str, Any]], str | None]:
    """A page of the user's notifications, newest first, and the token of the next page (None at the end)."""
    policy = RetryPolicy.for_request(settings)
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
    # The index user_feed (user_id, feed_key) walked backwards: Cosmos DB serves a sort only from an index whose
    # keys it matches exactly, so the equality-filtered user_id is in the sort too (it changes no order).
    newest_first = [("user_id", -1), ("feed_key", -1)]
    found = with_retries(
        lambda: list(db[schema.NOTIFICATIONS].find(selector).sort(newest_first).limit(query.limit + 1)), policy
    )
    page = found[: query.limit]
    next_page = _encode_page(page[-1]["feed_key"]) if len(found) > query.limit else None
    return [notification_view(n) for n in page], next_page
