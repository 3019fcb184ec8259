"""Input an attacker (or a broken device) sends: every case gets a clear 4xx naming what was wrong, stores
nothing, and never raises; an error nobody foresaw is a JSON 500 whose log line carries no request data."""

import base64
import logging
from datetime import UTC, datetime
from typing import Any

import pytest

from functions import notifications as notification_functions
from shared.bottles import provisioning
from shared.devices.heartbeat_document import heartbeat_slots
from shared.store import schema
from tests import invoke
from tests.api import SPEC, ago, get_bottle, heartbeat, iso, opened, post_events, provisioned, put_bottle
from tests.report_client import get_reports


def nothing_stored(db: Any, bottle_id: str = "bottle-1") -> bool:
    beats = db[schema.BOTTLE_HEARTBEATS].find_one({"_id": bottle_id}) or {}
    bottle = db[schema.BOTTLES].find_one({"_id": bottle_id}) or {}
    return (
        db[schema.BOTTLE_ACTIONS].count_documents({}) == 0
        and not heartbeat_slots(beats)
        and bottle.get("last_action") is None
    )


def details(response: Any) -> list[tuple[Any, Any]]:
    return [(d.get("index"), d["field"]) for d in response.body["details"]]


# --- numbers the store cannot hold -------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["number_of_pills", "pills_taken"])
@pytest.mark.parametrize("value", [2**63, 2**70, 10**30, 10_001])
def test_counts_beyond_any_bottle_are_400_and_the_batch_stores_nothing(db, field, value):
    key = provisioned()
    closed = {**opened(ago(minutes=1)), "type": "closed", "pills_taken": 1, field: value}

    response = post_events("bottle-1", key, {"events": [heartbeat(ago(minutes=2)), closed]})

    assert response.status == 400
    assert details(response) == [(1, field)]
    assert "less than or equal to 10000" in response.body["details"][0]["message"]
    assert nothing_stored(db)  # not even the valid heartbeat before it


@pytest.mark.parametrize("literal", [b"9" * 400, b"1e400", b"-1e400", b"100000.5"])
def test_masses_beyond_a_float_or_a_bottle_are_400(db, literal):
    key = provisioned()
    raw = b'{"type":"opened","time":"%s","number_of_pills":3,"mass_of_contents":%s}' % (
        iso(ago(minutes=1)).encode(),
        literal,
    )

    response = post_events("bottle-1", key, raw=raw)

    assert response.status == 400
    assert details(response) == [(0, "mass_of_contents")]
    assert nothing_stored(db)


def test_an_integer_literal_longer_than_python_parses_is_400(mock_db):
    response = post_events("bottle-1", "k", raw=b'{"type":"heartbeat","time":"x","n":' + b"9" * 5000 + b"}")
    assert response.status == 400
    assert response.body["error"] == "body is not valid JSON"


# --- times outside the representable range -------------------------------------------------------------------


@pytest.mark.parametrize("time", ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00"])
def test_event_times_whose_offset_leaves_the_range_are_400(db, time):
    key = provisioned()
    response = post_events(
        "bottle-1", key, {"events": [heartbeat(ago(minutes=1)), {"type": "heartbeat", "time": time}]}
    )

    assert response.status == 400
    assert details(response) == [(1, "time")]
    assert "outside the range of representable times" in response.body["details"][0]["message"]
    assert nothing_stored(db)


def notifications(user_id: str, **params: str) -> Any:
    return invoke.http(notification_functions.get_user_notifications, params=params, route_params={"user_id": user_id})


EDGES = ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00"]


@pytest.mark.parametrize("time", EDGES)
def test_a_since_outside_the_range_is_400(mock_db, time):
    response = notifications("u1", since=time)
    assert response.status_code == 400
    assert b'"field":"since"' in response.get_body()


@pytest.mark.parametrize("time", EDGES)
@pytest.mark.parametrize("bound", ["from", "to"])
def test_a_report_bound_outside_the_range_is_400(mock_db, time, bound):
    params = {"from": "2026-01-01T00:00:00Z", "to": "2026-01-02T00:00:00Z", bound: time}
    response = get_reports("u1", **params)
    assert response.status == 400
    assert bound in [d["field"] for d in response.body["details"]]


@pytest.mark.parametrize("time", EDGES)
def test_a_forged_page_token_outside_the_range_is_400(mock_db, time):
    token = base64.urlsafe_b64encode(f"{time}|b1|late_dose|x".encode()).decode().rstrip("=")
    response = notifications("u1", page=token)
    assert response.status_code == 400
    assert b'"field":"page"' in response.get_body()


@pytest.mark.parametrize("time", ["0001-01-01T00:00:00Z", "9999-12-31T23:59:59.999Z"])
def test_the_extreme_representable_times_are_answered_without_error(mock_db, time):
    assert notifications("u1", since=time).status_code == 200
    assert get_reports("u1", **{"from": "0001-01-01T00:00:00Z", "to": "0001-01-01T05:00:00Z"}).status == 200
    assert get_reports("u1", **{"from": "9999-12-31T00:00:00Z", "to": "9999-12-31T23:59:59.999Z"}).status == 200


# --- times in the contract's format only ------------------------------------------------------------------------

# ISO-8601 (and Python's fromisoformat) takes these; the contract (openapi.yaml `Instant`: `Z` or `+hh:mm`) does not.
OFF_CONTRACT = {
    "an offset with seconds and a fraction": ("+23:59:59.999999", "UTC offset"),
    "an offset with seconds": ("+01:00:30", "UTC offset"),
    "an offset of 24 hours": ("+24:00", "UTC offset"),
    "an offset without a colon": ("+0100", "UTC offset"),
    "an offset of hours only": ("+01", "UTC offset"),
    "a lower-case z": ("z", "UTC offset"),
}


def off_contract(offset: str, at: str = "T03:00:00") -> str:
    return f"{iso(ago(minutes=2))[:10]}{at}{offset}"


@pytest.mark.parametrize(("offset", "said"), OFF_CONTRACT.values(), ids=OFF_CONTRACT.keys())
def test_an_event_time_off_the_contract_s_format_is_400_and_stores_nothing(db, offset, said):
    key = provisioned()
    event = {"type": "heartbeat", "time": off_contract(offset)}

    response = post_events("bottle-1", key, {"events": [heartbeat(ago(minutes=1)), event]})

    assert response.status == 400
    assert details(response) == [(1, "time")]
    assert said in response.body["details"][0]["message"]
    assert nothing_stored(db)


@pytest.mark.parametrize(
    "time",
    ["2026-11-24 03:00:00Z", "2026-11-24T03:00Z", "20261124T030000Z", "2026-W48-2T03:00:00Z", "2026-11-24T03Z"],
)
def test_other_iso_8601_spellings_are_400_naming_the_format(mock_db, time):
    key = provisioned()
    response = post_events("bottle-1", key, {"type": "heartbeat", "time": time})

    assert response.status == 400
    assert details(response) == [(0, "time")]
    assert "Z' or '+hh:mm'" in response.body["details"][0]["message"]


@pytest.mark.parametrize("offset", ["Z", "+00:00", "-00:00", "+05:45", "-09:30", "+14:00", "-12:00"])
@pytest.mark.parametrize("fraction", ["", ".5", ".123", ".123456", ".123456789"])
def test_the_contract_s_own_spellings_are_accepted(mock_db, offset, fraction):
    key = provisioned()
    sent = ago(minutes=1)
    zone = UTC if offset in ("Z", "+00:00", "-00:00") else datetime.strptime(offset, "%z").tzinfo
    local = sent.astimezone(zone).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%S")

    response = post_events("bottle-1", key, {"type": "heartbeat", "time": f"{local}{fraction}{offset}"})

    assert response.status == 202, response.body


@pytest.mark.parametrize(("offset", "said"), OFF_CONTRACT.values(), ids=OFF_CONTRACT.keys())
def test_a_query_time_off_the_contract_s_format_is_400_naming_the_parameter(mock_db, offset, said):
    since = notifications("u1", since=off_contract(offset))
    bounds = {"from": "2026-01-01T00:00:00Z", "to": "2026-01-02T00:00:00Z"}
    start = get_reports("u1", **{**bounds, "from": off_contract(offset)})
    end = get_reports("u1", **{**bounds, "to": off_contract(offset)})

    assert since.status_code == 400
    assert b'"field":"since"' in since.get_body()
    assert said.encode() in since.get_body()
    assert (start.status, [d["field"] for d in start.body["details"]]) == (400, ["from"])
    assert (end.status, [d["field"] for d in end.body["details"]]) == (400, ["to"])


# --- nesting ---------------------------------------------------------------------------------------------------


NESTED = [
    b"[" * 100_000 + b"]" * 100_000,  # deeper than the parser's recursion limit
    b'{"events":' + b"[" * 17 + b"]" * 17 + b"}",  # one level past the limit
    b'{"type":"heartbeat","time":"2026-01-01T00:00:00Z","event_id":' + b'{"a":' * 5000 + b"1" + b"}" * 5001,
]


@pytest.mark.parametrize("body", NESTED, ids=["array-100k", "events-17", "field-5k"])
def test_deep_nesting_on_the_device_route_is_400(db, body):
    key = provisioned()
    response = post_events("bottle-1", key, raw=body)
    assert response.status == 400
    assert response.body["error"] == "body nests too deeply"
    assert nothing_stored(db)


@pytest.mark.parametrize("body", NESTED, ids=["array-100k", "events-17", "field-5k"])
def test_deep_nesting_on_provisioning_is_400(db, body):
    response = put_bottle("bottle-9", raw=body)
    assert response.status == 400
    assert response.body["error"] == "body nests too deeply"
    assert db[schema.BOTTLES].count_documents({}) == 0


def test_the_deepest_legal_request_is_accepted(db):
    key = provisioned()
    assert post_events("bottle-1", key, {"events": [heartbeat(ago(minutes=1))]}).status == 202


# --- time zones ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("zone", ["localtime", "Factory", "posixrules", "posix/Europe/Rome", "Europe/Rome ", ""])
def test_zones_that_are_not_places_are_400(db, zone):
    response = put_bottle("bottle-1", {**SPEC, "schedule": {"times": ["08:00"], "timezone": zone}})
    assert response.status == 400
    assert details(response) == [(None, "schedule.timezone")]
    assert db[schema.BOTTLES].count_documents({}) == 0


@pytest.mark.parametrize("zone", ["Europe/Rome", "America/Argentina/Buenos_Aires", "UTC", "Asia/Kolkata"])
def test_real_zones_are_accepted(db, zone):
    assert put_bottle("bottle-1", {**SPEC, "schedule": {"times": ["08:00"], "timezone": zone}}).status == 201


# --- media types -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content_type",
    ["text/plain", "application/x-www-form-urlencoded", "application/json; charset=latin-1", "application/xml"],
)
def test_a_body_declared_as_anything_but_json_is_415(db, content_type):
    key = provisioned()
    response = post_events("bottle-1", key, heartbeat(ago(minutes=1)), content_type=content_type)

    assert response.status == 415
    assert response.body["details"] == [{"field": "Content-Type", "message": "must be application/json"}]
    assert nothing_stored(db)
    assert put_bottle("bottle-2", content_type=content_type).status == 415


@pytest.mark.parametrize(
    "content_type", [None, "application/json", "Application/JSON; charset=UTF-8", "application/vnd.x+json"]
)
def test_json_or_no_content_type_is_read_as_json(db, content_type):
    key = provisioned()
    assert post_events("bottle-1", key, heartbeat(ago(minutes=1)), content_type=content_type).status == 202
    assert put_bottle("bottle-2", content_type=content_type).status == 201


# --- the catch-all ---------------------------------------------------------------------------------------------


def test_an_unforeseen_error_is_a_json_500_logged_without_request_data(mock_db, monkeypatch, caplog):
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise KeyError("device_key=s3cr3t body={...}")

    monkeypatch.setattr(provisioning, "_sync_heartbeat_document", broken)
    with caplog.at_level(logging.ERROR, logger="functions.responses"):
        response = put_bottle("bottle-1")

    assert response.status == 500
    assert response.headers.get("Content-Type", "application/json").startswith("application/json")
    assert response.body["error"] == "internal error; it has been logged"
    error_id = response.body["error_id"]
    [record] = caplog.records
    assert error_id in record.getMessage()
    assert "KeyError" in record.getMessage()
    assert "provisioning.py" in record.getMessage()
    assert "s3cr3t" not in record.getMessage()
    assert record.exc_info is None  # a traceback with the message would leak it


def test_a_bottle_is_still_readable_after_hostile_requests(db):
    key = provisioned()
    post_events("bottle-1", key, raw=b"[" * 100_000)
    post_events("bottle-1", key, {"type": "heartbeat", "time": EDGES[0]})
    assert get_bottle("bottle-1").status == 200
