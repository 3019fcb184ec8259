"""Every answer the app gives in the tests is checked against openapi.yaml by a strict OpenAPI 3.0 validator
(tests/openapi_responses.py): these tests show the check is strict where schemathesis is lenient (a `null` the schema
does not allow), that it names the route, the status and the schema's complaint, that it is on for every test, and
that a never-opened bottle's `"last_action": null` is what the contract documents."""

import copy
import json
from typing import Any

import azure.functions as func
import pytest

from tests import api, openapi_responses
from tests.openapi_responses import THE_APP, Contract, ResponseOffContract
from tools.http_answers import HttpAnswer
from tools.local_host import LocalHost

pytestmark = pytest.mark.usefixtures("mock_db")
JSON = {"Content-Type": "application/json"}
NEVER_OPENED = {
    "last_heartbeat": None,
    "last_action": None,
    "last_action_time": None,
    "open_since": None,
    "last_dose_time": None,
    "next_dose_due": "2026-11-21T07:00:00.000Z",
}
BOTTLE: dict[str, Any] = {
    "bottle_id": "bottle-1",
    "user_id": "willcross1024",
    "medication": "Cordrazine",
    "schedule": {"times": ["08:00", "20:00"], "timezone": "Europe/Rome"},
    "grace_minutes": 60,
    "provisioned_at": "2026-11-20T07:00:00.000Z",
    "updated_at": "2026-11-20T07:00:00.000Z",
    "status": NEVER_OPENED,
}


def answer(
    body: Any,
    *,
    status: int = 200,
    route: str = "bottles/{bottle_id}",
    method: str = "GET",
    headers: dict[str, str] | None = None,
) -> HttpAnswer:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return HttpAnswer(
        THE_APP, route, method, "/api/bottles/bottle-1", status, JSON if headers is None else headers, raw, False
    )


@pytest.fixture
def before_the_fix() -> Contract:
    """openapi.yaml with `last_action` as it was: `allOf` and `nullable` without `type`, which OpenAPI 3.0 ignores."""
    document = copy.deepcopy(openapi_responses.contract().document)
    status = document["components"]["schemas"]["BottleStatus"]["properties"]["status"]["properties"]
    status["last_action"] = {"allOf": [{"$ref": "#/components/schemas/NullableAction"}], "nullable": True}
    document["components"]["schemas"]["NullableAction"] = {"type": "string", "enum": ["opened", "closed"]}
    return Contract(document)


def test_a_never_opened_bottle_s_null_last_action_is_documented() -> None:
    assert openapi_responses.contract().problem(answer(BOTTLE)) is None
    opened = {**BOTTLE, "status": {**NEVER_OPENED, "last_action": "opened"}}
    assert openapi_responses.contract().problem(answer(opened)) is None


def test_the_check_is_strict_where_the_schema_says_nullable_without_a_type(before_the_fix: Contract) -> None:
    problem = before_the_fix.problem(answer(BOTTLE))
    assert problem is not None
    assert "None for not nullable at ['status']['last_action']" in problem, problem


@pytest.mark.parametrize(
    ("body", "status", "headers", "complaint"),
    [
        ({**BOTTLE, "device_key_hash": "x"}, 200, JSON, "Additional properties are not allowed"),
        ({**BOTTLE, "updated_at": "2026-11-20T07:00:00Z"}, 200, JSON, "does not match"),
        ({**BOTTLE, "status": {**NEVER_OPENED, "last_action": "shaken"}}, 200, JSON, "is not one of"),
        ({**BOTTLE, "grace_minutes": "60"}, 200, JSON, "is not of type 'integer'"),
        (BOTTLE, 201, JSON, "status 201 is not documented"),
        (BOTTLE, 200, {"Content-Type": "text/plain"}, "Content-Type text/plain is not documented"),
        (b"{", 200, JSON, "the body is not JSON"),
        ({"error": "busy", "details": []}, 503, JSON, "required header Retry-After is missing"),
        ({"error": "no key"}, 401, JSON, "a body where none is documented"),
    ],
)
def test_each_kind_of_answer_off_the_contract_is_named(
    body: Any, status: int, headers: dict[str, str], complaint: str
) -> None:
    problem = openapi_responses.contract().problem(answer(body, status=status, headers=headers))
    assert problem is not None
    assert complaint in problem, problem


def test_answers_of_routes_and_methods_the_contract_does_not_document_are_left_to_the_route_tests() -> None:
    contract = openapi_responses.contract()
    assert contract.problem(answer({"anything": 1}, route="bottles/{bottle_id}/history")) is None
    assert contract.problem(answer({"anything": 1}, method="DELETE")) is None


def test_a_documented_answer_passes_through_the_host_and_is_seen(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[HttpAnswer] = []
    monkeypatch.setattr(openapi_responses, "contract", lambda: _Spy(seen))
    api.provisioned("bottle-1")
    response = api.get_bottle("bottle-1")
    assert response.status == 200
    assert response.body["status"]["last_action"] is None
    assert [(a.route, a.method, a.status) for a in seen] == [
        ("bottles/{bottle_id}", "PUT", 201),
        ("bottles/{bottle_id}", "GET", 200),
    ]


def test_an_answer_off_the_contract_fails_the_request_that_got_it(
    monkeypatch: pytest.MonkeyPatch, before_the_fix: Contract
) -> None:
    """The check is on in every test (installed when the tests package is imported): the request that got the
    answer raises, naming the route, the status and the schema's complaint."""
    monkeypatch.setattr(openapi_responses, "contract", lambda: before_the_fix)
    api.provisioned("bottle-1")
    with pytest.raises(ResponseOffContract) as raised:
        api.get_bottle("bottle-1")
    message = str(raised.value)
    assert message.startswith("GET /api/bottles/bottle-1 (route bottles/{bottle_id}): the function answered 200")
    assert "['status']['last_action']" in message
    assert message in openapi_responses.complaints()


def test_a_scratch_app_s_answers_are_not_the_contract() -> None:
    app = func.FunctionApp(http_auth_level=func.AuthLevel.ANONYMOUS)

    @app.route(route="bottles/{bottle_id}", methods=["GET"])
    def scratch_bottle(req: func.HttpRequest) -> func.HttpResponse:
        return func.HttpResponse("not a bottle", status_code=299)

    host = LocalHost.for_app_object(app)
    response = host.handle("GET", "/api/bottles/x", headers={}, params={}, body=b"")
    assert (response.status_code, response.get_body()) == (299, b"not a bottle")


class _Spy:
    """A contract that allows everything and remembers what it saw."""

    def __init__(self, seen: list[HttpAnswer]) -> None:
        self.seen = seen

    def problem(self, answer: HttpAnswer) -> str | None:
        self.seen.append(answer)
        return None
