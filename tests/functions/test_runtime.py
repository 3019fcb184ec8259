"""The app as the pinned Azure Functions Python runtime (azure-functions-runtime, requirements.txt) sees it: indexed
through the runtime's `worker_init_request` and listed by its `functions_metadata_request`, refused whole when one
annotation is of a form it rejects, and invoked through `invocation_request` with the trigger data converted by the
runtime and sync functions run on its thread pool (tools/host/, tools/local_host.py)."""

import json
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import azure.functions as func
import pytest

from functions.bindings import QueueMessages
from tools.host.worker import AppRefused, runtime_version
from tools.local_host import APP_ROOT, LocalHost

# What the runtime reports of each function: trigger (with its auth level, or its %SETTING%), and every other
# binding as (type, direction, %SETTING% of its queue). Written out, so that a function that moves is a decision.
EXPECTED = {
    "provision_bottle": (("httpTrigger", "PUT bottles/{bottle_id}", "FUNCTION"), [("http", "OUT", None)]),
    "get_bottle": (("httpTrigger", "GET bottles/{bottle_id}", "FUNCTION"), [("http", "OUT", None)]),
    "post_events": (("httpTrigger", "POST bottles/{bottle_id}/events", "ANONYMOUS"), [("http", "OUT", None)]),
    "get_user_reports": (("httpTrigger", "GET users/{user_id}/reports", "FUNCTION"), [("http", "OUT", None)]),
    "get_user_notifications": (
        ("httpTrigger", "GET users/{user_id}/notifications", "FUNCTION"),
        [("http", "OUT", None)],
    ),
    "aggregate_reports": (("timerTrigger", "%REPORTS_SCHEDULE%", None), [("queue", "OUT", "%REPORTS_QUEUE%")]),
    "aggregate_report_partition": (("queueTrigger", "%REPORTS_QUEUE%", None), []),
    "check_open_bottles": (
        ("timerTrigger", "%CHECK_OPEN_BOTTLES_SCHEDULE%", None),
        [("queue", "OUT", "%CHECKS_QUEUE%")],
    ),
    "check_silent_bottles": (
        ("timerTrigger", "%CHECK_SILENT_BOTTLES_SCHEDULE%", None),
        [("queue", "OUT", "%CHECKS_QUEUE%")],
    ),
    "check_late_doses": (("timerTrigger", "%CHECK_LATE_DOSES_SCHEDULE%", None), [("queue", "OUT", "%CHECKS_QUEUE%")]),
    "run_check_partition": (("queueTrigger", "%CHECKS_QUEUE%", None), []),
}


def reported(function: Any) -> tuple[tuple[str, str, str | None], list[tuple[str, str, str | None]]]:
    """A function's trigger and other bindings, read from the raw bindings the runtime reported."""
    raw = [json.loads(binding) for binding in function.raw_bindings]
    [trigger] = [b for b in raw if b["type"].endswith("Trigger")]
    if trigger["type"] == "httpTrigger":
        [method] = trigger["methods"]
        shown = (trigger["type"], f"{method} {trigger['route']}", trigger["authLevel"])
    else:
        shown = (trigger["type"], trigger.get("schedule") or trigger["queueName"], None)
    others = [(b["type"], b["direction"], b.get("queueName")) for b in raw if b is not trigger]
    return shown, others


def test_the_pinned_runtime_indexes_all_eleven_functions_as_written(registered_functions):
    assert {name: reported(function) for name, function in registered_functions.items()} == EXPECTED
    for function in registered_functions.values():
        assert function.language == "python"
        assert function.script_file.endswith("function_app.py")
        assert function.properties == {"worker_indexed": "True"}  # indexed by the worker, as in Azure


def test_the_runtime_that_indexed_them_is_the_one_requirements_txt_pins():
    pinned = [line for line in (APP_ROOT / "requirements.txt").read_text().splitlines() if line.startswith("azure-")]
    assert f"azure-functions-runtime=={runtime_version()}" in pinned


def out_list_app() -> func.FunctionApp:
    app = func.FunctionApp()

    @app.function_name("fan_out")
    @app.timer_trigger(arg_name="timer", schedule="0 */5 * * * *")
    @app.queue_output(arg_name="work", queue_name="work", connection="AzureWebJobsStorage")
    def fan_out(timer: func.TimerRequest, work: func.Out[list[str]]) -> None:
        work.set(["one"])

    @app.function_name("hello")
    @app.route(route="hello", methods=["GET"], auth_level=func.AuthLevel.ANONYMOUS)
    def hello(req: func.HttpRequest) -> func.HttpResponse:
        return func.HttpResponse("hi")

    return app


def test_an_app_with_one_pep_585_out_annotation_is_refused_whole_with_the_runtime_s_message():
    with pytest.raises(AppRefused) as refused:
        LocalHost.for_app_object(out_list_app())
    assert refused.value.reason == (
        "FunctionLoadError: cannot load the fan_out function: binding work has invalid non-type annotation "
        "azure.functions._abc.Out[list[str]]"
    )


def broken_copy(tmp_path: Path) -> Path:
    """A copy of the app whose report dispatcher takes `func.Out[list[str]]`, as main did before the runtime ran."""
    copy = tmp_path / "app"
    ignored = shutil.ignore_patterns(".git", ".venv", "node_modules", "mutants", "__pycache__", "*.png")
    shutil.copytree(APP_ROOT, copy, ignore=ignored)
    reports = copy / "functions" / "reports.py"
    reports.write_text(reports.read_text().replace("func.Out[QueueMessages]", "func.Out[list[str]]"))
    return copy


@pytest.mark.parametrize(
    "command",
    [
        ["./dev serve", "tools.serve", "--port", "0"],
        ["./dev simulate", "tools.simulate", "--bottles", "2", "--users", "1", "--days", "0.01"],
        ["./dev lifecycle", "tools.lifecycle", "--days", "1", "--bottles", "2"],
    ],
    ids=["serve", "simulate", "lifecycle"],
)
def test_each_local_command_stops_at_once_on_an_app_the_runtime_refuses(tmp_path, command):
    copy = broken_copy(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "tools.command", *command],
        cwd=copy,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert (
        f"{command[0]}: error: the Functions runtime {runtime_version()} refused the app {copy / 'function_app.py'}: "
        "FunctionLoadError: cannot load the aggregate_reports function: binding work has invalid non-type "
        "annotation azure.functions._abc.Out[list[str]]"
    ) in done.stderr


class Seen:
    def __init__(self) -> None:
        self.calls: dict[str, dict[str, Any]] = {}


def recording_app(seen: Seen) -> func.FunctionApp:
    """One function per trigger kind, each recording what the runtime handed it and on which thread."""
    app = func.FunctionApp(http_auth_level=func.AuthLevel.ANONYMOUS)

    @app.function_name("echo")
    @app.route(route="echo/{name}", methods=["POST"])
    def echo(req: func.HttpRequest) -> func.HttpResponse:
        seen.calls["echo"] = {
            "type": type(req),
            "route": dict(req.route_params),
            "query": dict(req.params),
            "body": req.get_body(),
            "header": req.headers.get("x-probe"),
            "thread": threading.current_thread().name,
        }
        return func.HttpResponse(json.dumps({"hello": req.route_params["name"]}), status_code=201, mimetype="a/b")

    @app.function_name("every_minute")
    @app.timer_trigger(arg_name="timer", schedule="0 * * * * *")
    @app.queue_output(arg_name="out", queue_name="fanned", connection="AzureWebJobsStorage")
    def every_minute(timer: func.TimerRequest, out: func.Out[QueueMessages]) -> None:
        seen.calls["every_minute"] = {"type": type(timer), "past_due": timer.past_due}
        out.set(["first", "second"])

    @app.function_name("take")
    @app.queue_trigger(arg_name="message", queue_name="fanned", connection="AzureWebJobsStorage")
    def take(message: func.QueueMessage) -> None:
        seen.calls.setdefault("take", {}).update(
            {
                "type": type(message),
                "bodies": [*seen.calls.get("take", {}).get("bodies", []), message.get_body()],
                "dequeue_count": message.dequeue_count,
                "has_times": message.insertion_time is not None and message.expiration_time is not None,
            }
        )

    @app.function_name("fails")
    @app.route(route="fails", methods=["GET"])
    def fails(req: func.HttpRequest) -> func.HttpResponse:
        raise RuntimeError("boom")

    return app


def test_every_trigger_s_data_reaches_the_function_converted_by_the_runtime_on_its_thread_pool():
    seen = Seen()
    host = LocalHost.for_app_object(recording_app(seen))

    response = host.handle(
        "POST", "/api/echo/ada", headers={"x-probe": "1"}, params={"q": "v"}, body=b'{"a": 1}', url="http://x/api/echo"
    )
    assert (response.status_code, json.loads(response.get_body())) == (201, {"hello": "ada"})
    assert response.mimetype == "a/b"
    call = seen.calls["echo"]
    assert issubclass(call["type"], func.HttpRequest)
    assert (call["route"], call["query"], call["body"], call["header"]) == (
        {"name": "ada"},
        {"q": "v"},
        b'{"a": 1}',
        "1",
    )
    assert call["thread"] != threading.current_thread().name  # the runtime's pool, not the caller's thread

    assert host.run_timer("every_minute", past_due=True) == ["first", "second"]
    assert seen.calls["every_minute"]["past_due"] is True
    assert issubclass(seen.calls["every_minute"]["type"], func.TimerRequest)

    report = host.deliver()
    assert report.delivered == 2
    take = seen.calls["take"]
    assert issubclass(take["type"], func.QueueMessage)
    assert (sorted(take["bodies"]), take["dequeue_count"], take["has_times"]) == ([b"first", b"second"], 1, True)


def test_a_function_that_raises_is_the_host_s_empty_500():
    host = LocalHost.for_app_object(recording_app(Seen()))
    response = host.handle("GET", "/api/fails", headers={}, params={}, body=b"")
    assert (response.status_code, response.get_body()) == (500, b"")
