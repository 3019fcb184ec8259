"""GET /api/users/{user_id}/notifications: a user's notifications newest first, filtered by since and kind,
paged; 400 naming every bad parameter. Following the feed by its cursor: test_notifications_feed.py."""

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from functions import notifications as notification_functions
from shared.instants import format_instant, set_clock
from shared.notifications.documents import Episode, apply_resolutions, record, resolve_episode
from shared.store.retries import RetryPolicy
from tests.api import Response, call_http

_get = notification_functions.get_user_notifications
T0 = datetime(2026, 5, 4, 9, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def server_clock() -> Any:
    """The server clock the morning of T0: notifications expire (NOTIFICATIONS_RETENTION_DAYS) by it."""
    set_clock(lambda: T0 + timedelta(hours=3))
    yield
    set_clock(None)


def get(user_id: str, **params: str) -> Response:
    return call_http(_get, "GET", f"/api/users/{user_id}/notifications", {"user_id": user_id}, params=params)


def notify(db: Any, created: datetime, kind: Any = "late_dose", user: str = "u1", bottle: str = "b1") -> str:
    episode = Episode(bottle, user, "Cordrazine", kind, created - timedelta(hours=1))
    record(db, [episode], created, RetryPolicy())
    return episode.notification_id


def test_newest_first_with_every_field(db):
    older = notify(db, T0)
    newer = notify(db, T0 + timedelta(minutes=5), kind="silent")
    notify(db, T0, user="someone-else")

    response = get("u1")

    assert response.status == 200
    cursor = response.body["cursor"]  # opaque (tests/notifications/test_notifications_feed.py follows it)
    assert response.body == {
        "cursor": cursor,
        "user_id": "u1",
        "notifications": [
            {
                "id": newer,
                "user_id": "u1",
                "bottle_id": "b1",
                "medication": "Cordrazine",
                "kind": "silent",
                "episode_start": format_instant(T0 - timedelta(minutes=55)),
                "created_at": format_instant(T0 + timedelta(minutes=5)),
                "resolved_at": None,
            },
            {
                "id": older,
                "user_id": "u1",
                "bottle_id": "b1",
                "medication": "Cordrazine",
                "kind": "late_dose",
                "episode_start": format_instant(T0 - timedelta(hours=1)),
                "created_at": format_instant(T0),
                "resolved_at": None,
            },
        ],
        "next_page": None,
    }


def test_a_resolved_notification_shows_when_it_was_resolved_and_an_open_one_null(mock_db):
    """The view's `resolved_at` is the instant the episode ended (ISO-8601), null while it lasts: a caregiver sees
    which alerts are over."""
    resolved_at = T0 + timedelta(minutes=40)
    over = Episode("b1", "u1", "Cordrazine", "left_open", T0 - timedelta(hours=1))
    record(mock_db, [over], T0, RetryPolicy())
    apply_resolutions(mock_db, [resolve_episode("u1", "b1", "left_open", over.start, resolved_at)], RetryPolicy())
    still = notify(mock_db, T0 + timedelta(minutes=5), bottle="b2")

    response = get("u1")

    assert response.status == 200
    assert [(n["id"], n["resolved_at"]) for n in response.body["notifications"]] == [
        (still, None),
        (over.notification_id, format_instant(resolved_at)),
    ]


def test_pages_follow_next_page_to_the_end_without_gaps_or_repeats(mock_db):
    # Several notifications share a creation instant (one check run): the order still pages cleanly.
    ids = [notify(mock_db, T0 + timedelta(minutes=i // 3), bottle=f"b{i}") for i in range(7)]

    seen: list[str] = []
    page: str | None = None
    pages = 0
    while True:
        params = {"limit": "3"} | ({"page": page} if page else {})
        body = get("u1", **params).body
        seen += [n["id"] for n in body["notifications"]]
        pages += 1
        page = body["next_page"]
        if page is None:
            break

    assert pages == 3
    assert sorted(seen) == sorted(ids)
    assert len(seen) == len(set(seen))
    assert seen[0] == ids[6]  # alone at the newest instant


def test_since_and_kind_filter(mock_db):
    notify(mock_db, T0, kind="late_dose")
    notify(mock_db, T0 + timedelta(hours=1), kind="silent", bottle="b2")
    notify(mock_db, T0 + timedelta(hours=2), kind="left_open", bottle="b3")

    recent = get("u1", since=format_instant(T0 + timedelta(hours=1))).body["notifications"]
    assert [n["kind"] for n in recent] == ["left_open", "silent"]
    kinds = get("u1", kind="late_dose,left_open").body["notifications"]
    assert [n["kind"] for n in kinds] == ["left_open", "late_dose"]
    both = get("u1", kind="silent", since="2026-05-04T11:30:00+02:00").body["notifications"]
    assert [n["kind"] for n in both] == ["silent"]


@pytest.mark.parametrize("since", ["0999-12-31T23:00:00Z", "0298-10-15T06:37:53-12:00", "0005-01-01T00:00:00Z"])
def test_a_since_in_a_year_of_fewer_than_four_digits_finds_everything_after_it(mock_db, since):
    # Found by the contract fuzzing: `since` was compared as "999-12-31T..." with "2026-...", so nothing was found.
    created = notify(mock_db, T0)

    response = get("u1", since=since)

    assert response.status == 200
    assert [n["id"] for n in response.body["notifications"]] == [created]


def test_an_unknown_user_has_none_and_the_function_key_parameter_is_ignored(mock_db):
    body = get("nobody", code="the-function-key").body
    assert body == {"user_id": "nobody", "notifications": [], "next_page": None, "cursor": body["cursor"]}


@pytest.mark.parametrize(
    ("params", "field", "message"),
    [
        ({"since": "yesterday"}, "since", "not an ISO-8601"),
        ({"since": "2026-05-04T09:00:00"}, "since", "no UTC offset"),
        ({"kind": "late"}, "kind", "unknown kind 'late'"),
        ({"limit": "0"}, "limit", "from 1 to 200"),
        ({"limit": "201"}, "limit", "from 1 to 200"),
        ({"limit": "ten"}, "limit", "from 1 to 200"),
        ({"limit": "\u0663"}, "limit", "from 1 to 200"),  # an Arabic-Indic 3: a digit, but not ASCII
        ({"limit": "\u00b2"}, "limit", "from 1 to 200"),  # superscript two: isdigit() yet int() refuses it
        ({"page": "not-a-token!"}, "page", "next_page"),
        ({"cursor": "not-a-cursor!"}, "cursor", "previous answer's cursor"),
    ],
)
def test_bad_parameters_are_400_naming_the_parameter(mock_db, params, field, message):
    response = get("u1", **params)
    assert response.status == 400
    [detail] = response.body["details"]
    assert detail["field"] == field
    assert message in detail["message"]


def test_every_bad_parameter_is_reported_at_once(mock_db):
    response = get("u1", since="x", limit="0", kind="nope")
    assert response.status == 400
    assert sorted(d["field"] for d in response.body["details"]) == ["kind", "limit", "since"]


def test_a_bad_user_id_is_400(mock_db):
    response = get("not a user!")
    assert response.status == 400
    assert response.body["details"][0]["field"] == "user_id"
