"""The host's side of the worker protocol from its source: the vendored FunctionRpc.proto is the upstream file at its
commit (tools/host/proto/README.md), the committed classes are what protoc makes of it, every message, field and
enum value the pinned runtime builds or reads is in it, and the runtime is driven through those messages as the
host drives a worker: StartStream, WorkerInitRequest with the host's capabilities, FunctionsMetadataRequest, one
FunctionLoadRequest per function, InvocationRequest with an RpcHttp built by the capabilities the runtime declared."""

import ast
import hashlib
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import azure.functions as func
import azure_functions_runtime
import pytest
from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.descriptor import Descriptor, EnumDescriptor

from tools.host import bindings, protocol
from tools.host.generate_proto import PROTO_DIR, generated_files
from tools.host.worker import CAPABILITY_EFFECTS, AppRefused, InvocationFailed, load_app_object
from tools.local_host import LocalHost

RUNTIME = Path(azure_functions_runtime.__file__).parent
RPC_PACKAGE = "AzureFunctionsRpcMessages"  # FunctionRpc.proto's
# The runtime's declared capabilities (its handle_event.worker_init_request, without OpenTelemetry or HTTP streaming).
RUNTIME_CAPABILITIES = {
    "RawHttpBodyBytes": "true",
    "TypedDataCollection": "true",
    "RpcHttpBodyOnly": "true",
    "WorkerStatus": "true",
    "RpcHttpTriggerMetadataRemoved": "true",
    "SharedMemoryDataTransfer": "true",
}


# --- the proto and the generated classes ---------------------------------------------------------------------


def test_the_vendored_files_are_the_upstream_ones_the_readme_names() -> None:
    table = re.findall(r"^\| (\S+) \| ([0-9a-f]{64}) \|$", (PROTO_DIR / "README.md").read_text(), re.MULTILINE)
    assert {name for name, _ in table} == {
        "FunctionRpc.proto",
        "identity/ClaimsIdentityRpc.proto",
        "shared/NullableTypes.proto",
        "LICENSE",
    }
    for name, digest in table:
        assert hashlib.sha256((PROTO_DIR / name).read_bytes()).hexdigest() == digest, name
    assert sorted(p.relative_to(PROTO_DIR).as_posix() for p in PROTO_DIR.rglob("*.proto")) == sorted(
        name for name, _ in table if name.endswith(".proto")
    )


def test_the_committed_classes_are_what_protoc_makes_of_the_vendored_proto() -> None:
    generated = generated_files()
    committed = {p.relative_to(PROTO_DIR).as_posix(): p.read_bytes() for p in PROTO_DIR.rglob("*_pb2.py*")}
    assert sorted(generated) == sorted(committed)
    stale = [name for name, content in generated.items() if committed[name] != content]
    assert not stale, f"regenerate with `.venv/bin/python -m tools.host.generate_proto`: {stale} differ"


def test_a_field_the_proto_does_not_have_is_refused() -> None:
    with pytest.raises(ValueError, match="no_such_field"):
        protocol.TypedData(no_such_field=b"x")  # type: ignore[call-arg]
    assert "rawBody" in protocol.RpcHttp.DESCRIPTOR.fields_by_name
    reload_fields = protocol.FunctionEnvironmentReloadResponse.DESCRIPTOR.fields_by_name
    assert reload_fields["capabilities_update_strategy"].number == 4


# --- the runtime's use of the protocol ---------------------------------------------------------------------------

# Names the runtime gives to the messages it reads (its handle_event.py, bindings/), and their message types: what it
# reads through them must be fields of those messages.
READ_THROUGH = {
    "init_request": "WorkerInitRequest",
    "invoc_request": "InvocationRequest",
    "func_request": "FunctionLoadRequest",
    "func_env_reload_request": "FunctionEnvironmentReloadRequest",
    "http": "RpcHttp",
}


def _runtime_sources() -> Iterator[tuple[Path, ast.Module]]:
    for path in sorted(RUNTIME.rglob("*.py")):
        yield path, ast.parse(path.read_text(encoding="utf-8"))


def _protos_chain(node: ast.expr) -> list[str] | None:
    """`protos.A.B` as ["A", "B"]; None for anything else."""
    names: list[str] = []
    while isinstance(node, ast.Attribute):
        names.insert(0, node.attr)
        node = node.value
    return names if isinstance(node, ast.Name) and node.id == "protos" and names else None


Find = Callable[[str], Descriptor | None]


def _finder(pool: descriptor_pool.DescriptorPool) -> Find:
    """A message of the protocol by its name in `pool` (FunctionRpc.proto's have a package, NullableTypes' none)."""

    def find(name: str) -> Descriptor | None:
        for full_name in (f"{RPC_PACKAGE}.{name}", name):
            try:
                return pool.FindMessageTypeByName(full_name)
            except KeyError:
                continue
        return None

    return find


def _enum_member(message: Descriptor, names: list[str]) -> str | None:
    """Why `protos.<message>.<names...>` is not in the proto, or None: a nested enum, or a value of one."""
    enums: dict[str, EnumDescriptor] = message.enum_types_by_name
    values = {value.name for enum in message.enum_types for value in enum.values}
    if len(names) == 1:
        return None if names[0] in enums or names[0] in values else f"{message.name}.{names[0]}"
    if len(names) == 2:
        enum = enums.get(names[0])
        return None if enum is not None and names[1] in enum.values_by_name else f"{message.name}.{'.'.join(names)}"
    return f"{message.name}.{'.'.join(names)}"


def built_but_missing(find: Find) -> tuple[list[str], set[str]]:
    """What the runtime's code builds or names that `find`'s proto lacks: every `protos.Message(field=...)`, every
    `protos.Message.EnumValue` or `protos.Message.Enum.Value` and `getattr(protos.Message.Enum, "Value")`; and the
    messages it builds."""
    missing: list[str] = []
    built: set[str] = set()
    for path, tree in _runtime_sources():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and (chain := _protos_chain(node.func)) and len(chain) == 1:
                built.add(chain[0])
                message = find(chain[0])
                if message is None:
                    missing.append(f"{path.name}: {chain[0]}")
                    continue
                keywords = [kw.arg for kw in node.keywords if kw.arg is not None]
                missing += [f"{path.name}: {chain[0]}.{k}" for k in keywords if k not in message.fields_by_name]
                continue
            if isinstance(node, ast.Attribute) and (chain := _protos_chain(node)) and len(chain) > 1:
                names = chain
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "getattr"
                and (chain := _protos_chain(node.args[0]))
                and isinstance(node.args[1], ast.Constant)
            ):
                names = [*chain, str(node.args[1].value)]
            else:
                continue
            message = find(names[0])
            problem = names[0] if message is None else _enum_member(message, names[1:])
            missing += [f"{path.name}: {problem}"] if problem else []
    return missing, built


def read_but_missing(find: Find) -> tuple[list[str], set[str]]:
    """What the runtime reads of the host's requests that `find`'s proto lacks, through `request.request.<kind>` and
    the names it gives the messages (READ_THROUGH); and which of those names it uses."""
    missing: list[str] = []
    seen: set[str] = set()
    streaming = find("StreamingMessage")
    assert streaming is not None
    for path, tree in _runtime_sources():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute):
                continue
            value = node.value
            if isinstance(value, ast.Attribute) and value.attr == "request" and isinstance(value.value, ast.Name):
                if value.value.id == "request" and node.attr not in streaming.fields_by_name:
                    missing.append(f"{path.name}: StreamingMessage.{node.attr}")
            elif isinstance(value, ast.Name) and value.id in READ_THROUGH:
                seen.add(value.id)
                message = find(READ_THROUGH[value.id])
                if message is None:
                    missing.append(f"{path.name}: {READ_THROUGH[value.id]}")
                elif node.attr not in message.fields_by_name and node.attr not in {"items", "WhichOneof", "HasField"}:
                    missing.append(f"{path.name}: {message.name}.{node.attr}")
    return missing, seen


def test_every_message_field_and_enum_value_the_runtime_builds_is_in_the_vendored_proto() -> None:
    """And this host's `protos` (tools/host/protocol.py) has every message the runtime builds."""
    missing, built = built_but_missing(_finder(descriptor_pool.Default()))
    assert not missing, f"the runtime uses what the vendored proto lacks: {missing}"
    assert {"InvocationResponse", "WorkerInitResponse", "RpcHttp", "TypedData", "ParameterBinding"} <= built
    assert not [name for name in built if not hasattr(protocol, name)]


def test_every_field_the_runtime_reads_of_the_host_s_messages_is_in_the_vendored_proto() -> None:
    """Each name of READ_THROUGH is still in the runtime's code, so that a renamed one is noticed here."""
    missing, seen = read_but_missing(_finder(descriptor_pool.Default()))
    assert not missing, f"the runtime reads what the vendored proto lacks: {missing}"
    assert seen == set(READ_THROUGH), f"the runtime no longer names {set(READ_THROUGH) - seen}: update READ_THROUGH"


def _disagreeing_proto() -> descriptor_pool.DescriptorPool:
    """The vendored proto, compiled into a pool of its own with three things the runtime uses taken out:
    RpcHttp.status_code (it builds it), InvocationRequest.trace_context (it reads it) and the StatusResult value
    Failure (it names it)."""
    pool = descriptor_pool.DescriptorPool()
    added: set[str] = set()
    taken_out = {("RpcHttp", "status_code"), ("InvocationRequest", "trace_context")}

    def add(file: Any) -> None:
        for dependency in file.dependencies:
            add(dependency)
        if file.name in added:
            return
        proto = descriptor_pb2.FileDescriptorProto()
        file.CopyToProto(proto)
        for message in proto.message_type:
            kept = [f for f in message.field if (message.name, f.name) not in taken_out]
            del message.field[:]
            message.field.extend(kept)
            for enum in message.enum_type:
                for value in enum.value:
                    if (message.name, value.name) == ("StatusResult", "Failure"):
                        value.name = "Failed"
        pool.Add(proto)
        added.add(file.name)

    add(protocol.StreamingMessage.DESCRIPTOR.file)
    return pool


def test_a_proto_that_disagrees_with_the_runtime_is_found_out() -> None:
    find = _finder(_disagreeing_proto())
    built, _ = built_but_missing(find)
    read, _ = read_but_missing(find)
    assert {problem.split(": ", 1)[1] for problem in built} == {"RpcHttp.status_code", "StatusResult.Failure"}
    assert {problem.split(": ", 1)[1] for problem in read} == {"InvocationRequest.trace_context"}


# --- the conversation ----------------------------------------------------------------------------------------


def test_the_app_is_loaded_as_the_host_loads_a_worker_s_functions() -> None:
    app = LocalHost.load().app
    assert app.conversation[:5] == (
        "start_stream",
        "worker_init_request",
        "worker_init_response",
        "functions_metadata_request",
        "function_metadata_response",
    )
    assert len(app.functions) == 11
    assert app.conversation[5:] == ("function_load_request", "function_load_response") * 11
    assert dict(app.capabilities) == RUNTIME_CAPABILITIES
    assert not app.load_errors


def test_the_capabilities_the_runtime_declares_are_the_ones_this_host_knows() -> None:
    assert set(RUNTIME_CAPABILITIES) <= set(CAPABILITY_EFFECTS)


@pytest.fixture
def declared(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The runtime's WorkerInitResponse, with capabilities added (set a key) or removed (set it to "")."""
    changes: dict[str, str] = {}
    original = azure_functions_runtime.worker_init_request

    async def worker_init_request(request: Any) -> Any:
        response = await original(request)
        for name, value in changes.items():
            if value:
                response.capabilities[name] = value
            else:
                response.capabilities.pop(name, None)
        return response

    monkeypatch.setattr(azure_functions_runtime, "worker_init_request", worker_init_request)
    return changes


def echo_app() -> func.FunctionApp:
    app = func.FunctionApp(http_auth_level=func.AuthLevel.ANONYMOUS)

    @app.route(route="echo", methods=["POST"])
    def echo(req: func.HttpRequest) -> func.HttpResponse:
        headers = {"x-seen-type": req.headers.get("Content-Type", ""), "x-seen-query": ",".join(sorted(req.params))}
        return func.HttpResponse(req.get_body(), status_code=200, headers=headers)

    return app


def test_a_runtime_declaring_a_capability_this_host_does_not_know_is_refused(declared: dict[str, str]) -> None:
    declared["SupportsLoadResponseCollection"] = "true"
    refusal = "capabilities this local host does not honour: SupportsLoadResponseCollection"
    with pytest.raises(AppRefused, match=refusal):
        load_app_object(echo_app())


def test_a_runtime_that_wants_the_http_request_in_the_trigger_metadata_is_refused(declared: dict[str, str]) -> None:
    declared["RpcHttpTriggerMetadataRemoved"] = ""
    with pytest.raises(AppRefused, match="did not declare RpcHttpTriggerMetadataRemoved"):
        load_app_object(echo_app())


def _rpc_http(capabilities: dict[str, str], body: bytes, content_type: str) -> Any:
    binding = bindings.http_request(
        "req",
        method="POST",
        url="/api/echo",
        headers={"Content-Type": content_type, "X-Device-Key": "k"},
        query={"since": "", "kind": "silent"},
        route_params={},
        body=body,
        capabilities=capabilities,
    )
    return binding.data.http


def test_the_http_request_is_what_the_host_sends_a_worker_with_these_capabilities() -> None:
    body = '{"type": "heartbeat", "note": "é"}'.encode()
    http = _rpc_http(RUNTIME_CAPABILITIES, body, "application/json")
    assert (http.body.WhichOneof("data"), http.body.bytes) == ("bytes", body)
    assert not http.HasField("rawBody")  # RpcHttpBodyOnly: the body alone
    assert dict(http.headers) == {"content-type": "application/json", "x-device-key": "k"}
    assert dict(http.query) == {"kind": "silent"}  # an empty value is left out, as the host does

    raw_bytes = {"RawHttpBodyBytes": "true"}
    http = _rpc_http(raw_bytes, body, "application/json")
    assert (http.body.WhichOneof("data"), http.body.json) == ("json", '{"type":"heartbeat","note":"é"}')
    assert (http.rawBody.WhichOneof("data"), http.rawBody.bytes) == ("bytes", body)

    http = _rpc_http({}, body, "text/plain; charset=utf-8")
    assert (http.body.string, http.rawBody.string) == (body.decode(), body.decode())
    http = _rpc_http({}, b"\x00\xff", "application/octet-stream")
    assert (http.body.bytes, http.rawBody.string) == (b"\x00\xff", "\x00\ufffd")

    assert not _rpc_http(RUNTIME_CAPABILITIES, b"", "application/json").HasField("body")


def test_without_rpc_http_body_only_the_runtime_gets_body_and_raw_body_and_answers_the_same(
    declared: dict[str, str],
) -> None:
    declared["RpcHttpBodyOnly"] = ""
    host = LocalHost.for_app_object(echo_app())
    assert "RpcHttpBodyOnly" not in host.app.capabilities
    body = b'{"events": [1, 2]}'
    response = host.handle(
        "POST", "/api/echo", headers={"Content-Type": "application/json"}, params={"a": "1", "b": ""}, body=body
    )
    assert response.status_code == 200
    assert response.get_body() == b'{"events":[1,2]}'  # the host's compact JSON body, as the runtime was handed it
    assert (response.headers["x-seen-type"], response.headers["x-seen-query"]) == ("application/json", "a")


def test_a_function_that_failed_to_load_is_not_invoked(monkeypatch: pytest.MonkeyPatch) -> None:
    """As the host does, an invocation of a function whose FunctionLoadResponse failed fails with that error
    and sends no InvocationRequest."""
    original = azure_functions_runtime.function_load_request

    async def function_load_request(request: Any) -> Any:
        loaded = await original(request)
        loaded.result.status = protocol.StatusResult.Failure
        loaded.result.exception.message = "ImportError: no module named nowhere"
        return loaded

    monkeypatch.setattr(azure_functions_runtime, "function_load_request", function_load_request)
    host = LocalHost.for_app_object(echo_app())
    invoked: list[str] = []
    monkeypatch.setattr(azure_functions_runtime, "invocation_request", lambda request: invoked.append("sent"))
    with pytest.raises(InvocationFailed, match="ImportError: no module named nowhere"):
        host.app.invoke(host.app.function("echo"), [])
    assert not invoked
