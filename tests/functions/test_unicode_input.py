"""Text that is not Unicode: a lone UTF-16 surrogate ("\\ud800" in JSON, which Python's decoder lets through)
cannot be encoded (UTF-8, BSON, a regex engine, a hash). In any field of a body, or in any parameter or header a
caller hands the function, it is a 400 naming the field, and nothing is stored. Only a body can carry one through
the Functions host: the protocol's strings are UTF-8, so the host cannot send one in a parameter or header (the
last test); the function's own defence there is tested by handing it the request directly."""

import json
from typing import Any

import azure.functions as func
import pytest

from functions import bottles, device_events, notifications, reports
from shared.devices.heartbeat_document import heartbeat_slots
from shared.store import schema
from tests import invoke
from tests.api import SPEC, Response, ago, heartbeat, iso, opened, post_events, provisioned, put_bottle
from tools.host.bindings import NotSendable

LONE = "\ud800"


def raw(payload: Any) -> bytes:
    """JSON with the lone surrogate escaped, as a client (or an attacker) sends it."""
    return json.dumps(payload).encode()


def fields(response: Response) -> list[Any]:
    return [d["field"] for d in response.body["details"]]


SPEC_CASES = {
    "user_id": ({**SPEC, "user_id": f"u{LONE}"}, "user_id"),
    "medication": ({**SPEC, "medication": f"Cordrazine{LONE}"}, "medication"),
    "timezone": ({**SPEC, "schedule": {"times": ["08:00"], "timezone": LONE}}, "schedule.timezone"),
    "a dose time": ({**SPEC, "schedule": {"times": ["08:00", f"2{LONE}"], "timezone": "UTC"}}, "schedule.times[1]"),
    "a member name": ({**SPEC, f"x{LONE}": 1}, None),
    "a nested member name": ({**SPEC, "schedule": {"every_hours": 8, LONE: 1}}, "schedule"),
}


@pytest.mark.parametrize(("spec", "field"), SPEC_CASES.values(), ids=SPEC_CASES.keys())
def test_a_lone_surrogate_anywhere_in_a_bottle_is_400_naming_the_field(mock_db, spec, field):
    response = put_bottle("bottle-1", raw=raw(spec))

    assert response.status == 400
    assert fields(response) == [field]
    assert "surrogate" in response.body["details"][0]["message"]
    assert mock_db[schema.BOTTLES].count_documents({}) == 0


def test_a_lone_surrogate_in_an_update_leaves_the_bottle_as_it_was(mock_db):
    provisioned()
    response = put_bottle("bottle-1", raw=raw({**SPEC, "schedule": {"times": ["09:00"], "timezone": LONE}}))

    assert response.status == 400
    assert mock_db[schema.BOTTLES].find_one({"_id": "bottle-1"})["schedule"]["timezone"] == SPEC["schedule"]["timezone"]


# Made when the test runs (functions), at the test's own instant of the clock (tests/wall_clock.py).
EVENT_CASES = {
    "time": (
        lambda: {"events": [heartbeat(ago(minutes=2)), {**heartbeat(ago(minutes=1)), "time": LONE}]},
        "events[1].time",
    ),
    "type": (lambda: {**heartbeat(ago(minutes=1)), "type": f"heartbeat{LONE}"}, "type"),
    "event_id": (lambda: {**opened(ago(minutes=1)), "event_id": f"e{LONE}"}, "event_id"),
    "a member name": (lambda: {**heartbeat(ago(minutes=1)), LONE: 1}, None),
}


@pytest.mark.parametrize(("payload", "field"), EVENT_CASES.values(), ids=EVENT_CASES.keys())
def test_a_lone_surrogate_anywhere_in_an_event_is_400_naming_the_field_and_stores_nothing(mock_db, payload, field):
    key = provisioned()

    response = post_events("bottle-1", key, raw=raw(payload()))

    assert response.status == 400
    assert fields(response) == [field]
    assert mock_db[schema.BOTTLE_ACTIONS].count_documents({}) == 0
    assert not heartbeat_slots(mock_db[schema.BOTTLE_HEARTBEATS].find_one({"_id": "bottle-1"}))


def call(function: Any, *, route: dict[str, str], params: dict[str, str] | None = None, **options: Any) -> Response:
    """The function's answer to a request handed to it directly (not through the Functions host, which cannot send
    a lone surrogate in a parameter or header: `test_the_functions_host_cannot_send_a_lone_surrogate_...`)."""
    request = func.HttpRequest(
        method=options.get("method", "GET"),
        url="/api/x",
        headers=options.get("headers", {}),
        params=params or {},
        route_params=route,
        body=options.get("body", b""),
    )
    answer = function.build().get_user_function()(request)
    return Response(answer.status_code, json.loads(answer.get_body()), dict(answer.headers))


# Parameters with a time are made when the test runs (a function), at the test's clock.
PARAMETER_CASES = {
    "notifications since": (notifications.get_user_notifications, {"user_id": "u"}, {"since": LONE}, "since"),
    "notifications kind": (notifications.get_user_notifications, {"user_id": "u"}, {"kind": f"silent{LONE}"}, "kind"),
    "notifications page": (notifications.get_user_notifications, {"user_id": "u"}, {"page": LONE}, "page"),
    "notifications cursor": (notifications.get_user_notifications, {"user_id": "u"}, {"cursor": LONE}, "cursor"),
    "notifications limit": (notifications.get_user_notifications, {"user_id": "u"}, {"limit": f"1{LONE}"}, "limit"),
    "reports from": (
        reports.get_user_reports,
        {"user_id": "u"},
        lambda: {"from": LONE, "to": iso(ago(hours=0))},
        "from",
    ),
    "reports granularity": (
        reports.get_user_reports,
        {"user_id": "u"},
        lambda: {"from": iso(ago(hours=2)), "to": iso(ago(hours=0)), "granularity": f"day{LONE}"},
        "granularity",
    ),
    "a user id": (reports.get_user_reports, {"user_id": f"u{LONE}"}, {}, "user_id"),
    "a bottle id": (bottles.get_bottle, {"bottle_id": f"b{LONE}"}, {}, "bottle_id"),
}


@pytest.mark.parametrize(("function", "route", "params", "field"), PARAMETER_CASES.values(), ids=PARAMETER_CASES.keys())
def test_a_lone_surrogate_in_a_parameter_is_400_naming_it(mock_db, function, route, params, field):
    response = call(function, route=route, params=params() if callable(params) else params)

    assert response.status == 400
    assert fields(response) == [field]


def test_a_lone_surrogate_in_rotate_key_is_400_and_rotates_nothing(mock_db):
    key = provisioned()
    response = call(
        bottles.provision_bottle, method="PUT", route={"bottle_id": "bottle-1"}, params={"rotate_key": f"true{LONE}"},
        body=raw(SPEC),
    )  # fmt: skip

    assert (response.status, fields(response)) == (400, ["rotate_key"])
    assert post_events("bottle-1", key, opened(ago(minutes=1))).status == 202  # the key still works


def test_a_lone_surrogate_in_the_device_key_is_400_naming_the_header(mock_db):
    key = provisioned()
    response = call(
        device_events.post_events,
        method="POST",
        route={"bottle_id": "bottle-1"},
        headers={"X-Device-Key": key + LONE},
        body=raw(heartbeat(ago(minutes=1))),
    )

    assert response.status == 400
    assert [f.lower() for f in fields(response)] == ["x-device-key"]
    assert not heartbeat_slots(mock_db[schema.BOTTLE_HEARTBEATS].find_one({"_id": "bottle-1"}))


def test_a_surrogate_pair_is_one_character_and_accepted(mock_db):
    body = json.dumps({**SPEC, "medication": "Cordrazine \U0001f48a"}).encode()  # escaped as "\ud83d\udc8a"
    assert b"\\ud83d\\udc8a" in body

    response = put_bottle("bottle-1", raw=body)

    assert response.status == 201
    assert response.body["medication"] == "Cordrazine \U0001f48a"


@pytest.mark.parametrize(
    ("where", "request_parts"),
    [
        ("query parameter 'since'", {"params": {"since": LONE}, "route_params": {"user_id": "u"}}),
        ("route parameter 'user_id'", {"route_params": {"user_id": f"u{LONE}"}}),
        ("header 'X-Device-Key'", {"headers": {"X-Device-Key": f"k{LONE}"}, "route_params": {"user_id": "u"}}),
    ],
)
def test_the_functions_host_cannot_send_a_lone_surrogate_in_a_parameter_or_header(mock_db, where, request_parts):
    with pytest.raises(NotSendable, match=f"cannot send the {where}"):
        invoke.http(notifications.get_user_notifications, **request_parts)
