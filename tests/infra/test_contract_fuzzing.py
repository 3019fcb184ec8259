"""Contract fuzzing: schemathesis generates requests from openapi.yaml, valid ones and invalid ones, and sends each
through the local server's WSGI layer (`tools/serve.py`: the Functions host's routing and its decoding of paths and
query strings) to the app's registered functions, on a store seeded with bottles, events, reports and
notifications. Every answer must be documented: no 5xx, a documented status code and content type, a body that
matches its schema, the documented headers (`Retry-After`), and invalid input refused with a documented 4xx.

Generation is derandomized and the server clock fixed, so every run sends the same requests. Run it alone with
`.venv/bin/python -m pytest tests/infra/test_contract_fuzzing.py`; `CONTRACT_FUZZ_EXAMPLES=500` in front fuzzes
longer."""

import json
import os
import zlib
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import azure.functions as func
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from schemathesis.core.parameters import ParameterLocation

from shared.instants import parse_instant
from shared.notifications.documents import KINDS
from shared.store import schema as schema_names
from tests.api import SPEC
from tests.checking import World
from tests.report_client import aggregate, use_change_source_of
from tools.local_host import LocalHost
from tools.serve import wsgi_app

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

Case = schemathesis.Case[Any]
ROOT = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 5, 4, 12, 0, tzinfo=UTC)  # the server clock while fuzzing
START = NOW - timedelta(days=2)
USER_ID = str(SPEC["user_id"])
BOTTLE_ID = "fuzz-times"  # doses at 08:00 and 20:00 Europe/Rome
INTERVAL_BOTTLE_ID = "fuzz-every-12h"
FUNCTION_KEY = "fuzz-function-key"
EXAMPLES_PER_OPERATION = int(os.environ.get("CONTRACT_FUZZ_EXAMPLES", "60"))
CHECKS = [
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_schema_conformance",
    "response_headers_conformance",
    "negative_data_rejection",
]
# Invalid input must get one of the documented refusals (413: a batch of more than 500 events; 405: a method the
# route does not serve).
REFUSALS = ["400", "401", "404", "405", "413", "415"]


def _instant(offset_s: int, zone_minutes: int) -> str:
    return (NOW + timedelta(seconds=offset_s)).astimezone(timezone(timedelta(minutes=zone_minutes))).isoformat()


# Instants mostly near the fixed clock, so that generated events fall in the accepted window (30 days back, 5
# minutes ahead) and report ranges overlap the two seeded days; sometimes anywhere in years 1-9999, and in years
# of fewer than four digits.
_NEAR_NOW = st.builds(
    _instant,
    st.one_of(st.integers(-3 * 24 * 3600, 10 * 60), st.integers(-32 * 24 * 3600, 10 * 60)),
    st.sampled_from([0, 60, 120, -300, 330, 345, -570, 840, -720]),
)
_ZONES = st.sampled_from([UTC, timezone(timedelta(hours=14)), timezone(-timedelta(hours=12))])
_ANYWHERE = st.datetimes(timezones=_ZONES).map(datetime.isoformat)
_EARLY = st.datetimes(max_value=datetime(999, 12, 31), timezones=_ZONES).map(datetime.isoformat)
schemathesis.openapi.format("date-time", st.one_of(_NEAR_NOW, _NEAR_NOW, _ANYWHERE, _EARLY))

_CONFIG = schemathesis.Config.from_dict({"checks": {"negative_data_rejection": {"expected-statuses": REFUSALS}}})
schema = schemathesis.openapi.from_path(ROOT / "openapi.yaml", config=_CONFIG)
schema.config.checks.update(included_check_names=CHECKS)


def _seed(world: World) -> None:
    """Two days of one user's two bottles: heartbeats with a silent gap, doses with one missed, a bottle left
    open; the checks and the report consumer run, so every read has something to show."""
    world.at(START)
    world.provision(BOTTLE_ID)
    world.provision(INTERVAL_BOTTLE_ID, schedule={"every_hours": 12}, medication="Hyronalin")
    doses = {START + timedelta(hours=h) for h in (6, 18, 42)}  # 18:00Z and 06:00Z are 20:00 and 08:00 in Rome
    for hour in range(47):
        world.at(START + timedelta(hours=hour))
        if hour not in (13, 14, 15):  # silent for three hours
            world.heartbeat(BOTTLE_ID)
            world.heartbeat(INTERVAL_BOTTLE_ID)
        if world.now in doses:
            world.dose(BOTTLE_ID)
        if hour % 12 == 0:
            world.dose(INTERVAL_BOTTLE_ID)
        world.check("silent")
        world.check("late_dose")
    world.at(NOW - timedelta(minutes=20)).open(BOTTLE_ID)
    world.at(NOW)
    world.check("left_open")
    aggregate()


Handler = Callable[[func.HttpRequest], func.HttpResponse]


def _as_waitress_frames(app: "WSGIApplication") -> "WSGIApplication":
    """Werkzeug's test client (schemathesis' WSGI transport) leaves the query out of `REQUEST_URI`; waitress sets
    it to the request target as sent, query included, and `wsgi_app` reads the query from there."""

    def framed(environ: "WSGIEnvironment", start_response: "StartResponse") -> Iterable[bytes]:
        target, query = environ["REQUEST_URI"], environ.get("QUERY_STRING", "")
        if query and "?" not in target:
            environ = {**environ, "REQUEST_URI": f"{target}?{query}"}
        return app(environ, start_response)

    return framed


@pytest.fixture
def fuzzed_app(
    registered_functions, mock_db, monkeypatch
) -> Iterator[tuple["WSGIApplication", str, schemathesis.CheckFunction]]:
    """The app as the local server runs it, on a seeded store with the clock at NOW, function keys checked as
    the Functions host checks them; the device key of BOTTLE_ID; and the notifications check on that store."""
    use_change_source_of(mock_db, monkeypatch)
    world = World(mock_db, START)
    try:
        _seed(world)
        kinds = {n["kind"] for n in mock_db[schema_names.NOTIFICATIONS].find()}
        assert kinds == {"late_dose", "left_open", "silent"}, "the seed should notify every kind"
        assert mock_db[schema_names.USER_DAILY_REPORTS].count_documents({"user_id": USER_ID}) == 3
        host = LocalHost.load()
        host.function_key = FUNCTION_KEY  # checked as the host in Azure checks it (`func start` does not)
        yield _as_waitress_frames(wsgi_app(host)), world.keys[BOTTLE_ID], _notifications_as_stored(mock_db)
    finally:
        world.stop()


def _notifications_as_stored(db: Any) -> schemathesis.CheckFunction:
    """A check beyond the schema, for the first page of a user's notifications: exactly the newest ones created
    at or after `since`, of the kinds asked for, `limit` of them, as the store holds them."""

    def check(ctx: schemathesis.CheckContext, response: schemathesis.Response, case: Case) -> None:
        query = case.query or {}
        if not case.operation.path.endswith("/notifications") or response.status_code != 200 or query.get("page"):
            return
        since = parse_instant(query["since"]) if query.get("since") else None  # an empty value is absent
        kinds = {k.strip() for k in str(query["kind"]).split(",")} if query.get("kind") else set(KINDS)
        limit = int(query["limit"]) if query.get("limit") not in (None, "") else 50
        stored = db[schema_names.NOTIFICATIONS].find({"user_id": case.path_parameters["user_id"]})
        chosen = [n for n in stored if n["kind"] in kinds and (since is None or n["created_at"] >= since)]
        newest = sorted(chosen, key=lambda n: (n["created_at"], n["_id"]), reverse=True)[:limit]
        answered = [n["id"] for n in response.json()["notifications"]]
        assert answered == [n["_id"] for n in newest], f"since={query.get('since')!r}: {answered}"

    return check


def _mostly(value: Any, salt: str) -> bool:
    """A stable three-in-four choice by the generated value: the same in every process (hash() is salted per
    process) and whatever the order of its keys (schemathesis' may follow set order)."""
    canonical = json.dumps(value, sort_keys=True, default=lambda other: type(other).__name__)  # NotSet: no body
    return zlib.crc32(f"{salt}:{canonical}".encode()) % 4 != 0


def _aim(case: Case, device_key: str) -> None:
    """Point most valid requests at the seeded data with the right keys (a random id names nothing, a random
    key opens nothing); the rest go as generated, and invalid parts are never touched: each must be refused."""
    meta = case.meta
    assert meta is not None
    path = case.path_parameters
    if path is not None and not meta.is_negative_at(ParameterLocation.PATH):
        if "bottle_id" in path and _mostly(path["bottle_id"], "bottle"):
            path["bottle_id"] = BOTTLE_ID if _mostly(path["bottle_id"], "which") else INTERVAL_BOTTLE_ID
        if "user_id" in path and _mostly(path["user_id"], "user"):
            path["user_id"] = USER_ID
    query = case.query
    if query and not meta.is_negative_at(ParameterLocation.QUERY) and _mostly(query, "query"):
        if "from" in query:
            _in_order(query)
        query.pop("page", None)  # a generated page token is never one the app issued
    if not meta.is_negative_at(ParameterLocation.HEADER):
        headers = case.headers if case.headers is not None else {}
        name, key = ("X-Device-Key", device_key) if case.method == "POST" else ("x-functions-key", FUNCTION_KEY)
        if _mostly((headers.get(name), case.body, case.query), "key"):
            headers[name] = key
        case.headers = headers


def _in_order(query: dict[str, Any]) -> None:
    """A report range whose `to` is not after its `from` (generated apart, they often are not) ends a day later."""
    try:
        start, end = datetime.fromisoformat(query["from"]), datetime.fromisoformat(query["to"])
        if end <= start:
            query["to"] = (start + timedelta(days=1)).isoformat()
    except (KeyError, TypeError, ValueError, OverflowError):
        pass  # left as generated


@schema.parametrize()
@settings(
    max_examples=EXAMPLES_PER_OPERATION,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_every_answer_to_generated_requests_is_documented(case: Case, fuzzed_app) -> None:
    app, device_key, notifications_as_stored = fuzzed_app
    _aim(case, device_key)
    case.call_and_validate(app=app, additional_checks=[notifications_as_stored])
