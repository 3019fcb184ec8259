"""Every class of bad device input gets its documented 4xx, says what and where, and stores nothing."""

import json
from typing import Any

import pytest

from shared.store import schema
from tests.api import ago, closed, heartbeat, iso, opened, post_events, provisioned
from tests.heartbeats import counted_everywhere


def nothing_stored(db: Any) -> bool:
    return db[schema.BOTTLE_ACTIONS].count_documents({}) == 0 and counted_everywhere(db) == 0


def six_minutes_ahead() -> dict[str, Any]:
    """Made when the test runs: made at collection, it would be less than 5 minutes ahead a minute later."""
    return {"type": "heartbeat", "time": iso(ago(minutes=-6))}


# An event with a time is made when its test runs (a function), at the test's clock: the clock is placed for each
# test (tests/wall_clock.py), and an event made at collection would be at another instant.
BAD_EVENTS = {
    "unknown field": (lambda: heartbeat(ago(minutes=1), battery=3), "battery", "unknown field"),
    "type missing": (lambda: {"time": iso(ago(minutes=1))}, "type", "required"),
    "type unknown": (
        lambda: {"type": "shaken", "time": iso(ago(minutes=1))},
        "type",
        "'heartbeat', 'opened' or 'closed'",
    ),
    "time missing": ({"type": "heartbeat"}, "time", "required"),
    "time not a string": ({"type": "heartbeat", "time": 1700000000}, "time", "string"),
    "time without offset": ({"type": "heartbeat", "time": "2026-11-21T08:00:00"}, "time", "no UTC offset"),
    "time not a date": ({"type": "heartbeat", "time": "yesterday"}, "time", "not an ISO-8601"),
    "time far in the future": (six_minutes_ahead, "time", "more than 5 minutes ahead"),
    "time too old": (lambda: {"type": "heartbeat", "time": iso(ago(days=31))}, "time", "older than the 30 days"),
    "event_id empty": (lambda: heartbeat(ago(minutes=1), event_id=""), "event_id", "at least 1"),
    "event_id too long": (lambda: heartbeat(ago(minutes=1), event_id="e" * 65), "event_id", "at most 64"),
    "event_id not a string": (lambda: heartbeat(ago(minutes=1), event_id=7), "event_id", "string"),
    "mass on heartbeat": (
        lambda: heartbeat(ago(minutes=1), mass_of_contents=3),
        "mass_of_contents",
        "not allowed on heartbeat",
    ),
    "pills on heartbeat": (
        lambda: heartbeat(ago(minutes=1), number_of_pills=3),
        "number_of_pills",
        "not allowed on heartbeat",
    ),
    "pills_taken on opened": (lambda: opened(ago(minutes=1), pills_taken=1), "pills_taken", "not allowed on opened"),
    "mass missing on opened": (
        lambda: {"type": "opened", "time": iso(ago(minutes=1)), "number_of_pills": 3},
        "mass_of_contents",
        "required for opened",
    ),
    "pills_taken missing on closed": (
        lambda: {"type": "closed", "time": iso(ago(minutes=1)), "number_of_pills": 3, "mass_of_contents": 1.0},
        "pills_taken",
        "required for closed",
    ),
    "pills_taken null on closed": (lambda: closed(ago(minutes=1), taken=None), "pills_taken", "required for closed"),
    "negative mass": (lambda: opened(ago(minutes=1), mass=-0.5), "mass_of_contents", "greater than or equal to 0"),
    "negative pill count": (lambda: opened(ago(minutes=1), pills=-1), "number_of_pills", "greater than or equal to 0"),
    "negative pills_taken": (lambda: closed(ago(minutes=1), taken=-2), "pills_taken", "greater than or equal to 0"),
    "fractional pill count": (lambda: opened(ago(minutes=1), pills=2.5), "number_of_pills", "integer"),
    "pill count as string": (lambda: opened(ago(minutes=1), pills="3"), "number_of_pills", "integer"),
    "mass as boolean": (lambda: opened(ago(minutes=1), mass=True), "mass_of_contents", "number"),
}


@pytest.mark.parametrize(("event", "field", "message"), BAD_EVENTS.values(), ids=BAD_EVENTS.keys())
def test_invalid_event_is_400_naming_the_field(db, event, field, message):
    key = provisioned()

    response = post_events("bottle-1", key, event() if callable(event) else event)

    assert response.status == 400
    problems = [d for d in response.body["details"] if d["field"] == field]
    assert problems, response.body
    assert message in problems[0]["message"]
    assert problems[0]["index"] == 0
    assert nothing_stored(db)


def test_one_bad_event_in_a_batch_stores_none_and_every_problem_is_listed(db):
    key = provisioned()
    batch = [heartbeat(ago(minutes=3)), opened(ago(minutes=2), pills=-1), closed(ago(minutes=1), extra=1), "x"]

    response = post_events("bottle-1", key, {"events": batch})

    assert response.status == 400
    assert response.body["error"] == "invalid events: nothing was stored"
    assert [(d["index"], d["field"]) for d in response.body["details"]] == [
        (1, "number_of_pills"),
        (2, "extra"),
        (3, None),
    ]
    assert nothing_stored(db)


def test_a_field_its_type_does_not_take_is_refused_for_that_alone_and_problems_come_in_field_order(db):
    key = provisioned()
    event = {"type": "heartbeat", "time": "yesterday", "mass_of_contents": -1, "battery": 3}

    response = post_events("bottle-1", key, event)

    assert response.status == 400
    details = response.body["details"]
    assert [(d["index"], d["field"]) for d in details] == [(0, "time"), (0, "mass_of_contents"), (0, "battery")]
    assert "'yesterday' is not an ISO-8601 date-time" in details[0]["message"]
    assert [d["message"] for d in details[1:]] == ["not allowed on heartbeat events", "unknown field"]
    assert nothing_stored(db)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"", "empty"),
        (b"   ", "empty"),
        (b"{not json", "not valid JSON"),
        (b'{"type": "heartbeat", "time": ', "not valid JSON"),
        (b"\xff\xfe\x00", "not UTF-8"),
        (b"hello", "not valid JSON"),
        (
            b'{"type": "opened", "time": "2026-11-21T08:00:00Z", "mass_of_contents": NaN, "number_of_pills": 1}',
            "not valid JSON",
        ),
        (b"[]", "JSON object"),
        (b"42", "JSON object"),
        (b'"heartbeat"', "JSON object"),
        (b"null", "JSON object"),
        (b'{"events": {}}', "invalid request body"),
        (b'{"events": []}', "invalid request body"),
        (b'{"events": [], "device": "x"}', "invalid request body"),
    ],
    ids=[
        "empty",
        "blank",
        "broken",
        "truncated",
        "binary",
        "plain text",
        "NaN",
        "array",
        "number",
        "string",
        "null",
        "events object",
        "events empty",
        "field beside events",
    ],
)
def test_malformed_bodies_are_400_not_500(db, raw, message):
    key = provisioned()
    response = post_events("bottle-1", key, raw=raw)
    assert response.status == 400
    assert message in response.body["error"]
    assert response.body["details"]
    assert nothing_stored(db)


def test_bad_bottle_id_in_the_route_is_400(db):
    response = post_events("bottle 1!", "whatever", heartbeat(ago(minutes=1)))
    assert response.status == 400
    assert response.body["details"] == [
        {"field": "bottle_id", "message": "must be 1-64 characters of A-Z, a-z, 0-9, '_', '-'"}
    ]


def test_too_long_bottle_id_is_400(db):
    assert post_events("b" * 65, "whatever", heartbeat(ago(minutes=1))).status == 400


def test_events_at_the_limits_are_accepted(db):
    key = provisioned()
    events = [
        heartbeat(ago(minutes=-4)),  # 4 minutes ahead: within the allowed clock skew
        heartbeat(ago(days=29, hours=23)),
        opened(ago(minutes=2), pills=0, mass=0, event_id="e" * 64),
        closed(ago(minutes=1), taken=0, pills=0, mass=0.0),
    ]
    response = post_events("bottle-1", key, {"events": events})
    assert response.body == {"stored": 3, "duplicates": 0, "expired": 1}  # the old heartbeat: accepted, not kept


def test_error_body_is_json_with_error_and_details(db):
    key = provisioned()
    response = post_events("bottle-1", key, raw=json.dumps({"type": "x"}).encode())
    assert set(response.body) == {"error", "details"}
    assert all(set(d) == {"index", "field", "message"} for d in response.body["details"])
