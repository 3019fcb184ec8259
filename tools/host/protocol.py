"""The host's side of the Functions language-worker protocol, as plain Python messages.

The Azure Functions host talks to a language worker over gRPC with the messages of `FunctionRpc.proto`; for Python
3.13+ the worker is a thin proxy that hands each message, with this module as `protos`, to the app's pinned
`azure-functions-runtime`. The runtime reads and builds messages only through the protocol's field names, the
`WhichOneof` of a `oneof` and the enum constants, so these classes carry exactly those, with the proto's field
names and numbering of enums. A field the proto does not have is refused (`TypeError`), as protobuf refuses it,
so that a runtime upgrade that needs a new field fails here loudly instead of losing data.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar


class Message:
    """A protocol message: keyword fields only; `WhichOneof(group)` names the set member of a `oneof`."""

    ONEOFS: ClassVar[dict[str, tuple[str, ...]]] = {}

    def __post_init__(self) -> None:
        for group, members in self.ONEOFS.items():
            chosen = [name for name in members if getattr(self, name) is not None]
            if len(chosen) > 1:
                raise TypeError(f"{type(self).__name__}: fields {chosen} of oneof {group!r} are set together")

    def WhichOneof(self, group: str) -> str | None:  # noqa: N802 (protobuf's own method name)
        """The name of the field of `oneof group` that is set, or None (protobuf's contract)."""
        if group not in self.ONEOFS:
            raise ValueError(f"{type(self).__name__} has no oneof {group!r}")
        return next((name for name in self.ONEOFS[group] if getattr(self, name) is not None), None)

    def field_names(self) -> list[str]:
        return [f.name for f in fields(self)]  # type: ignore[arg-type]


# --- shared values ---------------------------------------------------------------------------------------------


@dataclass(kw_only=True)
class RpcException(Message):
    source: str = ""
    stack_trace: str = ""
    message: str = ""
    is_user_exception: bool = False
    type: str = ""


@dataclass(kw_only=True)
class StatusResult(Message):
    Failure: ClassVar[int] = 0
    Success: ClassVar[int] = 1
    Cancelled: ClassVar[int] = 2

    status: int = 0
    result: str = ""
    exception: RpcException | None = None
    logs: list[Any] = field(default_factory=list)


@dataclass(kw_only=True)
class NullableString(Message):
    ONEOFS: ClassVar[dict[str, tuple[str, ...]]] = {"string": ("value",)}
    value: str | None = None


@dataclass(kw_only=True)
class NullableDouble(Message):
    ONEOFS: ClassVar[dict[str, tuple[str, ...]]] = {"double": ("value",)}
    value: float | None = None


@dataclass(kw_only=True)
class NullableBool(Message):
    ONEOFS: ClassVar[dict[str, tuple[str, ...]]] = {"bool": ("value",)}
    value: bool | None = None


@dataclass(kw_only=True)
class NullableTimestamp(Message):
    ONEOFS: ClassVar[dict[str, tuple[str, ...]]] = {"timestamp": ("value",)}
    value: Any = None


class _SameSite:
    """RpcHttpCookie.SameSite: `None` is a Python keyword, read with getattr as the runtime does."""

    Lax = 1
    Strict = 2
    ExplicitNone = 3


setattr(_SameSite, "None", 0)


@dataclass(kw_only=True)
class RpcHttpCookie(Message):
    SameSite: ClassVar[type[_SameSite]] = _SameSite

    name: str = ""
    value: str = ""
    domain: NullableString | None = None
    path: NullableString | None = None
    expires: NullableTimestamp | None = None
    secure: NullableBool | None = None
    http_only: NullableBool | None = None
    same_site: int = 0
    max_age: NullableDouble | None = None


@dataclass(kw_only=True)
class RpcHttp(Message):
    method: str = ""
    url: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    body: TypedData | None = None
    params: dict[str, str] = field(default_factory=dict)
    status_code: str = ""
    query: dict[str, str] = field(default_factory=dict)
    enable_content_negotiation: bool = False
    cookies: list[RpcHttpCookie] | None = None
    identities: list[Any] = field(default_factory=list)
    nullable_headers: dict[str, NullableString] = field(default_factory=dict)
    nullable_params: dict[str, NullableString] = field(default_factory=dict)
    nullable_query: dict[str, NullableString] = field(default_factory=dict)


@dataclass(kw_only=True)
class CollectionString(Message):
    string: list[str] = field(default_factory=list)


@dataclass(kw_only=True)
class CollectionBytes(Message):
    bytes: list[builtins.bytes] = field(default_factory=list)


@dataclass(kw_only=True)
class CollectionDouble(Message):
    double: list[float] = field(default_factory=list)


@dataclass(kw_only=True)
class CollectionSInt64(Message):
    sint64: list[int] = field(default_factory=list)


@dataclass(kw_only=True)
class TypedData(Message):
    ONEOFS: ClassVar[dict[str, tuple[str, ...]]] = {
        "data": (
            "string",
            "json",
            "bytes",
            "stream",
            "http",
            "int",
            "double",
            "collection_bytes",
            "collection_string",
            "collection_double",
            "collection_sint64",
            "model_binding_data",
            "collection_model_binding_data",
        )
    }

    string: str | None = None
    json: str | None = None
    bytes: builtins.bytes | None = None
    stream: builtins.bytes | None = None
    http: RpcHttp | None = None
    int: builtins.int | None = None
    double: float | None = None
    collection_bytes: CollectionBytes | None = None
    collection_string: CollectionString | None = None
    collection_double: CollectionDouble | None = None
    collection_sint64: CollectionSInt64 | None = None
    model_binding_data: Any = None
    collection_model_binding_data: Any = None


@dataclass(kw_only=True)
class ParameterBinding(Message):
    ONEOFS: ClassVar[dict[str, tuple[str, ...]]] = {"rpc_data": ("data", "rpc_shared_memory")}

    name: str = ""
    data: TypedData | None = None
    rpc_shared_memory: Any = None


# --- start-up and indexing -------------------------------------------------------------------------------------


@dataclass(kw_only=True)
class WorkerInitRequest(Message):
    host_version: str = ""
    capabilities: dict[str, str] = field(default_factory=dict)
    log_categories: dict[str, int] = field(default_factory=dict)
    worker_directory: str = ""
    function_app_directory: str = ""


@dataclass(kw_only=True)
class WorkerMetadata(Message):
    runtime_name: str = ""
    runtime_version: str = ""
    worker_version: str = ""
    worker_bitness: str = ""
    custom_properties: dict[str, str] = field(default_factory=dict)


@dataclass(kw_only=True)
class WorkerInitResponse(Message):
    worker_version: str = ""
    capabilities: dict[str, str] = field(default_factory=dict)
    worker_metadata: WorkerMetadata | None = None
    result: StatusResult = field(default_factory=StatusResult)


@dataclass(kw_only=True)
class FunctionsMetadataRequest(Message):
    function_app_directory: str = ""


@dataclass(kw_only=True)
class BindingInfo(Message):
    # Direction and DataType, numbered as in the proto (`in` is a Python keyword and never read by the runtime).
    out: ClassVar[int] = 1
    inout: ClassVar[int] = 2
    undefined: ClassVar[int] = 0
    string: ClassVar[int] = 1
    binary: ClassVar[int] = 2
    stream: ClassVar[int] = 3

    type: str = ""
    direction: int = 0
    data_type: int | None = None
    properties: dict[str, str] = field(default_factory=dict)


@dataclass(kw_only=True)
class RpcRetryOptions(Message):
    max_retry_count: int = 0
    delay_interval: Any = None
    minimum_interval: Any = None
    maximum_interval: Any = None
    retry_strategy: Any = None


@dataclass(kw_only=True)
class RpcFunctionMetadata(Message):
    name: str = ""
    directory: str = ""
    script_file: str = ""
    entry_point: str = ""
    bindings: dict[str, BindingInfo] = field(default_factory=dict)
    is_proxy: bool = False
    status: StatusResult | None = None
    language: str = ""
    raw_bindings: list[str] = field(default_factory=list)
    function_id: str = ""
    managed_dependency_enabled: bool = False
    retry_options: RpcRetryOptions | None = None
    properties: dict[str, str] = field(default_factory=dict)


@dataclass(kw_only=True)
class FunctionMetadataResponse(Message):
    function_metadata_results: list[RpcFunctionMetadata] | None = None
    result: StatusResult = field(default_factory=StatusResult)
    use_default_metadata_indexing: bool = False


@dataclass(kw_only=True)
class FunctionLoadRequest(Message):
    function_id: str = ""
    metadata: RpcFunctionMetadata | None = None
    managed_dependency_enabled: bool = False


@dataclass(kw_only=True)
class FunctionLoadResponse(Message):
    function_id: str = ""
    result: StatusResult = field(default_factory=StatusResult)
    is_dependency_downloaded: bool = False


@dataclass(kw_only=True)
class FunctionEnvironmentReloadResponse(Message):
    worker_metadata: WorkerMetadata | None = None
    capabilities: dict[str, str] = field(default_factory=dict)
    result: StatusResult = field(default_factory=StatusResult)


# --- invocation ------------------------------------------------------------------------------------------------


@dataclass(kw_only=True)
class RpcTraceContext(Message):
    trace_parent: str = ""
    trace_state: str = ""
    attributes: dict[str, str] = field(default_factory=dict)


@dataclass(kw_only=True)
class RetryContext(Message):
    retry_count: int = 0
    max_retry_count: int = 0
    exception: RpcException = field(default_factory=RpcException)


@dataclass(kw_only=True)
class InvocationRequest(Message):
    invocation_id: str = ""
    function_id: str = ""
    input_data: list[ParameterBinding] = field(default_factory=list)
    trigger_metadata: dict[str, TypedData] = field(default_factory=dict)
    trace_context: RpcTraceContext = field(default_factory=RpcTraceContext)
    retry_context: RetryContext = field(default_factory=RetryContext)


@dataclass(kw_only=True)
class InvocationResponse(Message):
    invocation_id: str = ""
    output_data: list[ParameterBinding] = field(default_factory=list)
    return_value: TypedData | None = None
    result: StatusResult = field(default_factory=StatusResult)


@dataclass(kw_only=True)
class StreamingMessage(Message):
    """The envelope: one request a message, named by its field as in the proto's `content` oneof."""

    ONEOFS: ClassVar[dict[str, tuple[str, ...]]] = {
        "content": (
            "worker_init_request",
            "functions_metadata_request",
            "function_load_request",
            "invocation_request",
        )
    }

    request_id: str = ""
    worker_init_request: WorkerInitRequest | None = None
    functions_metadata_request: FunctionsMetadataRequest | None = None
    function_load_request: FunctionLoadRequest | None = None
    invocation_request: InvocationRequest | None = None


@dataclass(frozen=True)
class WorkerRequest:
    """What the proxy worker hands the runtime: the message and its properties (`protos`: this module's
    classes; `host`: the host's address, used only by HTTP streaming, which this app does not enable)."""

    request: StreamingMessage
    properties: dict[str, Any]
