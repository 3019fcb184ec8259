"""A client generated from openapi.yaml by a well-known generator (openapi-python-client, pinned in
requirements-dev.txt) models every answer the contract documents: called against a server that answers each
documented status with a body the contract allows (nulls wherever it allows them), every operation gives back
that status's model, and never raises for it (the client is made with `raise_on_unexpected_status`).

A schema the generator cannot read is dropped with a warning, and the responses that use it with it: the contract's
`500` (an array without `items`) was, so such a client raised or returned None for every 500. So the generator must
also run without a warning."""

import datetime
import importlib
import inspect
import subprocess
import sys
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CONTRACT: dict[str, Any] = yaml.safe_load((ROOT / "openapi.yaml").read_text())
PACKAGE = "pillbottle_generated_client"
METHODS = ("get", "put", "post", "patch", "delete")
NOW = datetime.datetime(2026, 5, 4, 12, 0, tzinfo=datetime.UTC)


def resolve(node: dict[str, Any]) -> dict[str, Any]:
    """A `$ref` replaced by what it names in openapi.yaml (again, until it is no reference)."""
    while "$ref" in node:
        found: Any = CONTRACT
        for part in node["$ref"].removeprefix("#/").split("/"):
            found = found[part]
        node = found
    return node


def sample(schema: dict[str, Any]) -> Any:
    """A small value the schema allows: null wherever it is nullable, required properties only, the first of a
    oneOf, the lower bound of a number. (A generated client checks types and required fields, not patterns.)"""
    schema = resolve(schema)
    if schema.get("nullable"):
        return None
    if "allOf" in schema:
        parts = [resolve(part) for part in schema["allOf"]]
        if len(parts) == 1:
            return sample(parts[0])
        properties = {name: item for part in parts for name, item in part.get("properties", {}).items()}
        required = [name for part in parts for name in part.get("required", [])]
        return sample({"type": "object", "properties": properties, "required": list(dict.fromkeys(required))})
    if "oneOf" in schema:
        return sample(schema["oneOf"][0])
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type", "object")
    if kind == "object":
        properties = schema.get("properties", {})
        return {name: sample(properties[name]) for name in schema.get("required", [])}
    if kind == "array":
        return []
    if kind in ("integer", "number"):
        return schema.get("minimum", 0)
    if kind == "boolean":
        return False
    if schema.get("format") == "date-time":
        return "2026-05-04T12:00:00.000Z"
    return "x"


def instants_read(value: Any) -> Any:
    """A body with its date-time strings read as instants (a model writes them back in its own spelling)."""
    if isinstance(value, dict):
        return {name: instants_read(item) for name, item in value.items()}
    if isinstance(value, list):
        return [instants_read(item) for item in value]
    if isinstance(value, str) and len(value) >= 20 and value[10:11] == "T":
        return datetime.datetime.fromisoformat(value)
    return value


def documented_answers() -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(operationId, status, the response as documented) for every response of every operation."""
    for item in CONTRACT["paths"].values():
        for method in METHODS:
            if method in item:
                operation = item[method]
                for status, response in operation["responses"].items():
                    yield operation["operationId"], str(status), resolve(response)


def model_names(response: dict[str, Any]) -> set[str]:
    """The component schemas a response's JSON body may be (its `$ref`, or each of a oneOf's)."""
    schema = response["content"]["application/json"]["schema"]
    options = schema.get("oneOf", [schema])
    return {option["$ref"].rsplit("/", 1)[1] for option in options}


@pytest.fixture(scope="module")
def client_package(tmp_path_factory: pytest.TempPathFactory) -> Iterator[types.ModuleType]:
    """The generated client, imported. The generator's own post-generation hooks (ruff) are off: the test reads
    what it generated, as generated."""
    folder = tmp_path_factory.mktemp("client")
    config = folder / "config.yaml"
    config.write_text("post_hooks: []\n")
    command = [sys.executable, "-m", "openapi_python_client", "generate", "--path", str(ROOT / "openapi.yaml")]
    run = subprocess.run(
        [*command, "--meta", "none", "--output-path", str(folder / PACKAGE), "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    said = run.stdout + run.stderr
    assert run.returncode == 0, said
    for warning in ("Warning", "Unable to", "Cannot parse"):
        assert warning not in said, said
    sys.path.insert(0, str(folder))
    try:
        yield importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(folder))
        for name in [name for name in sys.modules if name == PACKAGE or name.startswith(PACKAGE + ".")]:
            del sys.modules[name]


def operation_module(package: types.ModuleType, operation_id: str) -> types.ModuleType:
    """The generated module of an operation (api/<tag>/<operationId>.py)."""
    for folder in (Path(package.__path__[0]) / "api").iterdir():
        if (folder / f"{operation_id}.py").exists():
            return importlib.import_module(f"{PACKAGE}.api.{folder.name}.{operation_id}")
    raise AssertionError(f"the generated client has no module for {operation_id}")


def arguments(package: types.ModuleType, call: Any) -> dict[str, Any]:
    """Values for a generated call's required parameters: ids, instants, and a request body built by its own model
    from a body the contract allows."""
    models = importlib.import_module(f"{PACKAGE}.models")
    hints = typing.get_type_hints(call)
    values: dict[str, Any] = {}
    for name, parameter in inspect.signature(call).parameters.items():
        if name == "client" or parameter.default is not inspect.Parameter.empty:
            continue
        hint = hints[name]
        if hint is str:
            values[name] = "bottle-1"
        elif hint is datetime.datetime:
            values[name] = NOW
        else:
            options = typing.get_args(hint) or (hint,)
            model = next(option for option in options if hasattr(models, getattr(option, "__name__", "")))
            values[name] = model.from_dict(sample({"$ref": f"#/components/schemas/{model.__name__}"}))
    return values


def answered(package: types.ModuleType, operation_id: str, status: str, body: Any) -> Any:
    """What the generated client gives back when the server answers `status` with `body` (no body if None)."""
    module = operation_module(package, operation_id)
    content = b"" if body is None else httpx.Response(200, json=body).content
    headers = {} if body is None else {"Content-Type": "application/json"}

    def server(request: httpx.Request) -> httpx.Response:
        return httpx.Response(int(status), content=content, headers=headers | {"Retry-After": "1"})

    client = package.AuthenticatedClient(base_url="http://app/api", token="key", raise_on_unexpected_status=True)
    client.set_httpx_client(httpx.Client(base_url="http://app/api", transport=httpx.MockTransport(server)))
    response = module.sync_detailed(client=client, **arguments(package, module.sync_detailed))
    assert int(response.status_code) == int(status)
    return response.parsed


@pytest.mark.parametrize(("operation_id", "status", "response"), list(documented_answers()))
def test_the_generated_client_models_every_documented_answer(
    client_package: types.ModuleType, operation_id: str, status: str, response: dict[str, Any]
) -> None:
    if "content" not in response:  # no body: the host's own 401 for a missing or wrong Functions key
        assert answered(client_package, operation_id, status, None) is None
        return
    models = importlib.import_module(f"{PACKAGE}.models")
    body = sample(response["content"]["application/json"]["schema"])
    parsed = answered(client_package, operation_id, status, body)
    expected = tuple(getattr(models, name) for name in sorted(model_names(response)))
    assert isinstance(parsed, expected), f"{operation_id} {status}: the client gave back {parsed!r}"
    assert instants_read(parsed.to_dict()) == instants_read(body), "the client lost part of the body"


def test_every_operation_documents_a_500_the_client_models(client_package: types.ModuleType) -> None:
    """The fault every route may answer is in the contract, with its error_id, and the client reads it."""
    operations = {operation_id for operation_id, _status, _response in documented_answers()}
    faults = {operation_id for operation_id, status, _response in documented_answers() if status == "500"}
    assert faults == operations
    models = importlib.import_module(f"{PACKAGE}.models")
    fault = {"error": "internal error; it has been logged", "error_id": "0" * 32, "details": []}
    for operation_id in sorted(operations):
        parsed = answered(client_package, operation_id, "500", fault)
        assert isinstance(parsed, models.InternalError), (operation_id, parsed)
        assert parsed.error_id == fault["error_id"]
