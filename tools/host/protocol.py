"""The host's side of the Functions language-worker protocol: the messages of `FunctionRpc.proto` as protobuf
classes, generated from the vendored proto (tools/host/proto/: the upstream file, its commit, the command that
generated the classes).

The Azure Functions host talks to a language worker over gRPC with these messages; for Python 3.13+ the worker is a
thin proxy that hands each message, with its generated classes as `protos`, to the app's pinned
`azure-functions-runtime`. This module is that `protos` here: the runtime builds its answers with these classes
(`protos.InvocationResponse(...)`), so a field the proto does not have is refused by protobuf itself (`ValueError`),
and the host's requests it reads are real messages, with the proto's defaults and `oneof`s.
"""

from dataclasses import dataclass
from typing import Any

from tools.host.proto.FunctionRpc_pb2 import (
    BindingInfo,
    CloseSharedMemoryResourcesRequest,
    CloseSharedMemoryResourcesResponse,
    CollectionBytes,
    CollectionDouble,
    CollectionSInt64,
    CollectionString,
    FunctionEnvironmentReloadRequest,
    FunctionEnvironmentReloadResponse,
    FunctionLoadRequest,
    FunctionLoadRequestCollection,
    FunctionLoadResponse,
    FunctionLoadResponseCollection,
    FunctionMetadataResponse,
    FunctionsMetadataRequest,
    InvocationRequest,
    InvocationResponse,
    ParameterBinding,
    RetryContext,
    RpcDataType,
    RpcException,
    RpcFunctionMetadata,
    RpcHttp,
    RpcHttpCookie,
    RpcLog,
    RpcRetryOptions,
    RpcSharedMemory,
    RpcTraceContext,
    StartStream,
    StatusResult,
    StreamingMessage,
    TypedData,
    WorkerHeartbeat,
    WorkerInitRequest,
    WorkerInitResponse,
    WorkerMetadata,
    WorkerStatusRequest,
    WorkerStatusResponse,
)
from tools.host.proto.shared.NullableTypes_pb2 import NullableBool, NullableDouble, NullableString, NullableTimestamp

__all__ = [
    "BindingInfo",
    "CloseSharedMemoryResourcesRequest",
    "CloseSharedMemoryResourcesResponse",
    "CollectionBytes",
    "CollectionDouble",
    "CollectionSInt64",
    "CollectionString",
    "FunctionEnvironmentReloadRequest",
    "FunctionEnvironmentReloadResponse",
    "FunctionLoadRequest",
    "FunctionLoadRequestCollection",
    "FunctionLoadResponse",
    "FunctionLoadResponseCollection",
    "FunctionMetadataResponse",
    "FunctionsMetadataRequest",
    "InvocationRequest",
    "InvocationResponse",
    "NullableBool",
    "NullableDouble",
    "NullableString",
    "NullableTimestamp",
    "ParameterBinding",
    "RetryContext",
    "RpcDataType",
    "RpcException",
    "RpcFunctionMetadata",
    "RpcHttp",
    "RpcHttpCookie",
    "RpcLog",
    "RpcRetryOptions",
    "RpcSharedMemory",
    "RpcTraceContext",
    "StartStream",
    "StatusResult",
    "StreamingMessage",
    "TypedData",
    "WorkerHeartbeat",
    "WorkerInitRequest",
    "WorkerInitResponse",
    "WorkerMetadata",
    "WorkerRequest",
    "WorkerStatusRequest",
    "WorkerStatusResponse",
]


@dataclass(frozen=True)
class WorkerRequest:
    """What the proxy worker hands the runtime: the message and its properties (`protos`: this module; `host`: the
    host's address, used only by HTTP streaming, which this app does not enable)."""

    request: StreamingMessage
    properties: dict[str, Any]
