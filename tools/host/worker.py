"""The pinned Azure Functions Python runtime, driven in this process as the Functions host drives a language worker,
with the protocol's protobuf messages (tools/host/protocol.py). `load_app` holds the conversation the host holds
when a worker starts: the worker's `StartStream`, the host's `WorkerInitRequest` with its capabilities (the runtime
imports, indexes and validates the app and answers with its own capabilities, which the host keeps and honours),
`FunctionsMetadataRequest` (the functions as the runtime indexed them) and one `FunctionLoadRequest` per function,
built from that metadata. `LoadedApp.invoke` sends one `InvocationRequest`. Only the host's side is here (the
messages, an event loop, which app a function id belongs to); everything behind the runtime's handlers is its own
code. How and why: docs/runtime.md, "How the app is invoked locally".
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import tempfile
import threading
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from functions import start_up
from shared.store.command_line import CommandFailed
from tools.host import protocol, tracing

SCRIPT_SETTING = "PYTHON_SCRIPT_FILE_NAME"  # the runtime's own app setting for a script other than function_app.py

# What the host offers in its WorkerInitRequest, as azure-functions-host's GrpcWorkerChannel.SendWorkerInitRequest
# does by default (Azure/azure-functions-host, src/WebJobs.Script.Grpc/Channel/GrpcWorkerChannel.cs, commit d91dfe1,
# read 2026-11-28): "MultiStream" always; "FunctionDataCache" and "V2Compatable" only when enabled, which they are not.
HOST_CAPABILITIES: Mapping[str, str] = MappingProxyType({"MultiStream": "10"})
HOST_VERSION = "4"

# What each capability a worker may declare in its WorkerInitResponse changes in what this host sends (the host's
# rules, same file and GrpcMessageConversionExtensions.cs, commit 09adf43, read 2026-11-28). A worker that declares
# a capability not listed here is refused at loading: a runtime upgrade that starts declaring one is reviewed here.
CAPABILITY_EFFECTS: Mapping[str, str] = MappingProxyType(
    {
        "RawHttpBodyBytes": "the HTTP body (and rawBody) as bytes, never decoded to a string",
        "RpcHttpBodyOnly": "the HTTP body alone: no rawBody",
        "RpcHttpTriggerMetadataRemoved": "no HTTP trigger metadata (the host adds none only for such a worker)",
        "TypedDataCollection": "arrays as typed collections (no trigger of this app sends an array)",
        "WorkerStatus": "the host may ask WorkerStatusRequest for its scaling (not sent here)",
        "SharedMemoryDataTransfer": "large data over shared memory, only when FUNCTIONS_WORKER_SHARED_MEMORY_DATA_"
        "TRANSFER_ENABLED is set (it is not: everything goes in the messages)",
        "WorkerOpenTelemetryEnabled": "the worker exports its own telemetry (nothing for the host to forward here)",
    }
)
# Capabilities whose absence changes what the host sends in a way this host does not model (it would put the HTTP
# request into the trigger metadata as well), so a worker without them is refused.
REQUIRED_CAPABILITIES = ("RpcHttpTriggerMetadataRemoved",)


class AppRefused(CommandFailed):
    """The runtime refused the app at indexing (as the host would then serve none of its functions): `reason` is
    the runtime's own message (exception type and text); every local command stops on it with that message."""

    def __init__(self, script: Path, reason: str) -> None:
        self.reason = reason
        super().__init__(f"the Functions runtime {runtime_version()} refused the app {script}: {reason}")


class InvocationFailed(RuntimeError):
    """The function raised (or the runtime could not bind its data, or could not load the function): `str()` is the
    runtime's message."""

    def __init__(self, function: str, exception: protocol.RpcException | None) -> None:
        self.function = function
        self.message = exception.message if exception else "no exception reported"
        self.stack_trace = exception.stack_trace if exception else ""
        super().__init__(f"{function}: {self.message}")


@dataclass(frozen=True)
class LoadedApp:
    """An app the runtime indexed: its functions as `functions_metadata_request` reported them, the capabilities the
    runtime declared (`WorkerInitResponse`), the load errors of functions it could not load (function id ->
    exception), and the kinds of the stream's messages while it loaded, in order."""

    key: tuple[str, str]  # (directory, script file)
    functions: tuple[protocol.RpcFunctionMetadata, ...]
    capabilities: Mapping[str, str] = field(default_factory=dict)
    load_errors: Mapping[str, protocol.RpcException] = field(default_factory=dict)
    conversation: tuple[str, ...] = ()

    def function(self, name: str) -> protocol.RpcFunctionMetadata:
        for metadata in self.functions:
            if metadata.name == name:
                return metadata
        raise KeyError(f"the runtime indexed no function named {name!r}")

    def invoke(
        self,
        function: protocol.RpcFunctionMetadata,
        input_data: list[protocol.ParameterBinding],
        trigger_metadata: Mapping[str, protocol.TypedData] | None = None,
        *,
        invocation_id: str | None = None,
    ) -> protocol.InvocationResponse:
        """One `InvocationRequest` (with a new id unless given): the runtime converts the trigger data into the
        function's parameters, runs a sync function on its own thread pool and hands back the output bindings and
        the return value. Raises `InvocationFailed` with the runtime's message when the function (or the binding of
        its data) failed, as the host records a failed invocation, or when the function failed to load (the host
        then sends no invocation at all)."""
        return _WORKER.invoke(
            self, function, input_data, dict(trigger_metadata or {}), invocation_id or str(uuid.uuid4())
        )


class _Worker:
    """The runtime's handlers on one event loop thread (the proxy worker's), shared by every caller thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._apps: dict[tuple[str, str], LoadedApp] = {}
        self._owner: dict[str, tuple[str, str]] = {}  # function id -> the app whose function it is now
        self.worker_id = str(uuid.uuid4())

    def _runtime(self) -> Any:
        import azure_functions_runtime  # the pinned package (requirements.txt); imported on first use only

        return azure_functions_runtime

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="functions-worker-loop", daemon=True).start()
            self._runtime().start_threadpool_executor()  # the thread pool sync functions run on
            self._loop = loop
        return self._loop

    def _exchange(self, message: protocol.StreamingMessage, answer: str) -> protocol.StreamingMessage:
        """Hand `message` to the runtime's handler of its kind, as the proxy worker does, and wrap the runtime's
        answer as the proxy worker sends it back: a StreamingMessage with the same request id, its `answer` field
        set."""
        request = protocol.WorkerRequest(message, {"protos": protocol, "host": "127.0.0.1"})
        coroutine = getattr(self._runtime(), str(message.WhichOneof("content")))(request)
        response = asyncio.run_coroutine_threadsafe(coroutine, self._event_loop()).result()
        return protocol.StreamingMessage(request_id=message.request_id, **{answer: response})

    def load(self, directory: Path, script: str, *, keep_on_path: bool = True) -> LoadedApp:
        key = (str(directory.resolve()), script)
        with self._lock:
            if key in self._apps:
                return self._apps[key]
            path = Path(key[0]) / script
            _check_module_free(path)
            conversation = _Conversation()
            started = protocol.StreamingMessage(
                request_id=str(uuid.uuid4()), start_stream=protocol.StartStream(worker_id=self.worker_id)
            )
            conversation.heard(started)  # the worker opens the stream; the host answers with its init request
            with _app_on_path(directory, script, keep=keep_on_path):
                init = conversation.exchange(self, _worker_init_request(key[0]), "worker_init_response")
            initialized = init.worker_init_response
            if initialized.result.status != protocol.StatusResult.Success:
                raise AppRefused(path, _reason(initialized.result))
            capabilities = dict(initialized.capabilities)  # merged into the host's (none yet), as the host does
            _check_capabilities(path, capabilities)
            metadata_request = protocol.StreamingMessage(
                request_id=str(uuid.uuid4()),
                functions_metadata_request=protocol.FunctionsMetadataRequest(function_app_directory=key[0]),
            )
            listed = conversation.exchange(self, metadata_request, "function_metadata_response")
            functions = _indexed_functions(path, listed.function_metadata_response)
            load_errors = {}
            for function in functions:
                loaded = conversation.exchange(self, _function_load_request(function), "function_load_response")
                if loaded.function_load_response.result.status != protocol.StatusResult.Success:
                    load_errors[function.function_id] = loaded.function_load_response.result.exception
            app = LoadedApp(
                key,
                functions,
                capabilities=MappingProxyType(capabilities),
                load_errors=MappingProxyType(load_errors),
                conversation=tuple(conversation.kinds),
            )
            self._apps[key] = app
            for function in app.functions:
                self._owner[function.function_id] = key
            return app

    def invoke(
        self,
        app: LoadedApp,
        function: protocol.RpcFunctionMetadata,
        input_data: list[protocol.ParameterBinding],
        trigger_metadata: dict[str, protocol.TypedData],
        invocation_id: str,
    ) -> protocol.InvocationResponse:
        owner = self._owner.get(function.function_id)
        if owner != app.key:
            raise RuntimeError(
                f"function {function.name} of {app.key[1]} was replaced in this process by {owner and owner[1]}'s"
            )
        if function.function_id in app.load_errors:
            raise InvocationFailed(function.name, app.load_errors[function.function_id])
        message = protocol.StreamingMessage(request_id=invocation_id)
        request = message.invocation_request  # built in place: a nested constructor would copy each part twice
        request.invocation_id = invocation_id
        request.function_id = function.function_id
        request.input_data.extend(input_data)
        for key, value in trigger_metadata.items():
            request.trigger_metadata[key].CopyFrom(value)
        request.trace_context.trace_parent = tracing.trace_parent()  # the host's trace, as Azure's host sends it
        response = self._exchange(message, "invocation_response").invocation_response
        if response.result.status != protocol.StatusResult.Success:
            exception = response.result.exception if response.result.HasField("exception") else None
            raise InvocationFailed(function.name, exception)
        return response


class _Conversation:
    """The kinds of the messages on the stream while an app loads, in order (`LoadedApp.conversation`)."""

    def __init__(self) -> None:
        self.kinds: list[str] = []

    def heard(self, message: protocol.StreamingMessage) -> None:
        self.kinds.append(str(message.WhichOneof("content")))

    def exchange(self, worker: _Worker, message: protocol.StreamingMessage, answer: str) -> protocol.StreamingMessage:
        self.heard(message)
        response = worker._exchange(message, answer)
        self.heard(response)
        return response


def _worker_init_request(directory: str) -> protocol.StreamingMessage:
    """The host's WorkerInitRequest: its version and capabilities, the app's folder (where the worker runs from)."""
    return protocol.StreamingMessage(
        request_id=str(uuid.uuid4()),
        worker_init_request=protocol.WorkerInitRequest(
            host_version=HOST_VERSION,
            capabilities=dict(HOST_CAPABILITIES),
            function_app_directory=directory,
            worker_directory=directory,
        ),
    )


def _check_capabilities(script: Path, capabilities: Mapping[str, str]) -> None:
    """Refuse a worker whose capabilities this host cannot honour (module comment at CAPABILITY_EFFECTS)."""
    unknown = sorted(set(capabilities) - set(CAPABILITY_EFFECTS))
    if unknown:
        raise AppRefused(script, f"it declared capabilities this local host does not honour: {', '.join(unknown)}")
    missing = [name for name in REQUIRED_CAPABILITIES if not capabilities.get(name)]
    if missing:
        raise AppRefused(script, f"it did not declare {', '.join(missing)}, which this local host requires")


def _indexed_functions(
    script: Path, response: protocol.FunctionMetadataResponse
) -> tuple[protocol.RpcFunctionMetadata, ...]:
    """The functions of a FunctionMetadataResponse; AppRefused when the runtime indexed none (or asked the host to
    index the app itself, which this host cannot), or a function's indexing failed."""
    if response.result.status != protocol.StatusResult.Success:
        raise AppRefused(script, _reason(response.result))
    if response.use_default_metadata_indexing:
        raise AppRefused(script, "it asked the host to index the app itself (use_default_metadata_indexing)")
    if not response.function_metadata_results:
        raise AppRefused(script, "it found no functions")
    failed = [f for f in response.function_metadata_results if f.HasField("status") and f.status.status == 0]
    if failed:
        raise AppRefused(script, f"cannot index {failed[0].name}: {_reason(failed[0].status)}")
    return tuple(response.function_metadata_results)


def _function_load_request(function: protocol.RpcFunctionMetadata) -> protocol.StreamingMessage:
    """The host's FunctionLoadRequest for one function, built as the host builds it from the function's metadata
    (GrpcWorkerChannel.GetFunctionLoadRequest): its id, name, folder, script and entry point, each binding (from the
    raw bindings the worker reported) as a BindingInfo with its type, direction and data type, and its
    properties."""
    bindings = {}
    for raw in function.raw_bindings:
        binding = json.loads(raw)
        data_type = binding.get("dataType")
        bindings[binding["name"]] = protocol.BindingInfo(
            type=binding["type"],
            direction=protocol.BindingInfo.Direction.Value(str(binding.get("direction", "in")).lower()),
            data_type=None if data_type is None else protocol.BindingInfo.DataType.Value(str(data_type).lower()),
        )
    metadata = protocol.RpcFunctionMetadata(
        name=function.name,
        directory=function.directory,
        entry_point=function.entry_point,
        script_file=function.script_file,
        is_proxy=False,
        bindings=bindings,
        properties=dict(function.properties),
    )
    return protocol.StreamingMessage(
        request_id=str(uuid.uuid4()),
        function_load_request=protocol.FunctionLoadRequest(function_id=function.function_id, metadata=metadata),
    )


def _reason(result: protocol.StatusResult) -> str:
    return result.exception.message if result.HasField("exception") else "no reason given"


_WORKER = _Worker()
# Whoever runs the app here installs its store, queues and archive (use_client, use_sender, use_archive): the
# app's start-up check requires none of them of the settings (functions/start_up.py).
start_up.served_by_the_local_host()


def runtime_version() -> str:
    """The version of the pinned azure-functions-runtime package, as its metadata says."""
    from importlib.metadata import version

    return version("azure-functions-runtime")


def load_app(directory: Path, script: str = "function_app.py") -> LoadedApp:
    """Index the app at `directory/script` through the runtime, once per process; raises `AppRefused` with the
    runtime's message when it refuses the app (as the host would then run none of its functions)."""
    return _WORKER.load(directory, script)


_app_objects: dict[str, object] = {}


def load_app_object(app: object) -> LoadedApp:
    """Index an app object built in this process (a test's scratch app) through the runtime: a one-line script
    in a new folder hands the object to the runtime's import, and the runtime indexes and validates it as it
    would a file (`AppRefused` with its message). The object must not have been indexed before."""
    token = f"scratch_app_{uuid.uuid4().hex}"
    folder = Path(tempfile.mkdtemp(prefix="functions-app-"))
    script = folder / f"{token}.py"
    script.write_text(f"from tools.host.worker import take_app_object\n\napp = take_app_object({token!r})\n")
    _app_objects[token] = app
    try:
        return _WORKER.load(folder, script.name, keep_on_path=False)
    finally:
        _app_objects.pop(token, None)
        shutil.rmtree(folder, ignore_errors=True)


def take_app_object(token: str) -> object:
    """For the script `load_app_object` writes: the app object it stands for."""
    return _app_objects[token]


def current_invocation_id() -> str | None:
    """The id of the invocation running on this thread (the runtime sets it before calling a sync function)."""
    runtime = _WORKER._runtime()
    value = runtime.invocation_id_cv.get()
    return None if value is None else str(value)


def _check_module_free(script: Path) -> None:
    """Raise AppRefused if another file of the script's module name is already imported in this process: the
    runtime imports the script by its module name, so that file would be indexed in its place."""
    loaded = sys.modules.get(script.stem)
    origin = getattr(loaded, "__file__", None)
    if loaded is not None and (origin is None or Path(origin).resolve() != script.resolve()):
        raise AppRefused(script, f"module {script.stem!r} is already imported in this process from {origin}")


@contextmanager
def _app_on_path(directory: Path, script: str, *, keep: bool) -> Iterator[None]:
    """While the runtime indexes: the app's folder importable (the worker starts in it; `keep`: for good, as the
    app imports lazily) and its script named by the runtime's own setting."""
    folder = str(directory.resolve())
    added = folder not in sys.path
    if added:
        sys.path.insert(0, folder)
    previous = os.environ.get(SCRIPT_SETTING)
    os.environ[SCRIPT_SETTING] = script
    try:
        yield
    finally:
        if added and not keep:
            sys.path.remove(folder)
        if previous is None:
            os.environ.pop(SCRIPT_SETTING, None)
        else:
            os.environ[SCRIPT_SETTING] = previous
