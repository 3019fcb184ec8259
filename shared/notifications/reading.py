"""Reading a user's notifications (GET /api/users/{user_id}/notifications): newest first, filtered, paged, and
followed with a cursor that misses nothing (`feed_lag`; docs/api.md, Following the feed)."""

import base64
import binascii
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pymongo.database import Database

from shared.errors import BadRequest, Detail
from shared.instants import format_instant, parse_instant, to_stored
from shared.notifications.documents import KINDS, Kind, NotificationDocument, NotificationFilter, stored_notifications
from shared.notifications.outside import notification_view
from shared.settings import Settings
from shared.store.retries import RetryPolicy, with_retries

DEFAULT_PAGE, MAX_PAGE = 50, 200
# The most two instances' clocks may differ by: a few minutes is what the feed plans for, twice that is allowed.
CLOCK_SKEW = timedelta(minutes=10)
# The cursor of a reader that has seen nothing: every notification kept.
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_CURSOR = "c1|"  # a cursor's version, before the instant it holds


def feed_lag(settings: Settings) -> timedelta:
    """How much earlier than the newest `created_at` a reader has seen a notification it has not seen may be
    created: a cursor reads again from that much before. A check run stamps `created_at` on its instance's clock
    just before the insert, which lands within the run's store deadline (CHECKS_TIME_BUDGET_SECONDS plus
    REQUEST_DEADLINE_SECONDS: no store request starts after it, and the one in flight gets the time left); another
    instance's clock may be up to CLOCK_SKEW ahead. The proof: docs/api.md, Following the feed."""
    return CLOCK_SKEW + timedelta(seconds=settings.checks_time_budget_seconds + settings.request_deadline_seconds)


@dataclass(frozen=True)
class NotificationQuery:
    user_id: str
    since: datetime | None = None
    kinds: tuple[Kind, ...] = ()
    limit: int = DEFAULT_PAGE
    before: str | None = None  # the feed key of the last notification of the previous page
    after: datetime | None = None  # the `cursor` passed: created at or after this instant
    cursor_of_poll: datetime | None = None  # carried by a page token: the cursor the poll's first page answered


@dataclass(frozen=True)
class NotificationPage:
    """A page of a user's notifications (as the API shows them, newest first), the token of the next, older page
    (None: the last), and the cursor to follow the feed from (the same on every page of one poll)."""

    notifications: list[dict[str, Any]]  # as the API shows them (outside.notification_view)
    next_page: str | None
    cursor: str


def parse_query(user_id: str, params: Mapping[str, str]) -> NotificationQuery:
    """`since` (ISO-8601 with offset), `kind` (one or more, comma-separated), `limit` (1-200), `page` (the
    `next_page` of the previous answer), `cursor` (the `cursor` of an earlier answer). Every problem is reported;
    other parameters (`code`) are ignored. Read by hand, not by a pydantic model: each value is a string one of the
    app's own readers takes (an instant, the kinds, a whole number of plain digits, a token), which a model would
    only wrap."""
    problems: list[Detail] = []
    since = _parse_field(params, "since", parse_instant, problems)
    kinds = _parse_field(params, "kind", _kinds, problems) or ()
    limit = _parse_field(params, "limit", _limit, problems)
    before, cursor_of_poll = _parse_field(params, "page", _decode_page, problems) or (None, None)
    after = _parse_field(params, "cursor", _decode_cursor, problems)
    if problems:
        raise BadRequest("invalid query parameters", problems)
    limit = DEFAULT_PAGE if limit is None else limit
    return NotificationQuery(user_id, since, kinds, limit, before, after, cursor_of_poll)


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


def _token(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def _untoken(raw: str) -> str:
    """The text of a token; binascii.Error or UnicodeDecodeError if it is none."""
    return base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)).decode()


def _encode_page(feed_key: str, cursor: datetime) -> str:
    """The next page's token: where it starts (the feed key of this page's last notification) and the cursor of
    the poll, so that every page of it answers the same cursor. (Feed keys hold no newline.)"""
    return _token(f"{feed_key}\n{format_instant(cursor)}")


def _decode_page(raw: str) -> tuple[str, datetime | None]:
    """The feed key a page starts below, and the cursor of its poll (None in a token from before cursors)."""
    try:
        key, _, cursor = _untoken(raw).partition("\n")
        parse_instant(key.split("|", 1)[0])
        return key, parse_instant(cursor) if cursor else None
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise ValueError("is not a page token from a previous answer's next_page") from None


def _encode_cursor(after: datetime) -> str:
    return _token(f"{_CURSOR}{format_instant(after)}")


def _decode_cursor(raw: str) -> datetime:
    try:
        text = _untoken(raw)
        if not text.startswith(_CURSOR):
            raise ValueError(text)
        return parse_instant(text.removeprefix(_CURSOR))
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise ValueError("is not a cursor from a previous answer's cursor") from None


def list_notifications(db: Database[Any], query: NotificationQuery, *, settings: Settings) -> NotificationPage:
    """A page of the user's notifications, newest first (created at or after `since` and the cursor), the token of
    the next page (None at the end), and the cursor for the next poll: the later of the one passed (or `since`)
    and the newest `created_at` of the poll less `feed_lag`, so that the next poll reads again whatever may still
    be written before it."""
    policy = RetryPolicy.for_request(settings)
    selector: NotificationFilter = {"user_id": query.user_id}
    feed: dict[str, str] = {}
    after = max((b for b in (query.since, query.after) if b is not None), default=None)
    if after is not None:
        feed["$gte"] = format_instant(after)
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
        lambda: list(stored_notifications(db).find(selector).sort(newest_first).limit(query.limit + 1)), policy
    )
    page = found[: query.limit]
    cursor = query.cursor_of_poll or _cursor_after(after, page, settings)
    next_page = _encode_page(page[-1]["feed_key"], cursor) if len(found) > query.limit else None
    return NotificationPage([notification_view(n) for n in page], next_page, _encode_cursor(cursor))


def _cursor_after(after: datetime | None, page: list[NotificationDocument], settings: Settings) -> datetime:
    """The cursor after a poll's first page: from `feed_lag` before its newest notification, never earlier than
    the poll's own bound (so a poll that found nothing answers the cursor it was given)."""
    bound = after if after is not None else EPOCH
    if not page:
        return bound
    newest: datetime = page[0]["created_at"]
    return max(bound, to_stored(newest) - feed_lag(settings))
