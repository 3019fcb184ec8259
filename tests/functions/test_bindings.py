"""Every registered function's bindings agree with openapi.yaml, docs/operations.md, the settings class and the infra:
HTTP routes, methods and auth levels; timer schedules and queue names from app settings (`%SETTING%`); queue
output bindings only for work queues that a function of the app consumes (the host writes outputs after the
function returns, so what must be sent at least once, the notifications, goes with the SDK), and every queue is
one the infra creates. Written over the functions the pinned Functions runtime indexed and reported to the host
(tests/conftest.py `registered_functions`), so new ones are checked as they land."""

import json
import re
from typing import Any

import pytest
import yaml

from shared.settings import Settings
from tests import bicep
from tools.ncrontab import Schedule

ROOT = bicep.ROOT
KNOWN_BINDINGS = {"httpTrigger", "http", "timerTrigger", "queue", "queueTrigger"}
SETTING_REFERENCE = re.compile(r"%([A-Z0-9_]+)%")
AUTH_IN_DOCS = {"function": "function key", "anonymous": "anonymous"}

Binding = dict[str, Any]


def bindings_of(function: Any) -> list[Binding]:
    """A function's bindings from the runtime's metadata (`RpcFunctionMetadata.raw_bindings`), as the host reads
    them; checked against the typed `bindings` the runtime reported beside them."""
    found: list[Binding] = [json.loads(raw) for raw in function.raw_bindings]
    directions = {"IN": 0, "OUT": 1}
    typed = {name: (info.type, info.direction) for name, info in function.bindings.items()}
    assert typed == {b["name"]: (b["type"], directions[b["direction"]]) for b in found}, function.name
    return found


def functions_with(registered: dict[str, Any], binding_type: str) -> dict[str, list[Binding]]:
    """name -> bindings of the registered functions having a binding of this type."""
    every = {name: bindings_of(function) for name, function in registered.items()}
    return {name: found for name, found in every.items() if any(b["type"] == binding_type for b in found)}


def one(bindings: list[Binding], binding_type: str) -> Binding:
    [found] = [binding for binding in bindings if binding["type"] == binding_type]
    return found


def openapi() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "openapi.yaml").read_text())
    return loaded


def route_prefix() -> str:
    prefix: str = json.loads((ROOT / "host.json").read_text())["extensions"]["http"]["routePrefix"]
    return prefix


def openapi_path(route: str) -> str:
    """`bottles/{bottle_id:alpha}` -> `/bottles/{bottle_id}`: the route as OpenAPI writes it."""
    return "/" + re.sub(r"\{(\w+)(?::[^}]*)?\??\}", r"{\1}", route)


def setting_named(reference: str, where: str) -> str:
    """The Settings field a `%SETTING%` binding expression names."""
    match = SETTING_REFERENCE.fullmatch(reference)
    assert match, f"{where}: '{reference}' is not read from an app setting (%SETTING%)"
    field = match.group(1).lower()
    assert field in Settings.model_fields, f"{where}: {match.group(1)} is not a setting of shared/settings.py"
    return field


def documented_functions() -> dict[str, dict[str, str]]:
    """The deployed-functions table (docs/operations.md): name -> {trigger, auth, output} cells."""
    doc = (ROOT / "docs" / "operations.md").read_text()
    header = "| function | trigger | auth | output |"
    assert header in doc, f"docs/operations.md lacks the deployed-functions table `{header}`"
    rows: dict[str, dict[str, str]] = {}
    for line in doc[doc.index(header) :].splitlines()[2:]:
        if not line.startswith("|"):
            break
        name, trigger, auth, output = (cell.strip() for cell in line.strip("|").split("|"))
        rows[name.strip("`")] = {"trigger": trigger, "auth": auth, "output": output}
    return rows


def test_every_binding_is_of_a_kind_these_checks_cover(registered_functions: dict[str, Any]) -> None:
    for name, function in registered_functions.items():
        kinds = {binding["type"] for binding in bindings_of(function)}
        assert kinds <= KNOWN_BINDINGS, f"{name}: extend tests/functions/test_bindings.py for {kinds - KNOWN_BINDINGS}"


def test_http_routes_methods_and_auth_levels_match_the_openapi_document(registered_functions: dict[str, Any]) -> None:
    http = functions_with(registered_functions, "httpTrigger")
    assert http, "no HTTP function registered"
    paths = openapi()["paths"]
    for name, found in http.items():
        trigger = one(found, "httpTrigger")
        path = openapi_path(trigger["route"])
        assert path in paths, f"{name}: route {path} is not in openapi.yaml"
        for method in trigger["methods"]:
            operation = paths[path].get(method.lower())
            assert operation, f"{name}: {method} {path} is not in openapi.yaml"
            assert operation["operationId"] == name, f"{method} {path}: operationId should be {name}"
            schemes = {scheme for entry in operation.get("security", []) for scheme in entry}
            needs_key = trigger["authLevel"].lower() != "anonymous"
            assert ("functionKey" in schemes) == needs_key, f"{name}: auth {trigger['authLevel']} vs {schemes}"


def test_every_openapi_operation_is_a_registered_function_at_that_route(registered_functions: dict[str, Any]) -> None:
    served = {
        (openapi_path(one(found, "httpTrigger")["route"]), method.lower()): name
        for name, found in functions_with(registered_functions, "httpTrigger").items()
        for method in one(found, "httpTrigger")["methods"]
    }
    for path, item in openapi()["paths"].items():
        for method, operation in item.items():
            if method == "parameters":
                continue
            assert served.get((path, method)) == operation["operationId"], f"openapi.yaml {method.upper()} {path}"


def test_openapi_servers_and_path_parameters_match_the_host() -> None:
    document = openapi()
    for server in document["servers"]:
        assert server["url"].endswith(f"/{route_prefix()}"), server["url"]
    for path, item in document["paths"].items():
        declared = {
            param.get("name") or document["components"]["parameters"][param["$ref"].rsplit("/", 1)[1]]["name"]
            for param in item.get("parameters", [])
        }
        assert declared >= set(re.findall(r"\{(\w+)\}", path)), f"openapi.yaml {path}: undeclared path parameters"


def test_the_operations_doc_lists_every_function_with_its_trigger_auth_and_output(
    registered_functions: dict[str, Any],
) -> None:
    rows = documented_functions()
    assert set(rows) == set(registered_functions), (
        f"docs/operations.md functions table: missing {sorted(set(registered_functions) - set(rows))}, "
        f"not registered {sorted(set(rows) - set(registered_functions))}"
    )
    for name, function in registered_functions.items():
        found, row = bindings_of(function), rows[name]
        if any(b["type"] == "httpTrigger" for b in found):
            trigger = one(found, "httpTrigger")
            methods = ", ".join(trigger["methods"])
            assert row["trigger"] == f"`{methods} /{route_prefix()}/{trigger['route']}`", name
            assert row["auth"].startswith(AUTH_IN_DOCS[trigger["authLevel"].lower()]), name
        if any(b["type"] == "timerTrigger" for b in found):
            assert row["trigger"] == f"timer `{one(found, 'timerTrigger')['schedule']}`", name
        if any(b["type"] == "queueTrigger" for b in found):
            assert row["trigger"] == f"queue `{one(found, 'queueTrigger')['queueName']}`", name
        queues = [b["queueName"] for b in found if b["type"] == "queue" and b["direction"] == "OUT"]
        assert row["output"] == ", ".join(f"queue `{queue}`" for queue in queues), name


def test_timer_schedules_come_from_settings_whose_defaults_are_valid_ncrontab(
    registered_functions: dict[str, Any],
) -> None:
    timers = functions_with(registered_functions, "timerTrigger")
    if not timers:
        pytest.skip("no timer function registered yet")
    for name, found in timers.items():
        trigger = one(found, "timerTrigger")
        field = setting_named(trigger["schedule"], name)
        Schedule.parse(str(Settings.model_fields[field].default))
        assert not trigger.get("runOnStartup"), f"{name}: runOnStartup re-runs the timer on every scale-out"


def test_the_queue_the_checks_send_to_is_created_by_the_infra_and_deployed_as_the_default() -> None:
    tree = bicep.parse("main.bicep")
    created = {queue["name"] for queue in bicep.literal(tree, bicep.module("main.bicep", "storage")["params"])[
        "queueServices"]["queues"]}  # fmt: skip
    deployed = bicep.literal(tree, bicep.variable("main.bicep", "appSettings"))
    queue = Settings.model_fields["notifications_queue"].default
    assert deployed["NOTIFICATIONS_QUEUE"] == queue, "infra/main.bicep sets NOTIFICATIONS_QUEUE otherwise"
    assert queue in created, f"infra/main.bicep does not create queue '{queue}'"


def created_queues() -> set[str]:
    tree = bicep.parse("main.bicep")
    queues = bicep.literal(tree, bicep.module("main.bicep", "storage")["params"])["queueServices"]["queues"]
    return {str(queue["name"]) for queue in queues}


def test_queue_outputs_only_feed_work_queues_that_the_app_consumes(registered_functions: dict[str, Any]) -> None:
    """A queue output binding is written by the host after the function returns, so it may carry only messages
    whose loss the next run repairs: work messages for the app's own queue-triggered functions."""
    every = {name: bindings_of(function) for name, function in registered_functions.items()}
    triggers = {b["queueName"] for found in every.values() for b in found if b["type"] == "queueTrigger"}
    for name, found in every.items():
        for output in (b for b in found if b["type"] == "queue"):
            assert output["direction"] == "OUT", name
            assert output["queueName"] in triggers, f"{name}: output to {output['queueName']}, which no function reads"
            assert output["queueName"] != "%NOTIFICATIONS_QUEUE%", f"{name}: notifications are sent with the SDK"


def test_queue_triggers_read_queues_named_by_settings_that_the_infra_creates(
    registered_functions: dict[str, Any],
) -> None:
    triggered = functions_with(registered_functions, "queueTrigger")
    assert triggered, "no queue-triggered function registered"
    deployed = bicep.literal(bicep.parse("main.bicep"), bicep.variable("main.bicep", "appSettings"))
    for name, found in triggered.items():
        trigger = one(found, "queueTrigger")
        field = setting_named(trigger["queueName"], name)
        assert trigger["connection"] == "AzureWebJobsStorage", name
        default = str(Settings.model_fields[field].default)
        assert deployed.get(field.upper()) == default, f"infra/main.bicep sets {field.upper()} otherwise"
        assert default in created_queues(), f"infra/main.bicep does not create queue '{default}'"
