"""Every HTTP answer the app gives in the test suite, checked against openapi.yaml by a strict OpenAPI 3.0
validator (openapi-schema-validator's `OAS30StrictValidator`, formats checked): the status must be one the operation
documents, a documented body must be there with its media type and match the schema (`nullable`, `enum`,
`pattern`, `additionalProperties: false` and `date-time` all enforced), an undocumented body must be absent, and a
documented required header present. Only the app itself (function_app.py at the repository's root) is checked:
scratch apps that tests build are not the contract.

`install()` (called when the tests package is imported, tests/__init__.py) hooks the check into every local host
of the process (`tools.local_host.observe_http_answers`): an answer off the contract raises `ResponseOffContract`
on the thread that asked for it, so the test that made the request fails, naming the route, the status and the
schema's complaint. schemathesis (tests/infra/test_contract_fuzzing.py) checks what it generates; this checks what
every other test asks."""

import json
import threading
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tools.http_answers import HttpAnswer, observe_http_answers

if TYPE_CHECKING:  # imported when the first answer is checked: importing the tests package stays cheap
    from jsonschema.exceptions import ValidationError
    from openapi_schema_validator import OAS30StrictValidator

APP_ROOT = Path(__file__).resolve().parents[1]  # the folder of function_app.py and openapi.yaml
OPENAPI = APP_ROOT / "openapi.yaml"
_BASE = "urn:pillbottle:openapi"  # the document's URI in the validators' registry: its own $refs resolve in it
THE_APP = (str(APP_ROOT.resolve()), "function_app.py")


class ResponseOffContract(AssertionError):
    """An answer of the app that openapi.yaml does not allow."""


def _pointer(*parts: str) -> str:
    """A JSON pointer to the object at `parts` (RFC 6901 escapes)."""
    return "".join("/" + part.replace("~", "~0").replace("/", "~1") for part in parts)


class Contract:
    """openapi.yaml's operations and the strict validators of their response bodies (compiled once each)."""

    def __init__(self, document: Mapping[str, Any]) -> None:
        from referencing import Registry, Resource
        from referencing.jsonschema import DRAFT4

        self.document = document
        resource = Resource.from_contents(document, default_specification=DRAFT4)
        self._registry: Registry[Any] = Registry().with_resource(_BASE, resource)
        self._validators: dict[str, OAS30StrictValidator] = {}
        self._lock = threading.Lock()

    @classmethod
    def load(cls, path: Path = OPENAPI) -> "Contract":
        import yaml

        return cls(yaml.safe_load(path.read_text(encoding="utf-8")))

    def problem(self, answer: HttpAnswer) -> str | None:
        """What is wrong with `answer` by the contract, or None (also for a route or method it does not document,
        which schemathesis' checks and the route tests cover)."""
        path, method = _openapi_path(answer.route), answer.method.lower()
        operation = self.document["paths"].get(path, {}).get(method)
        if operation is None:
            return None
        responses = operation["responses"]
        key = next((k for k in (str(answer.status), f"{answer.status // 100}XX", "default") if k in responses), None)
        if key is None:
            return f"status {answer.status} is not documented (documented: {', '.join(map(str, responses))})"
        where, response = ["paths", path, method, "responses", key], responses[key]
        if "$ref" in response:
            where = _ref_keys(response["$ref"])
            response = self._at(where)
        return self._headers_problem(response, answer) or self._body_problem(where, response, answer)

    def _headers_problem(self, response: Mapping[str, Any], answer: HttpAnswer) -> str | None:
        documented = {
            name: self._at(_ref_keys(h["$ref"])) if "$ref" in h else h
            for name, h in response.get("headers", {}).items()
        }
        given = {name.lower() for name in answer.headers}
        missing = [name for name, h in documented.items() if h.get("required") and name.lower() not in given]
        return f"required header {', '.join(missing)} is missing" if missing else None

    def _body_problem(self, where: list[str], response: Mapping[str, Any], answer: HttpAnswer) -> str | None:
        content = response.get("content") or {}
        if not content:
            return None if not answer.body else f"a body where none is documented: {answer.body[:120]!r}"
        media = _media_type(answer.headers)
        if media not in content:
            return f"Content-Type {media or '(none)'} is not documented (documented: {', '.join(content)})"
        try:
            body = json.loads(answer.body)
        except ValueError as error:
            return f"the body is not JSON ({error}): {answer.body[:120]!r}"
        return self.schema_problem(body, [*where, "content", media, "schema"])

    def schema_problem(self, value: Any, where: list[str]) -> str | None:
        """Why `value` does not match the schema at `where` in the document (a path of keys), or None."""
        from jsonschema.exceptions import best_match

        error = best_match(self._validator(_pointer(*where)).iter_errors(value))
        return None if error is None else _describe(error)

    def _at(self, where: list[str]) -> Any:
        node: Any = self.document
        for key in where:
            node = node[key]
        return node

    def _validator(self, pointer: str) -> "OAS30StrictValidator":
        from openapi_schema_validator import OAS30StrictValidator, oas30_strict_format_checker

        with self._lock:
            validator = self._validators.get(pointer)
            if validator is None:
                validator = OAS30StrictValidator(
                    {"$ref": f"{_BASE}#{pointer}"},
                    registry=self._registry,
                    format_checker=oas30_strict_format_checker,
                )
                self._validators[pointer] = validator
            return validator


def _openapi_path(route: str) -> str:
    """A Functions route template as an OpenAPI path (the servers' URL ends in /api): `bottles/{id:int}` is
    `/bottles/{id}`."""
    return "/" + "/".join(p.split(":")[0] + "}" if p.startswith("{") and ":" in p else p for p in route.split("/"))


def _ref_keys(ref: str) -> list[str]:
    """The keys of a local `$ref` (`#/components/responses/BadRequest`)."""
    return [key.replace("~1", "/").replace("~0", "~") for key in ref.removeprefix("#/").split("/")]


def _media_type(headers: Mapping[str, str]) -> str:
    value = next((v for k, v in headers.items() if k.lower() == "content-type"), "")
    return value.split(";")[0].strip().lower()


def _describe(error: "ValidationError") -> str:
    at = "".join(f"[{p!r}]" if isinstance(p, str) else f"[{p}]" for p in error.absolute_path) or "the body"
    rule = "/".join(str(p) for p in error.absolute_schema_path)
    return f"{error.message} at {at} (schema rule {rule})"


@cache
def contract() -> Contract:
    """openapi.yaml as the repository has it, loaded once per process."""
    return Contract.load()


_seen: list[str] = []  # every complaint this process raised, in order (tests/infra/test_openapi_responses.py)
_seen_lock = threading.Lock()


def check(answer: HttpAnswer) -> None:
    """Raise `ResponseOffContract` naming the route, the status and what is wrong, if the app's answer is off
    openapi.yaml; other apps' answers pass unchecked."""
    __tracebackhide__ = True  # pytest shows the caller's line, not this one
    if answer.app != THE_APP:
        return
    problem = contract().problem(answer)
    if problem is None:
        return
    who = "the Functions host" if answer.by_host else "the function"
    message = (
        f"{answer.method} {answer.url} (route {answer.route}): {who} answered {answer.status}, "
        f"which openapi.yaml does not allow: {problem}"
    )
    with _seen_lock:
        _seen.append(message)
    raise ResponseOffContract(message)


def complaints() -> list[str]:
    """Every complaint raised in this process so far (a snapshot)."""
    with _seen_lock:
        return list(_seen)


def install() -> None:
    """Check every answer of every local host in this process from now on (idempotent)."""
    observe_http_answers(check)
