"""Hosting chosen by the load (docs/costs.md): infra/main.bicep deploys every function in one Flex Consumption app
by default, or, with httpHostingPlan Dedicated (the design scale's choice, infra/design-scale.parameters.json), the
HTTP functions in an app of their own on a Dedicated plan and the timers and queue workers in the Flex app: one code
package, each app turning off the other's functions by the app setting AzureWebJobs.<FUNCTION_NAME>.Disabled
(https://learn.microsoft.com/azure/azure-functions/disable-function, read 2026-11-28)."""

import json
import os
import re
import subprocess
import sys
from typing import Any

import pytest

from benchmarks import deployment_bill
from tests import bicep
from tests.infra.test_infra import ROOT, design_scale_parameters, section_of

SPLIT = {"httpHostingPlan": "Dedicated"}


def app_functions() -> dict[str, str]:
    """The app's functions as the runtime indexes them, by name: their trigger's binding type (a fresh process,
    as the host loads the app)."""
    probe = (
        "import json, function_app\n"
        "print(json.dumps({f.get_function_name(): f.get_trigger().get_binding_name()\n"
        "                  for f in function_app.app.get_functions()}))\n"
    )
    # What the start-up requires (functions/start_up.py); none of it is reached.
    environ = {
        **os.environ,
        "MONGODB_CONNECTION_STRING": "mongodb://127.0.0.1:9/",
        "AzureWebJobsStorage": "UseDevelopmentStorage=true",
    }
    environ.pop("APPLICATIONINSIGHTS_CONNECTION_STRING", None)
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, env=environ, capture_output=True, text=True, timeout=120, check=True
    )
    found: dict[str, str] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def turned_off(name: str) -> set[str]:
    """The functions a `var name` of main.bicep turns off (its AzureWebJobs.<name>.Disabled settings, each 'true')."""
    settings = bicep.literal(bicep.parse("main.bicep"), bicep.variable("main.bicep", name))
    assert set(settings.values()) == {"true"}
    found = set()
    for key in settings:
        matched = re.fullmatch(r"AzureWebJobs\.(\w+)\.Disabled", key)
        assert matched, key
        found.add(matched.group(1))
    return found


def test_each_app_turns_off_exactly_the_functions_the_other_runs_by_their_triggers():
    """Every function of the app is in one list: the HTTP-triggered ones off in the Flex app, every other off in
    the HTTP app. A function added to the app without a place in either fails here."""
    functions = app_functions()
    http = {name for name, trigger in functions.items() if trigger == "httpTrigger"}

    assert turned_off("httpFunctionsOff") == http
    assert turned_off("backgroundFunctionsOff") == set(functions) - http
    assert "post_events" in http
    assert {"aggregate_report_partition", "run_check_partition"} <= set(functions) - http


def test_by_default_every_function_runs_in_the_flex_app_and_no_second_plan_or_app_is_made():
    for name in ("httpPlan", "httpApp"):
        assert not bicep.deploys("main.bicep", name, {}), name
        assert bicep.deploys("main.bicep", name, SPLIT), name
    assert bicep.parse("main.bicep")["parameters"]["httpHostingPlan"]["default"] == "FlexConsumption"
    flex = bicep.module("main.bicep", "functionApp")["params"]["appSettings"]["function"]
    assert flex["type"] == "union"
    assert flex["parameters"]["arg_3"] == {
        "operator": {
            "type": "conditional",
            "operands": {"condition": "splitHttp", "true_value": "httpFunctionsOff", "false_value": {}},
        }
    }  # the HTTP functions off in the Flex app only when they have an app of their own
    http = bicep.module("main.bicep", "httpApp")["params"]["appSettings"]["function"]
    assert [str(arg) for arg in http["parameters"].values()] == [
        "appSettings",
        "appSettingOverrides",
        "backgroundFunctionsOff",
    ]


def test_the_http_plan_is_a_linux_premium_v3_plan_of_the_sizes_and_instances_the_bill_prices():
    plan = bicep.module("main.bicep", "httpPlan")["params"]
    assert (plan["kind"], plan["reserved"]) == ("linux", True)
    assert {k: str(v) for k, v in plan["sku"].items()} == {
        "name": "httpPlanSku",
        "tier": "PremiumV3",
        "capacity": "httpInstanceCount",
    }
    parameters = bicep.parse("main.bicep")["parameters"]
    dedicated = {s.name for s in deployment_bill.SIZES if s.plan == deployment_bill.DEDICATED_PLAN_NAME}
    sku = {d["type"]: d["argument"] for d in parameters["httpPlanSku"]["decorators"]}
    assert set(sku["allowed"]) == dedicated
    count = {d["type"]: d["argument"] for d in parameters["httpInstanceCount"]["decorators"]}
    assert (count["min_value"], count["max_value"]) == (1, deployment_bill.DEDICATED_MAX_INSTANCES)
    workers = {d["type"]: d["argument"] for d in parameters["httpWorkerProcessCount"]["decorators"]}
    assert workers["max_value"] == deployment_bill.MAX_WORKER_PROCESSES


def test_the_http_app_runs_python_3_13_always_on_one_worker_process_a_core_and_needs_no_storage_key():
    site = bicep.module("modules/httpapp.bicep", "httpApp")["params"]
    config = {key: value for key, value in site["siteConfig"].items() if key != "vnetRouteAllEnabled"}  # below
    assert config == {"alwaysOn": True, "linuxFxVersion": "Python|3.13", "minTlsVersion": "1.2"}
    assert site["kind"] == "functionapp,linux"
    assert [str(i) for i in site["managedIdentities"]["userAssignedResourceIds"]] == ["identityId"]
    [settings] = site["configs"]
    assert settings["retainCurrentAppSettings"] is False
    host = bicep.literal(bicep.parse("modules/httpapp.bicep"), bicep.variable("modules/httpapp.bicep", "hostSettings"))
    assert host["AzureWebJobsStorage__credential"] == "managedidentity"
    assert (host["FUNCTIONS_WORKER_RUNTIME"], host["FUNCTIONS_EXTENSION_VERSION"]) == ("python", "~4")
    assert not {"AzureWebJobsStorage", "WEBSITE_CONTENTAZUREFILECONNECTIONSTRING"} & set(host)
    raw = bicep.variable("modules/httpapp.bicep", "hostSettings")["FUNCTIONS_WORKER_PROCESS_COUNT"]
    assert raw == {"function": {"type": "string", "parameters": {"value_to_convert": "workerProcessCount"}}}
    assert str(bicep.module("main.bicep", "httpApp")["params"]["workerProcessCount"]) == "httpWorkerProcessCount"


def test_the_http_apps_telemetry_and_storage_settings_are_the_flex_apps():
    """Both apps send the same telemetry, at the same sampling, on the same identity: a change to the Flex app's
    (modules/functionapp.bicep) that the HTTP app's does not follow fails here."""
    flex = bicep.literal(bicep.parse("modules/functionapp.bicep"), bicep.variable("modules/functionapp.bicep",
                                                                                 "hostSettings"))  # fmt: skip
    http = bicep.literal(bicep.parse("modules/httpapp.bicep"), bicep.variable("modules/httpapp.bicep", "hostSettings"))
    assert {k: v for k, v in http.items() if k in flex} == flex
    # The sampler and OpenTelemetry come to both from main.bicep's one `telemetrySettings`, into their app settings.
    for module, app in (("modules/functionapp.bicep", "functionApp"), ("modules/httpapp.bicep", "httpApp")):
        assert "properties: union(hostSettings, telemetrySettings, appSettings)" in bicep.text(module), module
        assert not {
            k for k in bicep.literal(bicep.parse(module), bicep.variable(module, "hostSettings")) if "OTEL" in k
        }
        assert str(bicep.module("main.bicep", app)["params"]["telemetrySettings"]) == "telemetrySettings", app


def test_the_devices_address_is_the_http_apps_when_it_has_one_and_the_postdeploy_hook_deploys_to_it():
    outputs = bicep.text("main.bicep")
    assert "splitHttp ? httpApp.outputs.defaultHostName : functionApp.outputs.defaultHostName" in outputs
    assert "output AZURE_HTTP_APP_NAME string = splitHttp ? httpApp.outputs.name : ''" in outputs
    hook = ROOT / "infra" / "hooks" / "deploy-http-app.sh"
    assert os.access(hook, os.X_OK)
    assert 'func azure functionapp publish "$AZURE_HTTP_APP_NAME" --python' in hook.read_text()
    assert "./infra/hooks/deploy-http-app.sh" in (ROOT / "azure.yaml").read_text()
    # The deploy job has the hook's func: without it, a Dedicated deployment's HTTP app would be left without code.
    workflow = (ROOT / ".github" / "workflows" / "azure-dev.yml").read_text()
    deploy = workflow[workflow.index("\n  deploy:") :]
    assert deploy.index("run: npm i -g azure-functions-core-tools@4") < deploy.index("run: azd deploy")


def test_the_design_scale_deployment_takes_the_bills_hosting_choice():
    """infra/design-scale.parameters.json deploys the hosting docs/costs.md's bill chose (both from the last full
    run): the plan, its size and instances, a worker process a core."""
    given: dict[str, Any] = design_scale_parameters()
    table = section_of((ROOT / "docs" / "costs.md").read_text(), "## The bill")
    chosen = re.search(r"the HTTP requests on \*\*(\d+) (P\dv3) instances\*\*", table)
    if given.get("httpHostingPlan", "FlexConsumption") == "FlexConsumption":
        assert chosen is None
        return
    assert chosen, "docs/costs.md's bill names no Dedicated plan"
    assert (given["httpInstanceCount"], given["httpPlanSku"]) == (int(chosen.group(1)), chosen.group(2))
    size = next(s for s in deployment_bill.SIZES if s.name == given["httpPlanSku"])
    assert given["httpWorkerProcessCount"] == min(size.cores, deployment_bill.MAX_WORKER_PROCESSES)
    assert given["httpInstanceCount"] <= deployment_bill.DEDICATED_MAX_INSTANCES


@pytest.mark.parametrize("hosting", ["FlexConsumption", "Dedicated"])
def test_the_hosting_parameter_takes_only_what_the_bicep_deploys(hosting):
    allowed = bicep.parse("main.bicep")["parameters"]["httpHostingPlan"]["decorators"]
    assert hosting in json.dumps(allowed, default=str)
    assert {deployment_bill.FLEX_HOSTING, deployment_bill.DEDICATED_HOSTING} == {"FlexConsumption", "Dedicated"}


def test_the_http_app_in_the_network_routes_all_its_traffic_through_it():
    """With vnetEnabled its Key Vault reference (the connection string), Cosmos DB and the storage are private
    endpoints, which a Linux App Service app reaches only with all traffic routed through the network."""
    tree = bicep.parse("modules/httpapp.bicep")
    params = bicep.module("modules/httpapp.bicep", "httpApp")["params"]
    subnet = "/subscriptions/s/resourceGroups/g/providers/Microsoft.Network/virtualNetworks/v/subnets/app"
    for given, routed in ((subnet, True), ("", False)):
        scope = {"virtualNetworkSubnetId": given}
        assert bicep.evaluate(tree, params["siteConfig"], scope)["vnetRouteAllEnabled"] is routed
        assert bicep.evaluate(tree, params["virtualNetworkSubnetResourceId"], scope) == (given or None)
