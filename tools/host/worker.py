"""The pinned Azure Functions Python runtime, driven in this process as the host drives a language worker:
`load_app` indexes an app (`worker_init_request`, `functions_metadata_request`), `LoadedApp.invoke` sends one
`invocation_request`. Only the host's side is here (the messages, an event loop, which app a function id belongs
to); everything behind the runtime's handlers is its own code. How and why: docs/runtime.md, "How the app is
invoked locally".
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
import threading
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from functions import start_up
from shared.store.command_line import CommandFailed
from tools.host import protocol, tracing

SCRIPT_SETTING = "PYTHON_SCRIPT_FILE_NAME"  # the runtime's own app setting for a script other than function_app.py


class AppRefused(CommandFailed):
    """The runtime refused the app at indexing (as the host would then serve none of its functions): `reason` is
    the runtime's own message (exception type and text); every local command stops on it with that message."""

    def __init__(self, script: Path, reason: str) -> None:
        self.reason = reason
        super().__init__(f"the Functions runtime {runtime_version()} refused the app {script}: {reason}")


class InvocationFailed(RuntimeError):
    """The function raised (or the runtime could not bind its data): `str()` is the runtime's message."""

    def __init__(self, function: str, exception: protocol.RpcException | None) -> None:
        self.function = function
        self.message = exception.message if exception else "no exception reported"
        self.stack_trace = exception.stack_trace if exception else ""
        super().__init__(f"{function}: {self.message}")


@dataclass(frozen=True)
class LoadedApp:
    """An app the runtime indexed: its functions as `functions_metadata_request` reported them."""

    key: tuple[str, str]  # (directory, script file)
    functions: tuple[protocol.RpcFunctionMetadata, ...]

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
        """One `invocation_request` (with a new id unless given): the runtime converts the trigger data into the
        function's parameters, runs a sync function on its own thread pool and hands back the output bindings and
        the return value. Raises `InvocationFailed` with the runtime's message when the function (or the binding of
        its data) failed, as the host records a failed invocation."""
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

    def _send(self, handler: str, message: protocol.StreamingMessage) -> object:
        request = protocol.WorkerRequest(message, {"protos": protocol, "host": "127.0.0.1"})
        coroutine = getattr(self._runtime(), handler)(request)
        return asyncio.run_coroutine_threadsafe(coroutine, self._event_loop()).result()

    def load(self, directory: Path, script: str, *, keep_on_path: bool = True) -> LoadedApp:
        key = (str(directory.resolve()), script)
        with self._lock:
            if key in self._apps:
                return self._apps[key]
            _check_module_free(Path(key[0]) / script)
            with _app_on_path(directory, script, keep=keep_on_path):
                init = self._send(
                    "worker_init_request",
                    protocol.StreamingMessage(
                        request_id=str(uuid.uuid4()),
                        worker_init_request=protocol.WorkerInitRequest(
                            host_version="4", function_app_directory=key[0], worker_directory=key[0]
                        ),
                    ),
                )
            assert isinstance(init, protocol.WorkerInitResponse)
            if init.result.status != protocol.StatusResult.Success:
                reason = init.result.exception.message if init.result.exception else "no reason given"
                raise AppRefused(Path(key[0]) / script, reason)
            listed = self._send(
                "functions_metadata_request",
                protocol.StreamingMessage(
                    functions_metadata_request=protocol.FunctionsMetadataRequest(function_app_directory=key[0])
                ),
            )
            assert isinstance(listed, protocol.FunctionMetadataResponse)
            if not listed.function_metadata_results:
                raise AppRefused(Path(key[0]) / script, "it found no functions")
            app = LoadedApp(key, tuple(listed.function_metadata_results))
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
        message = protocol.StreamingMessage(
            invocation_request=protocol.InvocationRequest(
                invocation_id=invocation_id,
                function_id=function.function_id,
                input_data=input_data,
                trigger_metadata=trigger_metadata,
                trace_context=protocol.RpcTraceContext(trace_parent=tracing.trace_parent()),
            )
        )
        response = self._send("invocation_request", message)
        assert isinstance(response, protocol.InvocationResponse)
        if response.result.status != protocol.StatusResult.Success:
            raise InvocationFailed(function.name, response.result.exception)
        return response


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
