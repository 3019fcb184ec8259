"""The infrastructure and the code agree, offline: infra/*.bicep (parsed with pycep), host.json, azure.yaml,
.funcignore, local.settings.json.example and the docs against shared/store/schema.py and shared/settings.py.

Everything is compared with the Python source as it is now, so a collection, index or setting added to the code
fails here until infra/ (and the example settings, and docs/configuration.md) have it too."""

import ast
import fnmatch
import importlib.metadata
import json
import re
import subprocess
import sys
from datetime import timedelta
from typing import Any

import mongomock
import pytest
import yaml
from packaging.requirements import Requirement
from pymongo import common as pymongo_common

from shared.archive import layout
from shared.settings import Settings
from shared.store.schema import collection_specs
from shared.store.setup import ensure_store
from shared.telemetry import metrics, observability
from tests import bicep
from tests.cosmos_fakes import FakeCosmosDatabase
from tools.bicep_collections import bicep_parameter

ROOT = bicep.ROOT
BICEP_FILES = sorted(str(path.relative_to(bicep.INFRA)) for path in bicep.INFRA.rglob("*.bicep"))

# App settings that no Settings field reads, each with the reader that needs it.
HOST_APP_SETTINGS = {
    "AzureWebJobsStorage__accountName": "the Functions host: identity-based storage",
    "AzureWebJobsStorage__credential": "the same connection: authenticate with a managed identity",
    "APPLICATIONINSIGHTS_CONNECTION_STRING": "the host, and the distro "
    "(shared/telemetry/observability.py: configure_telemetry)",
    "APPLICATIONINSIGHTS_AUTHENTICATION_STRING": "Entra ID telemetry auth (App Insights local auth is off)",
    "PYTHON_ENABLE_OPENTELEMETRY": "the Python worker streams OpenTelemetry logs; the host does not repeat them",
    "PYTHON_THREADPOOL_THREAD_COUNT": "the Python worker's threads for synchronous functions: one per concurrent "
    "invocation (infra/modules/functionapp.bicep)",
    "OTEL_TRACES_SAMPLER": "the trace sampler of the host (azure-functions-host PR 11568) and the distro alike: a "
    "fixed percentage (main.bicep telemetrySettings)",
    "OTEL_TRACES_SAMPLER_ARG": "the share of traces kept; logs below WARNING follow their trace's sampling",
}
LOCAL_HOST_SETTINGS = {
    "FUNCTIONS_WORKER_RUNTIME": "func start needs the worker language (Flex Consumption: functionAppConfig)",
    "AzureWebJobsFeatureFlags": "EnableWorkerIndexing, for Core Tools older than the v2 model's default",
}
# Settings the code reads that only one side sets, each with the reason.
LOCAL_ONLY_SETTINGS = {
    "AzureWebJobsStorage": "a storage connection string (Azurite's) for func start and the tests; in Azure the "
    "identity-based AzureWebJobsStorage__* settings replace it, and no storage key is deployed",
}
AZURE_ONLY_SETTINGS = {
    "AzureWebJobsStorage__queueServiceUri": "the identity-based queue endpoint; locally the connection string wins",
    "AzureWebJobsStorage__clientId": "the app's user-assigned identity; there is none locally",
    "AzureWebJobsStorage__blobServiceUri": "the identity-based blob endpoint of the archive's container; locally the "
    "connection string wins",
}


def env_name(field: str) -> str:
    """The app setting a Settings field reads: its alias (the host's own names), else its upper-cased name."""
    alias = Settings.model_fields[field].validation_alias
    return alias if isinstance(alias, str) else field.upper()


FIELDS = {env_name(field): field for field in Settings.model_fields}


def env_names() -> set[str]:
    return set(FIELDS)


def parses_to_default(name: str, value: str) -> bool:
    field = FIELDS[name]
    return bool(getattr(Settings(**{name: value}), field) == Settings.model_fields[field].default)


# --- collections, shard keys, indexes ---------------------------------------------------------------------


Collections = dict[str, tuple[str, list[tuple[tuple[str, ...], bool, int | None]]]]


def bicep_collections() -> Collections:
    """name -> (shard key, '' if unsharded; sorted (key names, unique, TTL seconds) per index), as deployed."""
    entries = bicep.literal(bicep.parse("modules/cosmos.bicep"), bicep.variable("modules/cosmos.bicep", "collections"))
    found: Collections = {}
    for entry in entries:
        indexes = [
            (tuple(index["key"]["keys"]), bool(index.get("options", {}).get("unique", False)),
             index.get("options", {}).get("expireAfterSeconds"))
            for index in entry["indexes"]
        ]  # fmt: skip
        found[entry["name"]] = (entry["shardKey"], sorted(indexes, key=repr))
    return found


def setup_command_collections() -> Collections:
    """The same, as the setup command creates them on Cosmos DB (shard keys through customAction)."""
    fake = FakeCosmosDatabase(mongomock.MongoClient().db)
    ensure_store(fake, Settings(), on_cosmos=True)
    found: Collections = {}
    for name, shard_key in fake.shard_keys.items():
        indexes = [
            (tuple(key for key, _direction in info["key"]), bool(info.get("unique", False)),
             info.get("expireAfterSeconds"))
            for info in fake.db[name].index_information().values()
        ]  # fmt: skip
        found[name] = (shard_key or "", sorted(indexes, key=repr))
    return found


def test_bicep_creates_the_collections_shard_keys_and_indexes_the_setup_command_creates() -> None:
    expected = setup_command_collections()
    assert set(expected) == {spec.name for spec in collection_specs(Settings())}
    assert bicep_collections() == expected, (
        "infra/modules/cosmos.bicep `var collections` differs from shared/store/schema.py: "
        "paste the output of `python -m tools.bicep_collections` over it"
    )


def test_retention_is_deployed_from_parameters_that_set_both_the_ttl_and_the_app_setting() -> None:
    """Each growing collection's TTL on `_ts` and the app setting of its days come from one parameter of
    main.bicep, whose default is the code's."""
    main = bicep.parse("main.bicep")
    passed = bicep.module("main.bicep", "cosmos")["params"]
    app = bicep.variable("main.bicep", "appSettings")
    cosmos_params = bicep.parse("modules/cosmos.bicep")["parameters"]
    settings = [name for name in Settings.model_fields if name.endswith("_retention_days")]
    assert len(settings) == 4
    for setting in settings:
        param = bicep_parameter(setting)
        assert main["parameters"][param]["default"] == Settings.model_fields[setting].default, param
        assert cosmos_params[param]["default"] == Settings.model_fields[setting].default, param
        assert str(passed[param]) == param
        assert param in json.dumps(app[setting.upper()], default=str)
    assert f"{bicep_parameter('actions_retention_days')} * 86400" in bicep.text("modules/cosmos.bicep")


def test_each_collection_entry_is_deployed_with_its_shard_key_indexes_and_autoscale_throughput() -> None:
    loop = bicep.resource("modules/cosmos.bicep", "collection")
    assert loop["type"] == "Microsoft.DocumentDB/databaseAccounts/mongodbDatabases/collections"
    assert loop["config"]["loop_type"]["detail"] == {"item_name": "c", "array_name": "collections"}
    body = json.dumps(loop["config"]["config"], default=str)
    for uses in ('"operand_2": "name"', '"operand_2": "indexes"', '"operand_2": "shardKey"', "Hash"):
        assert uses in body, f"the collection loop no longer uses {uses}"
    assert set(deployed_throughput({})["bottles"]) == {"autoscaleSettings"}
    named = deployed_throughput({"standardThroughputByCollection": {"bottle_heartbeats": 195000, "leases": 5000}})
    assert named["bottle_heartbeats"] == {"throughput": 195000}  # a collection named there: standard (manual)
    assert named["leases"] == {"throughput": 400}  # the unsharded one keeps its own standard throughput
    assert set(named["bottles"]) == {"autoscaleSettings"}  # any other: autoscale
    cosmos_params = bicep.parse("modules/cosmos.bicep")["parameters"]
    assert {"type": "min_value", "argument": 1000} in cosmos_params["defaultMaxThroughput"]["decorators"]
    assert cosmos_params["standardThroughputByCollection"]["default"] == {}  # autoscale unless the bill says
    main_params = bicep.parse("main.bicep")["parameters"]
    assert {"cosmosMaxThroughput", "cosmosMaxThroughputByCollection", "cosmosStandardThroughputByCollection"} <= (
        main_params.keys()
    )
    passed = bicep.module("main.bicep", "cosmos")["params"]
    assert str(passed["standardThroughputByCollection"]) == "cosmosStandardThroughputByCollection"


DESIGN_SCALE = bicep.INFRA / "design-scale.parameters.json"


def design_scale_parameters() -> dict[str, Any]:
    given: dict[str, Any] = json.loads(DESIGN_SCALE.read_text())["parameters"]
    return {name: entry["value"] for name, entry in given.items()}


def test_the_design_scale_deployment_takes_the_bills_choice_for_every_collection() -> None:
    """infra/design-scale.parameters.json (written by the last full `./dev bench` with docs/costs.md's table) sets
    each collection as the bill chose: standard RU/s where standard throughput is the cheaper, else autoscale's
    maximum; every collection of the schema once."""
    given = design_scale_parameters()
    assert set(given) <= set(bicep.parse("main.bicep")["parameters"]), "unknown parameters in the design-scale file"
    standard, autoscale = given["cosmosStandardThroughputByCollection"], given["cosmosMaxThroughputByCollection"]
    assert not set(standard) & set(autoscale)
    assert set(standard) | set(autoscale) == {spec.name for spec in collection_specs(Settings())}
    table = section_of((ROOT / "docs" / "costs.md").read_text(), "## The bill")
    chosen = dict(re.findall(r"^\| `(\w+)` \| [^|]* \| ([^|]+) \|", table, re.MULTILINE))
    for name, ru in standard.items():
        assert chosen[name].strip() == f"standard {ru:,} RU/s", name
    for name, ru in autoscale.items():
        assert chosen[name].strip() == f"autoscale, max {ru:,} RU/s", name
    assert all(isinstance(ru, int) and ru >= 400 for ru in standard.values())
    assert all(isinstance(ru, int) and ru >= 1000 and ru % 1000 == 0 for ru in autoscale.values())
    # The settings the bill counts on (the tally's 64 partitions), each a real setting with a value it accepts.
    overrides = given["appSettingOverrides"]
    assert overrides == {"REPORTS_PARTITIONS": "64"}
    assert Settings(**overrides).reports_partitions == 64


def test_the_design_scale_deployment_takes_the_functions_bills_memory_and_always_ready_instances() -> None:
    """infra/design-scale.parameters.json deploys the Functions part of the bill docs/costs.md shows (both from the
    last full run): the Flex app's instance memory, its always-ready HTTP instances (none when the HTTP functions
    have a plan of their own: tests/infra/test_hosting.py), and room for twice the busy ones."""
    given = design_scale_parameters()
    table = section_of((ROOT / "docs" / "costs.md").read_text(), "## The bill")
    memory = re.search(r"Flex Consumption instances of \*{0,2}([\d,]+) MB", table)
    assert memory, "docs/costs.md's bill has no Functions part"
    assert given["instanceMemoryMB"] == int(memory.group(1).replace(",", ""))
    if given.get("httpHostingPlan", "FlexConsumption") == "FlexConsumption":
        ready = re.search(r"\*\*(\d+) of them always-ready HTTP instances\*\*", table)
        assert ready, "docs/costs.md's bill has no always-ready instances"
        assert given["httpAlwaysReadyInstances"] == int(ready.group(1))
    else:
        assert given["httpAlwaysReadyInstances"] == 0
    assert given["httpAlwaysReadyInstances"] < given["maximumInstanceCount"] <= 1000


def test_always_ready_http_instances_are_a_parameter_off_by_default() -> None:
    """Flex Consumption's always-ready instances bill a baseline all the time (benchmarks/deployment_bill.py
    RULES): none unless asked for, and then for the HTTP functions' group ('http')."""
    ready = site()["functionAppConfig"]["scaleAndConcurrency"]["alwaysReady"]["operator"]["operands"]
    assert ready["true_value"] == [{"name": "http", "instanceCount": "httpAlwaysReadyInstances"}]
    assert ready["false_value"] == []
    assert "httpAlwaysReadyInstances" in json.dumps(ready["condition"], default=str)
    for relative in ("main.bicep", "modules/functionapp.bicep"):
        assert bicep.parse(relative)["parameters"]["httpAlwaysReadyInstances"]["default"] == 0, relative
    assert str(bicep.module("main.bicep", "functionApp")["params"]["httpAlwaysReadyInstances"]) == (
        "httpAlwaysReadyInstances"
    )


def test_the_cosmos_account_scales_each_partition_and_region_on_its_own() -> None:
    """Dynamic scaling (https://learn.microsoft.com/azure/cosmos-db/autoscale-per-partition-region): an autoscale
    collection's partitions bill their own peaks, the model's autoscale rule (tools/costs/rules.py RULES);
    the property needs API 2024-11-15 or later (autoscale FAQ)."""
    account = bicep.resource("modules/cosmos.bicep", "account")
    assert account["config"]["properties"]["enablePerRegionPerPartitionAutoscale"] is True
    assert account["api_version"] >= "2024-11-15"


def test_the_cosmos_account_speaks_a_version_the_driver_supports_and_does_not_retry_throttled_requests() -> None:
    account = bicep.resource("modules/cosmos.bicep", "account")["config"]
    tree = bicep.parse("modules/cosmos.bicep")
    assert account["kind"] == "MongoDB"
    capabilities = {entry["name"] for entry in account["properties"]["capabilities"]}
    assert "EnableMongo" in capabilities
    # The app handles throttling itself, within its deadlines; server-side retry would hold requests up to 60 s.
    assert "DisableRateLimitingResponses" not in capabilities
    version = bicep.literal(tree, account["properties"]["apiProperties"]["serverVersion"])
    # pymongo refuses a server older than its MIN_SUPPORTED_SERVER_VERSION (4.4 for 4.20) at the first command.
    assert _version(version) >= _version(pymongo_common.MIN_SUPPORTED_SERVER_VERSION)


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


# --- alerts -------------------------------------------------------------------------------------------------


def alert_rules() -> dict[str, dict[str, Any]]:
    """infra/modules/alerts.bicep `var rules` by name, thresholds and windows at their parameters' defaults."""
    rules = bicep.literal(bicep.parse("modules/alerts.bicep"), bicep.variable("modules/alerts.bicep", "rules"))
    return {rule["name"]: rule for rule in rules}


def metric_names_in(query: str) -> set[str]:
    return set(re.findall(r"'(pillbottle\.[a-z0-9_.]+)'", query))


def dimensions_in(query: str) -> set[str]:
    """The custom dimensions (metric attributes) a query reads: customDimensions.x or customDimensions['x']."""
    return {dot or bracket for dot, bracket in re.findall(r"customDimensions(?:\.(\w+)|\['(\w+)'\])", query)}


def test_every_rule_queries_only_metrics_and_dimensions_the_code_emits() -> None:
    """Every metric the code emits is alerted on or shown on the workbook: tests/infra/test_workbook.py."""
    rules = alert_rules().values()
    alerted = {name for rule in rules for name in rule["metrics"] if name.startswith("pillbottle.")}
    assert alerted <= set(metrics.NAMES), (
        f"rules read {sorted(alerted - set(metrics.NAMES))}, which the code never emits"
    )
    for rule in rules:
        named = set(rule["metrics"]) - {"requests"}
        assert metric_names_in(rule["query"]) == named, rule["name"]
        for dimension in dimensions_in(rule["query"]):
            assert all(dimension in metrics.ATTRIBUTES[name] for name in named), (rule["name"], dimension)


def test_the_http_5xx_rule_reads_the_sampled_requests_by_item_count() -> None:
    query = alert_rules()["http-5xx-rate"]["query"]
    assert query.lstrip().startswith("requests")
    assert "resultCode startswith '5'" in query
    assert "sum(itemCount)" in query


def test_alert_thresholds_are_parameters_with_sane_defaults_that_main_bicep_passes_on() -> None:
    rules = alert_rules()
    defaults = {name: (rule["threshold"], rule["window"], rule["periods"]) for name, rule in rules.items()}
    assert defaults == {
        "report-lag": (10, 15, 1),  # minutes behind, for every run of 15 minutes
        "report-consumer-silent": (1, 15, 1),  # fewer than one consumer run in 15 minutes
        "notifications-pending": (1000, 15, 1),
        "check-time-budget": (0, 5, 3),  # every run of a check hit its budget, 3 periods of 5 minutes in a row
        "http-503": (50, 5, 1),
        "store-throttled": (300, 5, 3),  # per 5 minutes, 3 periods in a row
        "report-feed-unpartitioned": (0, 5, 1),  # any dispatch that could not partition a feed
        "report-feed-ranges-uncovered": (0, 5, 1),  # any token reply leaving a range out (or overlapping)
        "http-500": (0, 5, 1),  # any fault
        "http-5xx-rate": (5, 5, 1),  # percent of requests
        "queue-poison-messages": (0, 5, 1),  # any message given up
    }
    tree = bicep.parse("modules/alerts.bicep")
    raw = {rule["name"]: rule for rule in bicep.variable("modules/alerts.bicep", "rules")}
    for name in ("report-lag", "notifications-pending", "http-503", "store-throttled", "http-500", "http-5xx-rate"):
        assert str(raw[name]["threshold"]) in tree["parameters"], f"{name}: the threshold is not a parameter"
    assert str(raw["check-time-budget"]["periods"]) in tree["parameters"]
    main = bicep.parse("main.bicep")
    passed = bicep.module("main.bicep", "alerts")["params"]
    assert set(passed) <= set(tree["parameters"])
    for name in ("actionGroupId", "alertEmail", "notifySubscriptionOwners", "reportLagMinutes", "pendingNotifications",
                 "checkBudgetPeriodsInARow", "unavailableResponsesPer5Minutes", "throttlesPer5Minutes",
                 "internalErrorsPer5Minutes", "http5xxPercent"):  # fmt: skip
        assert bicep.literal(main, passed[name]) == bicep.literal(tree, tree["parameters"][name]["default"]), name


def test_each_rule_is_a_log_alert_over_app_insights_that_notifies_the_action_groups() -> None:
    loop = bicep.resource("modules/alerts.bicep", "alertRules")
    assert loop["type"] == "Microsoft.Insights/scheduledQueryRules"
    assert loop["config"]["loop_type"]["detail"] == {"item_name": "rule", "array_name": "rules"}
    rule = loop["config"]["config"]
    body = json.dumps(rule, default=str)
    assert '"operand_1": "applicationInsights", "operand_2": "id"' in json.dumps(rule["properties"]["scopes"])
    assert str(rule["properties"]["actions"]["actionGroups"]) == "actionGroups"
    for uses in ("query", "threshold", "measure", "aggregation", "comparison", "periods", "dimensions"):
        assert f'"operand_2": "{uses}"' in body, f"the alert rule loop no longer uses rule.{uses}"
    assert rule["properties"]["windowSize"] == "PT${rule.window}M"
    assert bicep.parse("modules/alerts.bicep")["parameters"]["alertEmail"]["default"] == ""
    assert bicep.parse("modules/alerts.bicep")["parameters"]["actionGroupId"]["default"] == ""


OWNER_ROLE = "8e3af657-a8ff-443c-a75c-2fe8c4bcb635"  # Owner, the built-in role


def alert_notifications(passed: dict[str, Any]) -> tuple[list[Any], dict[str, Any] | None]:
    """What the alert rules notify when infra/modules/alerts.bicep is deployed with these parameters: the action
    groups every rule names, and the receivers of the action group the module creates (None: it creates none)."""
    tree = bicep.parse("modules/alerts.bicep")
    groups = bicep.evaluate(tree, bicep.variable("modules/alerts.bicep", "actionGroups"), passed)
    if not bicep.deploys("modules/alerts.bicep", "actionGroup", passed):
        return groups, None
    params = bicep.module("modules/alerts.bicep", "actionGroup")["params"]
    receivers = {kind: bicep.evaluate(tree, params[kind], passed) for kind in ("emailReceivers", "armRoleReceivers")}
    return groups, receivers


def test_with_the_defaults_the_alerts_email_the_subscription_owners() -> None:
    """Before, with the defaults (no alertEmail, no alertActionGroupId) every rule's action groups were empty: an
    alert fired in the portal and notified no one. Now an action group (the Azure Verified Module
    avm/res/insights/action-group) emails the members of the subscription's Owner role, an Azure Resource Manager
    role receiver ("Roles are Azure RBAC roles and only built-in roles are supported", ActionGroupData.ArmRoleReceivers,
    https://learn.microsoft.com/dotnet/api/azure.resourcemanager.monitor.actiongroupdata.armrolereceivers; the
    example of New-AzActionGroupArmRoleReceiverObject, https://learn.microsoft.com/powershell/module/az.monitor/
    new-azactiongrouparmrolereceiverobject, is this role id). main.bicep passes its defaults on."""
    groups, receivers = alert_notifications({})

    assert len(groups) == 1  # the action group created here, named by every rule
    assert receivers == {
        "emailReceivers": [],
        "armRoleReceivers": [{"name": "subscription-owners", "roleId": OWNER_ROLE, "useCommonAlertSchema": True}],
    }
    main = bicep.parse("main.bicep")["parameters"]
    assert main["alertSubscriptionOwners"]["default"] is True
    assert main["alertEmail"]["default"] == ""
    passed = bicep.module("main.bicep", "alerts")["params"]
    assert str(passed["notifySubscriptionOwners"]) == "alertSubscriptionOwners"
    assert str(passed["alertEmail"]) == "alertEmail"


def test_an_alert_email_is_notified_too_and_no_action_group_is_made_only_when_asked_for_none() -> None:
    groups, receivers = alert_notifications({"alertEmail": "ops@example.com"})
    assert receivers is not None
    assert receivers["emailReceivers"] == [
        {"name": "operator", "emailAddress": "ops@example.com", "useCommonAlertSchema": True}
    ]
    assert [r["roleId"] for r in receivers["armRoleReceivers"]] == [OWNER_ROLE]
    assert len(groups) == 1

    groups, receivers = alert_notifications({"alertEmail": "ops@example.com", "notifySubscriptionOwners": False})
    assert receivers is not None
    assert receivers["armRoleReceivers"] == []
    assert len(groups) == 1

    # Owners off, no email, an existing group: the rules notify that group only, and nothing is created.
    existing = "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Insights/actionGroups/oncall"
    groups, receivers = alert_notifications({"notifySubscriptionOwners": False, "actionGroupId": existing})
    assert receivers is None
    assert groups == [existing]
    # azd: ALERT_EMAIL sets alertEmail (infra/main.parameters.json).
    given = json.loads((bicep.INFRA / "main.parameters.json").read_text())["parameters"]
    assert given["alertEmail"] == {"value": "${ALERT_EMAIL=}"}


# --- app settings -----------------------------------------------------------------------------------------


def site() -> dict[str, Any]:
    """The params infra/modules/functionapp.bicep passes to the site's Azure Verified Module (avm/res/web/site)."""
    params: dict[str, Any] = bicep.module("modules/functionapp.bicep", "functionApp")["params"]
    return params


def vault() -> dict[str, Any]:
    """The params infra/modules/keyvault.bicep passes to the vault's Azure Verified Module (avm/res/key-vault/vault)."""
    params: dict[str, Any] = bicep.module("modules/keyvault.bicep", "vault")["params"]
    return params


def deployed_app_settings() -> dict[str, Any]:
    tree = bicep.parse("main.bicep")
    return dict(bicep.literal(tree, bicep.variable("main.bicep", "appSettings")))


def deployed_host_settings() -> dict[str, Any]:
    """The settings every Function App gets besides the code's: functionapp.bicep's hostSettings and main.bicep's
    telemetrySettings (passed to every app)."""
    tree = bicep.parse("modules/functionapp.bicep")
    host = dict(bicep.literal(tree, bicep.variable("modules/functionapp.bicep", "hostSettings")))
    main = bicep.parse("main.bicep")
    return host | dict(bicep.literal(main, bicep.variable("main.bicep", "telemetrySettings")))


def test_the_bicep_sets_every_setting_the_code_reads_and_nothing_that_nothing_reads() -> None:
    app, host = deployed_app_settings(), deployed_host_settings()
    deployed = env_names() - set(LOCAL_ONLY_SETTINGS)
    assert set(app) == deployed, (
        f"infra/main.bicep appSettings: missing {sorted(deployed - set(app))}, "
        f"not read by shared/settings.py {sorted(set(app) - env_names())}"
    )
    assert set(LOCAL_ONLY_SETTINGS) <= env_names(), "LOCAL_ONLY_SETTINGS lists settings the code no longer reads"
    assert not set(LOCAL_ONLY_SETTINGS) & (set(app) | set(host))
    unexplained = set(host) - set(HOST_APP_SETTINGS)
    assert not unexplained, f"host settings nothing here reads (explain them in HOST_APP_SETTINGS): {unexplained}"
    assert set(HOST_APP_SETTINGS) <= set(host), "HOST_APP_SETTINGS lists settings the Bicep no longer sets"
    assert not set(app) & set(host)
    assert observability.CONNECTION_STRING_SETTING in host


def test_deployed_literal_values_are_the_code_defaults() -> None:
    differing = {
        name: value
        for name, value in deployed_app_settings().items()
        if name in env_names() and value is not bicep.EXPRESSION and not parses_to_default(name, value)
    }
    assert not differing, f"infra/main.bicep sets these to something other than the code's default: {differing}"


def test_the_mongodb_connection_string_is_a_key_vault_reference_the_app_identity_may_resolve() -> None:
    raw = bicep.variable("main.bicep", "appSettings")["MONGODB_CONNECTION_STRING"]
    assert raw == "@Microsoft.KeyVault(SecretUri=${keyVault.outputs.mongoSecretUri})"
    outputs = bicep.parse("modules/keyvault.bicep")["outputs"]
    assert "uriWithVersion" in json.dumps(outputs["mongoSecretUri"], default=str)  # the vault module's secrets[0]
    [secret] = vault()["secrets"]
    assert str(secret["name"]) == "secretName"
    assert bicep.variable("modules/keyvault.bicep", "secretName") == "mongodb-connection-string"
    assert "listConnectionStrings" in json.dumps(secret["value"], default=str)
    assert "entry => entry.description == connectionStringName" in code_of("modules/keyvault.bicep")
    assert site()["keyVaultAccessIdentityResourceId"] == "identityId"  # the site's keyVaultReferenceIdentity
    [reader] = vault()["roleAssignments"]
    assert (str(reader["roleDefinitionIdOrName"]), str(reader["principalId"])) == (
        "keyVaultSecretsUserRoleId",
        "readerPrincipalId",
    )
    assert bicep.variable("modules/keyvault.bicep", "keyVaultSecretsUserRoleId") == (
        "4633458b-17de-408a-b874-0445c86b69e6"  # Key Vault Secrets User
    )


def code_of(relative: str) -> str:
    """A Bicep file without its `//` comments."""
    return re.sub(r"(^|\s)//[^\n]*", "", bicep.text(relative))


def test_the_secret_takes_the_connection_string_of_the_key_in_use_by_its_name_not_its_position():
    """listConnectionStrings() names each connection string in its `description` ("Primary MongoDB Connection
    String", ...: https://learn.microsoft.com/rest/api/cosmos-db-resource-provider/database-accounts/list-connection-strings,
    and the output "Build and run a containerized Python web app locally with MongoDB" shows); no page promises the
    list's order, which `connectionStrings[0]` relied on."""
    code = code_of("modules/keyvault.bicep")
    assert not re.search(r"connectionStrings\[\s*\w+\s*\]", code), "a connection string taken by its position"
    value = json.dumps(vault()["secrets"][0]["value"], default=str)
    assert '"type": "filter"' in value
    assert '"lambda_expression"' in value
    assert re.search(r"filter\(cosmos\.listConnectionStrings\(\)\.connectionStrings, entry => entry\.description == "
                     r"connectionStringName\)\[0\]\.connectionString", code)  # fmt: skip
    # (pycep reads `a == b ? c : d` as `a == (b ? c : d)`: the declaration is checked as written.)
    assert re.search(
        r"^var connectionStringName = cosmosKeyInUse == 'primary' \? 'Primary MongoDB Connection String' "
        r": 'Secondary MongoDB Connection String'$",
        code,
        re.MULTILINE,
    )
    allowed = bicep.parse("modules/keyvault.bicep")["parameters"]["cosmosKeyInUse"]["decorators"]
    assert {"type": "allowed", "argument": ["primary", "secondary"]} in allowed


def test_no_key_connection_string_or_secret_is_an_output_or_in_the_repo() -> None:
    secret_bearing = ('"func_name": "list', "onnectionString", "InstrumentationKey", '"operand_2": "value"')
    for relative in BICEP_FILES:
        for name, output in bicep.parse(relative).get("outputs", {}).items():
            rendered = json.dumps(output, default=str)
            assert not [leak for leak in secret_bearing if leak in rendered], f"{relative} output {name}: {rendered}"
        # The one place a key is read: the Key Vault secret's value.
        expected = ["listConnectionStrings("] if relative == "modules/keyvault.bicep" else []
        assert re.findall(r"\blist\w*\(", code_of(relative)) == expected, relative
    for path in [*bicep.INFRA.rglob("*"), ROOT / "azure.yaml", ROOT / "local.settings.json.example"]:
        if path.is_file():
            content = path.read_text()
            assert not re.search(r"AccountKey=|mongodb(\+srv)?://[^\s\"']*:[^\s\"'@]+@", content), path


# --- local settings and the docs -----------------------------------------------------------------------------


def local_settings() -> dict[str, str]:
    values: dict[str, str] = json.loads((ROOT / "local.settings.json.example").read_text())["Values"]
    return values


def test_local_settings_example_lists_every_setting_and_only_known_host_settings() -> None:
    names = set(local_settings())
    local = env_names() - set(AZURE_ONLY_SETTINGS)
    assert local <= names, f"local.settings.json.example lacks {sorted(local - names)}"
    assert set(AZURE_ONLY_SETTINGS) <= env_names(), "AZURE_ONLY_SETTINGS lists settings the code no longer reads"
    unknown = names - local - set(LOCAL_HOST_SETTINGS)
    assert not unknown, f"local.settings.json.example sets what nothing reads: {sorted(unknown)}"


def test_local_settings_example_values_are_accepted_by_the_settings_class() -> None:
    values = {name: value for name, value in local_settings().items() if name in env_names()}
    settings = Settings(**values)
    assert settings.storage_connection_string == values["AzureWebJobsStorage"]  # read under the host's name


def table_names(text: str) -> set[str]:
    """The names in the first column of a text's tables: every `| `NAME` |` row."""
    return set(re.findall(r"^\| `([^`]+)` \|", text, re.MULTILINE))


def cap_rules() -> dict[str, dict[str, Any]]:
    """infra/modules/alerts.bicep `var capRules` (the ingestion rules, made with a daily cap) by name."""
    tree = bicep.parse("modules/alerts.bicep")
    rules = bicep.literal(tree, bicep.variable("modules/alerts.bicep", "ingestionRules"))
    return {rule["name"]: rule for rule in rules}


def test_the_operations_doc_lists_every_metric_and_every_alert_rule_and_nothing_else() -> None:
    rows = table_names(section_of((ROOT / "docs" / "operations.md").read_text(), "## Metrics and alerts"))
    emitted = {*metrics.NAMES, *alert_rules(), *cap_rules()}
    assert not emitted - rows, f"docs/operations.md Metrics and alerts lacks rows for {sorted(emitted - rows)}"
    assert not rows - emitted, f"docs/operations.md lists metrics or rules that do not exist: {sorted(rows - emitted)}"


def test_the_configuration_doc_has_a_row_per_setting_and_only_settings() -> None:
    rows = table_names((ROOT / "docs" / "configuration.md").read_text())
    assert not env_names() - rows, f"docs/configuration.md lacks {sorted(env_names() - rows)}"
    assert not rows - env_names(), f"docs/configuration.md lists what no setting reads: {sorted(rows - env_names())}"


def test_the_configuration_doc_gives_each_settings_default_as_the_code_has_it() -> None:
    rows = re.findall(r"^\| `([^`]+)` \| `([^`]+)` \|", (ROOT / "docs" / "configuration.md").read_text(), re.MULTILINE)
    assert len(rows) > 30, "docs/configuration.md's defaults are written `like this`"
    wrong = [f"{name} = {value}" for name, value in rows if not parses_to_default(name, value)]
    assert not wrong, f"docs/configuration.md gives defaults the code does not have: {wrong}"


def test_the_readme_configuration_table_names_real_settings_at_their_defaults() -> None:
    section = section_of((ROOT / "README.md").read_text(), "## Configuration")
    names = re.findall(r"`([A-Z][A-Za-z_]+)`", section)
    assert names, "the README's Configuration section names no setting"
    assert not set(names) - env_names(), f"README Configuration names unknown settings {set(names) - env_names()}"
    for row in re.findall(r"^\| (`[A-Z].*?) \| (`.*?`) \|", section, re.MULTILINE):
        pairs = zip(re.findall(r"`([^`]+)`", row[0]), re.findall(r"`([^`]+)`", row[1]), strict=True)
        assert all(parses_to_default(name, value) for name, value in pairs), row


def section_of(text: str, heading: str) -> str:
    start = text.index(f"\n{heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else len(text)]


# --- deployment plumbing -----------------------------------------------------------------------------------


def test_the_parameters_file_names_real_parameters_and_every_required_one() -> None:
    params = bicep.parse("main.bicep")["parameters"]
    given = json.loads((bicep.INFRA / "main.parameters.json").read_text())["parameters"]
    assert set(given) <= set(params), f"main.parameters.json names unknown parameters {set(given) - set(params)}"
    required = {name for name, param in params.items() if param["default"] is None}
    assert required <= set(given)


def test_azd_deploys_the_repo_to_the_function_app_the_bicep_tags() -> None:
    azure = yaml.safe_load((ROOT / "azure.yaml").read_text())
    assert azure["infra"]["provider"] == "bicep"
    assert (ROOT / azure["infra"]["path"] / f"{azure['infra']['module']}.bicep").is_file()
    [(service, config)] = azure["services"].items()
    assert config == {"project": ".", "language": "python", "host": "function"}
    tag_default = bicep.parse("modules/functionapp.bicep")["parameters"]["serviceName"]["default"]
    assert service == tag_default
    assert bicep.parse("main.bicep")["globals"]["scope"]["value"] == "resourceGroup"  # azd and az deployment group


def test_the_function_app_runs_python_3_13_on_flex_consumption_with_identity_based_storage() -> None:
    plan = bicep.module("main.bicep", "plan")["params"]["sku"]
    assert plan == {"name": "FC1", "tier": "FlexConsumption"}
    config = site()["functionAppConfig"]
    assert config["runtime"] == {"name": "python", "version": "3.13"}
    assert config["deployment"]["storage"]["authentication"]["type"] == "UserAssignedIdentity"
    identities = site()["managedIdentities"]
    assert identities["systemAssigned"] is False
    assert [str(item) for item in identities["userAssignedResourceIds"]] == ["identityId"]
    assert site()["kind"] == "functionapp,linux"
    host, app = deployed_host_settings(), deployed_app_settings()
    assert host["AzureWebJobsStorage__credential"] == "managedidentity"
    assert "AzureWebJobsStorage" not in host | app  # no key-based connection string
    # The checks' queue client: the same account's queue endpoint, and the same user-assigned identity.
    raw = bicep.variable("main.bicep", "appSettings")
    assert raw["AzureWebJobsStorage__queueServiceUri"].startswith("https://${storage.outputs.name}.queue.")
    assert '"operand_1": "identity"' in json.dumps(raw["AzureWebJobsStorage__clientId"], default=str)
    assert '"operand_2": "clientId"' in json.dumps(raw["AzureWebJobsStorage__clientId"], default=str)
    storage = bicep.module("main.bicep", "storage")["params"]
    assert storage["allowSharedKeyAccess"] is False


def test_the_app_identity_holds_the_roles_its_storage_queue_and_telemetry_need() -> None:
    rbac = bicep.text("modules/rbac.bicep")
    for role in (
        "b7e6dc6d-f1e8-4753-8033-0f276bb0955b",  # Storage Blob Data Owner: host storage, deployment package
        "974c5e8b-45b9-4653-ba55-5f855dd0fb88",  # Storage Queue Data Contributor: the host's storage queues
        "c6a89b2d-59bc-44d0-9896-0f6e12d7b80a",  # Storage Queue Data Message Sender: the checks' queue sends
        "3913510d-42f4-4e42-8a64-420c390055eb",  # Monitoring Metrics Publisher: Entra ID telemetry
    ):
        assert role in rbac


WORKFLOW = ROOT / ".github" / "workflows" / "azure-dev.yml"


def workflow() -> dict[str, Any]:
    loaded: dict[Any, Any] = yaml.safe_load(WORKFLOW.read_text())
    return {("on" if key is True else str(key)): value for key, value in loaded.items()}  # YAML 1.1: `on` is true


def step_runs(job: dict[str, Any]) -> list[str]:
    return [" ".join(str(step.get("run", "")).split()) for step in job["steps"]]


def test_azd_pipeline_config_finds_a_workflow_that_runs_ci_then_provisions_and_deploys() -> None:
    """`azd pipeline config` sets up .github/workflows/azure-dev.yml (the path of the azd templates' workflow) with
    federated credentials and repository variables ("Advanced pipeline features": AZURE_CLIENT_ID, AZURE_TENANT_ID,
    AZURE_SUBSCRIPTION_ID, AZURE_ENV_NAME, AZURE_LOCATION as `vars`, and azure.yaml's `pipeline.variables`,
    https://learn.microsoft.com/azure/developer/azure-developer-cli/pipeline-advanced-features). On a push to main
    it runs the project's CI as two jobs side by side, the suite (`bash .ci/run suite`: lint, types, the tests, the
    lifecycle runs) and the clock matrix (`bash .ci/run clocks`), and, only once the suite passes, `azd provision`
    and `azd deploy`, logged in with OpenID Connect (id-token: write; `azd auth login
    --federated-credential-provider github`): no client secret anywhere."""
    flow = workflow()
    assert flow["on"]["push"]["branches"] == ["main"]
    assert flow["permissions"] == {"id-token": "write", "contents": "read"}
    test, clocks, deploy = flow["jobs"]["test"], flow["jobs"]["clocks"], flow["jobs"]["deploy"]
    assert "bash .ci/run suite" in step_runs(test)
    assert "bash .ci/run clocks" in step_runs(clocks)
    assert "needs" not in clocks  # beside the suite, not after it
    assert deploy["needs"] == "test"  # the deploy waits for what protects it, not for the clock matrix
    runs = step_runs(deploy)
    login = next(run for run in runs if run.startswith("azd auth login"))
    assert '--federated-credential-provider "github"' in login
    assert '--client-id "$AZURE_CLIENT_ID"' in login
    assert '--tenant-id "$AZURE_TENANT_ID"' in login
    assert runs.index(login) < runs.index("azd provision --no-prompt") < runs.index("azd deploy --no-prompt")
    # The preprovision hook reads the account's keys with az: az is logged in with the same federated identity.
    [az_login] = [step for step in deploy["steps"] if str(step.get("uses", "")).startswith("azure/login@")]
    assert set(az_login["with"]) == {"client-id", "tenant-id", "subscription-id"}
    env = deploy["env"]
    for name in ("AZURE_CLIENT_ID", "AZURE_TENANT_ID", "AZURE_SUBSCRIPTION_ID", "AZURE_ENV_NAME", "AZURE_LOCATION"):
        assert env[name] == f"${{{{ vars.{name} }}}}", name
    assert "client-secret" not in WORKFLOW.read_text()
    assert re.findall(r"secrets\.(\w+)", WORKFLOW.read_text()) == ["AZD_INITIAL_ENVIRONMENT_CONFIG"]


def test_ci_runs_the_suite_and_the_clock_matrix_and_either_alone() -> None:
    """`.ci/run` is both jobs of the workflow one after the other, or one of them by name; another name is a usage
    error before anything is installed."""
    script = (ROOT / ".ci" / "run").read_text()
    assert "./dev test\n" in script
    assert "./dev test-clocks\n" in script
    assert re.search(r'if \[ "\$stage" != clocks \]; then\n  \./dev test\n  lifecycle_runs\n', script)
    done = subprocess.run(
        ["bash", str(ROOT / ".ci" / "run"), "everything"], capture_output=True, text=True, check=False, timeout=30
    )
    assert done.returncode == 2
    assert done.stderr == "usage: bash .ci/run [all | suite | clocks]\n"


def test_every_variable_the_parameters_file_reads_reaches_the_pipeline() -> None:
    """Each `${VAR}` of infra/main.parameters.json is an azd variable `azd pipeline config` copies to the
    repository (azure.yaml `pipeline.variables`, or one azd sets itself) and the deploy job passes to azd."""
    read = set(re.findall(r"\$\{(\w+)", (bicep.INFRA / "main.parameters.json").read_text()))
    assert {"VNET_ENABLED", "ALERT_EMAIL", "COSMOS_KEY_IN_USE"} <= read
    azd_own = {"AZURE_ENV_NAME", "AZURE_LOCATION"}
    variables = yaml.safe_load((ROOT / "azure.yaml").read_text())["pipeline"]["variables"]
    assert read - azd_own <= set(variables)
    env = workflow()["jobs"]["deploy"]["env"]
    for name in read | {"AZURE_RESOURCE_GROUP"}:
        assert env[name] == f"${{{{ vars.{name} }}}}", name


def test_azd_reaches_every_scalar_the_design_scale_sets_defaulting_to_the_bicep_s_own() -> None:
    """`azd env set HTTP_HOSTING_PLAN Dedicated` (and the rest) before `azd up` deploys the design scale's hosting and
    telemetry: each scalar parameter infra/design-scale.parameters.json sets to other than main.bicep's default is
    an azd variable in infra/main.parameters.json, whose default is main.bicep's, so an unset one changes nothing."""
    params = bicep.parse("main.bicep")["parameters"]
    given = json.loads((bicep.INFRA / "main.parameters.json").read_text())["parameters"]
    design = json.loads((bicep.INFRA / "design-scale.parameters.json").read_text())["parameters"]
    scalars = {
        name: entry["value"]
        for name, entry in design.items()
        if not isinstance(entry["value"], dict) and str(entry["value"]) != str(params[name]["default"]).strip("'")
    }
    assert {"httpHostingPlan", "httpInstanceCount", "traceSamplingRatio", "logDailyQuotaGb"} <= set(scalars)
    for name in scalars:
        variable = re.fullmatch(r"\$\{(\w+)=(.*)\}", given[name]["value"])
        assert variable is not None, f"{name} is not an azd variable in main.parameters.json"
        assert variable[2] == str(params[name]["default"]).strip("'"), name


@pytest.mark.parametrize("relative", BICEP_FILES)
def test_every_module_and_abbreviation_a_bicep_file_uses_exists(relative: str) -> None:
    abbreviations = json.loads((bicep.INFRA / "abbreviations.json").read_text())
    assert set(re.findall(r"abbrs\.(\w+)", bicep.text(relative))) <= abbreviations.keys()
    folder = (bicep.INFRA / relative).parent
    for name, declared in bicep.parse(relative).get("modules", {}).items():
        detail = declared["detail"]
        if declared["type"] == "local":
            assert (folder / detail["path"]).is_file(), f"{relative}: module {name} -> {detail['path']}"
        else:  # an Azure Verified Module, pinned to a version
            assert detail["path"].startswith("avm/res/"), f"{relative}: module {name}"
            assert re.fullmatch(r"\d+\.\d+\.\d+", detail["tag"]), f"{relative}: module {name} is not pinned"


# --- the virtual network (vnetEnabled) ---------------------------------------------------------------------

PRIVATE_ENDPOINTS = {  # module of main.bicep: (the service's module, its group ID, its private DNS zone)
    "blobEndpoint": ("storage", "blob", "privatelink.blob.${environment().suffixes.storage}"),
    "queueEndpoint": ("storage", "queue", "privatelink.queue.${environment().suffixes.storage}"),
    "cosmosEndpoint": ("cosmos", "MongoDB", "privatelink.mongo.cosmos.azure.com"),
    "keyVaultEndpoint": ("keyVault", "vault", "privatelink.vaultcore.azure.net"),
}
NETWORK_MODULES = ("vnet", *PRIVATE_ENDPOINTS)


def main_param(module: str, name: str, scope: dict[str, Any]) -> Any:
    """The value main.bicep passes to `name` of `module` in a deployment with these parameters."""
    return bicep.evaluate(bicep.parse("main.bicep"), bicep.module("main.bicep", module)["params"][name], scope)


def public_network_access(scope: dict[str, Any]) -> dict[str, Any]:
    return {name: main_param(name, "publicNetworkAccess", scope) for name in ("storage", "cosmos", "keyVault")}


def test_without_vnet_enabled_every_service_keeps_its_public_endpoint_and_no_network_is_made() -> None:
    """vnetEnabled is the azd templates' switch (VNET_ENABLED; Azure-Samples/functions-quickstart-python-http-azd),
    off unless asked for: no virtual network, no private endpoint, the app not integrated, and storage, Cosmos DB
    and Key Vault reachable as before."""
    main = bicep.parse("main.bicep")
    assert main["parameters"]["vnetEnabled"] == {**main["parameters"]["vnetEnabled"], "type": "bool", "default": False}
    given = json.loads((bicep.INFRA / "main.parameters.json").read_text())["parameters"]
    assert given["vnetEnabled"] == {"value": "${VNET_ENABLED=false}"}
    off: dict[str, Any] = {}
    assert [name for name in NETWORK_MODULES if bicep.deploys("main.bicep", name, off)] == []
    assert public_network_access(off) == {"storage": "Enabled", "cosmos": "Enabled", "keyVault": "Enabled"}
    assert main_param("storage", "networkAcls", off) == {"defaultAction": "Allow", "bypass": "AzureServices"}
    assert main_param("functionApp", "virtualNetworkSubnetId", off) == ""
    module_defaults = {
        ("modules/cosmos.bicep", "publicNetworkAccess"): "Enabled",
        ("modules/keyvault.bicep", "publicNetworkAccess"): "Enabled",
        ("modules/functionapp.bicep", "virtualNetworkSubnetId"): "",
    }
    for (relative, param), default in module_defaults.items():
        assert bicep.parse(relative)["parameters"][param]["default"] == default, relative


def test_with_vnet_enabled_storage_cosmos_and_key_vault_are_reached_through_private_endpoints_only() -> None:
    """vnetEnabled: a virtual network with a subnet for private endpoints, one delegated to
    Microsoft.App/environments (Flex Consumption's virtual network integration, as the templates' vnet.bicep) and
    one to Microsoft.Web/serverFarms (the HTTP app on a Dedicated plan); a
    private endpoint with its private DNS zone ("Azure Private Endpoint private DNS zone values",
    https://learn.microsoft.com/azure/private-link/private-endpoint-dns) for the storage account's blob and queue
    services, the Cosmos DB account (MongoDB) and the vault; public network access disabled on all three (the
    storage firewall denies, bypassing nothing); the app integrated with the subnet, starting once the endpoints
    exist."""
    on = {"vnetEnabled": True}
    assert [name for name in NETWORK_MODULES if bicep.deploys("main.bicep", name, on)] == list(NETWORK_MODULES)
    for name, (service, group, zone) in PRIVATE_ENDPOINTS.items():
        params = bicep.module("main.bicep", name)["params"]
        assert params["serviceResourceId"] == {
            "operator": {"type": "property_accessor", "operands": {"operand_1": service, "operand_2": {
                "operator": {"type": "property_accessor", "operands": {"operand_1": "outputs",
                                                                       "operand_2": "resourceId"}}}}}
        }, name  # fmt: skip
        assert (params["groupId"], params["privateDnsZoneName"]) == (group, zone), name
        assert "privateEndpointSubnetId" in json.dumps(params["subnetId"]), name
    assert public_network_access(on) == {"storage": "Disabled", "cosmos": "Disabled", "keyVault": "Disabled"}
    assert main_param("storage", "networkAcls", on) == {"defaultAction": "Deny", "bypass": "None"}
    assert main_param("functionApp", "virtualNetworkSubnetId", on) is bicep.EXPRESSION  # the true branch:
    subnet = bicep.module("main.bicep", "functionApp")["params"]["virtualNetworkSubnetId"]["operator"]["operands"]
    assert '"operand_1": "vnet"' in json.dumps(subnet["true_value"])
    assert "appSubnetId" in json.dumps(subnet)
    depends = [str(item) for item in bicep.module("main.bicep", "functionApp")["dependsOn"]]
    assert set(PRIVATE_ENDPOINTS) <= set(depends)
    # ... and each module applies what it is given.
    account = bicep.resource("modules/cosmos.bicep", "account")["config"]["properties"]
    assert account["publicNetworkAccess"] == "publicNetworkAccess"
    assert vault()["publicNetworkAccess"] == "publicNetworkAccess"
    assert "virtualNetworkSubnetId" in json.dumps(site()["virtualNetworkSubnetResourceId"], default=str)
    endpoint = bicep.module("modules/private-endpoint.bicep", "privateEndpoint")["params"]
    [connection] = endpoint["privateLinkServiceConnections"]
    assert connection["properties"] == {"privateLinkServiceId": "serviceResourceId", "groupIds": ["groupId"]}
    assert str(endpoint["subnetResourceId"]) == "subnetId"
    zone = bicep.module("modules/private-endpoint.bicep", "privateDnsZone")["params"]
    assert str(zone["name"]) == "privateDnsZoneName"
    assert str(zone["virtualNetworkLinks"][0]["virtualNetworkResourceId"]) == "virtualNetworkId"
    subnets = bicep.module("modules/vnet.bicep", "virtualNetwork")["params"]["subnets"]
    # The third, delegated to App Service plans, for the HTTP functions' app on its Dedicated plan (httpHostingPlan).
    assert [subnet.get("delegation") for subnet in subnets] == [
        None,
        "Microsoft.App/environments",
        "Microsoft.Web/serverFarms",
    ]


AVM = json.loads((ROOT / "tests" / "avm_parameters.json").read_text())["modules"]


@pytest.mark.parametrize("relative", BICEP_FILES)
def test_every_verified_module_version_parameter_and_output_used_exists_in_the_registry(relative: str) -> None:
    """Each Azure Verified Module is pinned to a version of Azure/bicep-registry-modules that its comment names (the
    git tag avm/res/<module>/<version>), and takes only parameters that version's main.bicep declares and gives
    only outputs it declares: tests/avm_parameters.json lists them, read from that repository at each tag. A
    parameter a module does not declare fails the deployment; this fails here first."""
    text = bicep.text(relative)
    for name, used in bicep.registry_modules(relative).items():
        key = f"{used['path']}:{used['tag']}"
        assert key in AVM, f"{relative}: module {name} is {key}, which tests/avm_parameters.json does not list"
        declaration = text.index(f"module {name} 'br/public:{key}'")
        comment = text[text.rfind("\n\n", 0, declaration) : declaration]
        assert AVM[key]["tag"] in comment, f"{relative}: module {name}: no comment names the tag {AVM[key]['tag']}"
        unknown = set(used["params"]) - set(AVM[key]["parameters"])
        assert not unknown, f"{relative}: module {name} ({key}) has no parameters {sorted(unknown)}"
        outputs = set(re.findall(rf"\b{name}\.outputs\.(\w+)", text))
        assert outputs <= set(AVM[key]["outputs"]), f"{relative}: module {name} ({key}) has no outputs {outputs}"
    folder = (bicep.INFRA / relative).parent
    for name, declared in bicep.parse(relative).get("modules", {}).items():
        if declared["type"] == "local":  # and a local module's outputs are ones it declares
            declares = bicep.parse(str((folder / declared["detail"]["path"]).relative_to(bicep.INFRA))).get(
                "outputs", {}
            )
            outputs = set(re.findall(rf"\b{name}\.outputs\.(\w+)", text))
            assert outputs <= set(declares), f"{relative}: module {name} has no outputs {outputs - set(declares)}"


def test_the_site_and_the_vault_are_the_verified_modules_the_azd_templates_use() -> None:
    """The azd Python Flex Consumption templates (Azure-Samples/functions-quickstart-python-http-azd,
    infra/app/api.bicep) deploy the site with `br/public:avm/res/web/site`; the vault is `avm/res/key-vault/vault`.
    The site's app settings are exactly the ones given (retainCurrentAppSettings false: a setting removed from the
    Bicep leaves the app), with no storage or Application Insights resource for the module to add key-based or
    agent settings from; alwaysOn, the module's siteConfig default, is off (Flex Consumption has none). The vault
    keeps what the hand-written one had, not the module's defaults (premium, purge protection, 90 days, open to
    VM and template deployment and disk encryption)."""
    assert {(m["path"], m["tag"]) for m in bicep.registry_modules("modules/functionapp.bicep").values()} == {
        ("avm/res/web/site", "0.24.0")
    }
    [settings] = site()["configs"]
    assert settings["name"] == "appsettings"
    assert settings["retainCurrentAppSettings"] is False
    assert not {"storageAccountResourceId", "applicationInsightResourceId"} & set(settings)
    assert json.dumps(settings["properties"], default=str) == json.dumps(
        {
            "function": {
                "type": "union",
                "parameters": {"arg_1": "hostSettings", "arg_2": "telemetrySettings", "arg_3": "appSettings"},
            }
        }
    )
    assert site()["siteConfig"] == {"alwaysOn": False, "minTlsVersion": "1.2"}
    assert site()["httpsOnly"] is True
    assert {(m["path"], m["tag"]) for m in bicep.registry_modules("modules/keyvault.bicep").values()} == {
        ("avm/res/key-vault/vault", "0.14.0")
    }
    kept = {
        "sku": "standard",
        "enableRbacAuthorization": True,
        "enableSoftDelete": True,
        "softDeleteRetentionInDays": 7,
        "enablePurgeProtection": False,
        "enableVaultForDeployment": False,
        "enableVaultForTemplateDeployment": False,
        "enableVaultForDiskEncryption": False,
    }
    assert {name: vault()[name] for name in kept} == kept
    # The reader's role assignment keeps the name it had before the module, so a redeployment updates it.
    [reader] = vault()["roleAssignments"]
    assert "guid(vaultResourceId, readerPrincipalId, keyVaultSecretsUserRoleId)" in bicep.text("modules/keyvault.bicep")
    assert "name" in reader


def test_cosmos_db_stays_hand_written_because_the_verified_module_cannot_deploy_autoscale_collections() -> None:
    """avm/res/document-db/database-account (newest tag 0.20.1) gives a MongoDB collection only standard
    `throughput` (default 400) and a database shared throughput it cannot take after creation: the per-collection
    autoscale choice (docs/costs.md) cannot be kept with it. The Bicep says why, and docs/operations.md too."""
    assert bicep.registry_modules("modules/cosmos.bicep") == {}
    assert "avm/res/document-db/database-account/0.20.1" in bicep.text("modules/cosmos.bicep")
    deploys = section_of((ROOT / "docs" / "operations.md").read_text(), "## What `infra/` deploys")
    assert "avm/res/document-db/database-account" in deploys


def test_the_package_leaves_out_tests_tools_and_local_secrets_and_keeps_the_app() -> None:
    patterns = [
        line.strip()
        for line in (ROOT / ".funcignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]

    def ignored(name: str) -> bool:
        return any(fnmatch.fnmatch(name, pattern.rstrip("/")) for pattern in patterns)

    left_out = ("tests", "tools", "benchmarks", ".venv", "infra", "local.settings.json", ".azure", ".git")
    dev_only = ("node_modules", "package.json", "package-lock.json", ".spectral.yaml", "redocly.yaml")  # npm: tests
    for name in (*left_out, *dev_only):
        assert ignored(name), name
    for kept in ("function_app.py", "functions", "shared", "host.json", "requirements.txt"):
        assert not ignored(kept), kept


def shipped_imports() -> set[str]:
    """Top-level modules the deployed code (function_app.py, functions/, shared/) imports."""
    files = [ROOT / "function_app.py", *(ROOT / "functions").glob("*.py"), *(ROOT / "shared").glob("*.py")]
    found: set[str] = set()
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return found - set(sys.stdlib_module_names)


def installed_by_requirements() -> set[str]:
    """Distributions requirements.txt installs, with their dependencies (normalised names)."""
    names = [line.split("#")[0].strip() for line in (ROOT / "requirements.txt").read_text().splitlines()]
    pending = [Requirement(name).name for name in names if name]
    closure: set[str] = set()
    while pending:
        name = re.sub(r"[-_.]+", "-", pending.pop()).lower()
        if name in closure:
            continue
        closure.add(name)
        for spec in importlib.metadata.requires(name) or []:
            requirement = Requirement(spec)
            if requirement.marker is None or "extra" not in str(requirement.marker):
                pending.append(requirement.name)
    return closure


def test_the_deployed_code_imports_only_what_the_package_ships_and_requirements_txt_installs() -> None:
    local = {"function_app", "functions", "shared"}
    installed = installed_by_requirements()
    providers = importlib.metadata.packages_distributions()
    for module in sorted(shipped_imports() - local):
        assert module not in {"tests", "tools", "benchmarks"}, f"{module} is left out of the package (.funcignore)"
        distributions = {re.sub(r"[-_.]+", "-", name).lower() for name in providers.get(module, [])}
        assert distributions & installed, f"the app imports {module}, which requirements.txt does not install"


# --- host.json ------------------------------------------------------------------------------------------------


def host_json() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((ROOT / "host.json").read_text())
    return loaded


def function_timeout() -> timedelta:
    hours, minutes, seconds = (int(part) for part in host_json()["functionTimeout"].split(":"))
    return timedelta(hours=hours, minutes=minutes, seconds=seconds)


def test_host_json_pins_the_v4_extension_bundle_and_configures_logging_for_opentelemetry_mode() -> None:
    """In OpenTelemetry mode the host samples its traces by OTEL_TRACES_SAMPLER (main.bicep telemetrySettings),
    and host.json's logging.applicationInsights section does not apply
    (https://github.com/Azure/azure-functions-host/issues/10770): none, so no one tunes a setting that does
    nothing. The host's per-invocation lines (Function.*) at Warning: only failures, and those only if the
    worker's OpenTelemetry were off (the host drops Function.* otherwise)."""
    host = host_json()
    assert host["version"] == "2.0"
    assert host["extensionBundle"] == {"id": "Microsoft.Azure.Functions.ExtensionBundle", "version": "[4.*, 5.0.0)"}
    assert host["telemetryMode"] == "OpenTelemetry"
    assert "applicationInsights" not in host["logging"]
    assert host["logging"]["logLevel"] == {"default": "Warning", "Function": "Warning"}
    assert timedelta(minutes=1) <= function_timeout() <= timedelta(minutes=30)


def budget_seconds(name: str) -> float | None:
    """The largest value a `*budget*` setting accepts, in seconds (its default when unbounded)."""
    units = {"_seconds": 1.0, "_s": 1.0, "_ms": 0.001, "_minutes": 60.0}
    unit = next((factor for suffix, factor in units.items() if name.endswith(suffix)), None)
    if "budget" not in name or unit is None:
        return None
    field = Settings.model_fields[name]
    bounds = [getattr(item, "le", None) or getattr(item, "lt", None) for item in field.metadata]
    largest = max((bound for bound in bounds if bound is not None), default=field.default)
    return float(largest) * unit


def test_the_function_timeout_fits_every_timer_budget_the_settings_allow() -> None:
    budgets = {name: budget_seconds(name) for name in Settings.model_fields}
    too_long = {name: s for name, s in budgets.items() if s is not None and s >= function_timeout().total_seconds()}
    assert not too_long, f"host.json functionTimeout {function_timeout()} is shorter than {too_long}"


def deployed_throughput(passed: dict[str, Any]) -> dict[str, Any]:
    """Each collection's throughput options (`options` of the collection loop) as a deployment with these
    parameters of modules/cosmos.bicep makes them (the others at their defaults)."""
    tree = bicep.parse("modules/cosmos.bicep")
    options = bicep.resource("modules/cosmos.bicep", "collection")["config"]["config"]["properties"]["options"]
    collections = bicep.literal(tree, bicep.variable("modules/cosmos.bicep", "collections"))
    return {c["name"]: bicep.evaluate(tree, options, {**passed, "c": c}) for c in collections}


def bounds(parameter: dict[str, Any]) -> tuple[int | None, int | None]:
    found = {decorator["type"]: decorator["argument"] for decorator in parameter["decorators"]}
    return found.get("min_value"), found.get("max_value")


@pytest.mark.parametrize(
    "passed",
    [{}, {"defaultMaxThroughput": 20000, "maxThroughputByCollection": {"leases": 20000, "bottles": 50000}}],
)
def test_the_collection_without_a_shard_key_gets_standard_throughput_both_documented_pages_allow(passed):
    """`leases` (no shard key) got an autoscale maximum of 1,000 RU/s. "Use MongoDB extension commands to manage
    data stored in Azure Cosmos DB for MongoDB" (https://learn.microsoft.com/azure/cosmos-db/mongodb/custom-commands,
    Create collection) allows an autoscale maximum "from 4,000 RU/s to 10,000 RU/s without a shard key"; the
    autoscale FAQ (https://learn.microsoft.com/azure/cosmos-db/autoscale-faq, "What's the entry point RU/s for
    autoscale?") one "as low as 1,000 RU/s". Standard throughput of 400 RU/s, the page's minimum and its default for
    a collection created without any ("a new fixed, unsharded, collection with 400RU/s"), up to 10,000 without a
    shard key, is what both allow. Every collection with a shard key stays on autoscale."""
    deployed = deployed_throughput(passed)

    assert deployed["leases"] == {"throughput": 400}
    maximum = passed.get("maxThroughputByCollection", {})
    for name, options in deployed.items():
        if name != "leases":
            expected = maximum.get(name, passed.get("defaultMaxThroughput", 1000))
            assert options == {"autoscaleSettings": {"maxThroughput": expected}}, name
    assert [spec.name for spec in collection_specs(Settings()) if spec.shard_key is None] == ["leases"]


def test_the_standard_throughput_without_a_shard_key_is_a_parameter_within_what_one_partition_serves():
    """At most 10,000 RU/s: "Maximum RUs per partition (logical & physical)", 10,000
    (https://learn.microsoft.com/azure/cosmos-db/concepts-limits); at least 400, the standard minimum."""
    module = bicep.parse("modules/cosmos.bicep")["parameters"]["unshardedThroughput"]
    main = bicep.parse("main.bicep")["parameters"]["cosmosUnshardedThroughput"]
    assert bounds(module) == bounds(main) == (400, 10000)
    assert module["default"] == main["default"] == 400
    assert str(bicep.module("main.bicep", "cosmos")["params"]["unshardedThroughput"]) == "cosmosUnshardedThroughput"
    assert deployed_throughput({"unshardedThroughput": 800})["leases"] == {"throughput": 800}


def test_the_account_backs_up_continuously_on_purpose():
    """Continuous backup, 7-day tier: a self-service restore to any second of the last 7 days, with no charge for
    backup storage, which Cosmos DB keeps locally or zone redundant itself ("In continuous backup mode, you can't
    update the backup storage redundancy"), so a region without a pair needs no redundancy chosen, as periodic
    backup there does ("if you use a non-paired region, you need to explicitly choose the backup storage
    redundancy": https://learn.microsoft.com/azure/cosmos-db/periodic-backup-update-storage-redundancy).
    Without a policy the account got periodic backup by default. What continuous excludes, per "Continuous backup
    with point-in-time restore" (https://learn.microsoft.com/azure/cosmos-db/continuous-backup-restore-introduction)
    and "Merge partitions" (https://learn.microsoft.com/azure/cosmos-db/merge, Limitations): partition merge, and a
    unique index created on an existing collection; the app declares no unique index."""
    account = bicep.resource("modules/cosmos.bicep", "account")["config"]
    policy = bicep.literal(bicep.parse("modules/cosmos.bicep"), account["properties"]["backupPolicy"])
    assert policy == {"type": "Continuous", "continuousModeProperties": {"tier": "Continuous7Days"}}
    assert not [(s.name, i.name) for s in collection_specs(Settings()) for i in s.indexes if i.unique]
    operations = section_of((ROOT / "docs" / "operations.md").read_text(), "## Backup and restore")
    for said in ("Continuous7Days", "partition merge", "unique index", "--disable-ttl"):
        assert said in operations, said


def test_http_concurrency_and_the_python_worker_s_threads_are_set_and_match() -> None:
    """Flex Consumption's HTTP concurrency default depends on the instance size and the language, and the Python
    worker's default thread pool is smaller: the app sets both, one thread per concurrent invocation."""
    params = bicep.parse("modules/functionapp.bicep")["parameters"]
    concurrency = params["httpPerInstanceConcurrency"]["default"]
    threads = params["pythonThreadpoolThreadCount"]["default"]
    assert concurrency == threads == 16
    text = bicep.text("modules/functionapp.bicep")
    assert "perInstanceConcurrency: httpPerInstanceConcurrency" in text
    assert "PYTHON_THREADPOOL_THREAD_COUNT: string(pythonThreadpoolThreadCount)" in text


# --- the archive ---------------------------------------------------------------------------------------------


def test_the_archive_s_container_is_the_setting_s_and_the_app_identity_may_read_and_write_it() -> None:
    """The container the app writes (ARCHIVE_CONTAINER) is the one the Bicep creates, reached at the storage
    account's blob endpoint with the app's identity, which holds Storage Blob Data Contributor on it
    (https://learn.microsoft.com/azure/role-based-access-control/built-in-roles/storage: "Read, write, and delete
    Azure Storage containers and blobs"), and the app starts only once it does."""
    main = bicep.parse("main.bicep")
    assert main["parameters"]["archiveContainerName"]["default"] == Settings.model_fields["archive_container"].default
    app = bicep.variable("main.bicep", "appSettings")
    assert str(app["ARCHIVE_CONTAINER"]) == "archiveContainerName"
    assert ".blob." in str(app["AzureWebJobsStorage__blobServiceUri"])
    passed = bicep.module("main.bicep", "archive")["params"]
    assert str(passed["containerName"]) == "archiveContainerName"
    assert "identity" in json.dumps(passed["principalId"], default=str)
    container = bicep.resource("modules/archive.bicep", "container")
    assert container["type"] == "Microsoft.Storage/storageAccounts/blobServices/containers"
    assert str(container["config"]["name"]) == "containerName"
    assert container["config"]["properties"]["publicAccess"] == "None"
    role = bicep.resource("modules/archive.bicep", "blobDataContributor")["config"]
    assert str(role["scope"]) == "container"
    assert role["properties"]["principalType"] == "ServicePrincipal"
    assert str(role["properties"]["principalId"]) == "principalId"
    role_id = json.dumps(role["properties"]["roleDefinitionId"], default=str)
    assert '"resource_name_1": "storageBlobDataContributor"' in role_id
    guid = bicep.variable("modules/archive.bicep", "storageBlobDataContributor")
    assert guid == "ba92f5b4-2d11-453d-a403-e96b0029c9fe"  # Storage Blob Data Contributor
    assert "archive" in [str(d) for d in bicep.module("main.bicep", "functionApp")["dependsOn"]]


def test_the_lifecycle_policy_keeps_events_for_good_in_cooler_tiers_and_deletes_heartbeats_after_the_setting() -> None:
    """Lifecycle management (https://learn.microsoft.com/azure/storage/blobs/lifecycle-management-policy-structure):
    the events' files move to cool, then cold (and to the offline archive tier only if asked), never deleted; the
    heartbeats' files are deleted HEARTBEAT_ARCHIVE_DAYS after their last write, from the parameter that sets the
    app setting too. The prefixes are the layout's datasets in the container."""
    policy = bicep.resource("modules/archive.bicep", "lifecycle")
    assert policy["type"] == "Microsoft.Storage/storageAccounts/managementPolicies"
    assert policy["config"]["name"] == "default"  # an account's one policy
    actions_rule, heartbeats_rule = policy["config"]["properties"]["policy"]["rules"]
    assert actions_rule["definition"]["filters"]["prefixMatch"] == ["${containerName}/actions/"]
    assert heartbeats_rule["definition"]["filters"]["prefixMatch"] == ["${containerName}/heartbeats/"]
    assert (layout.ACTIONS, layout.HEARTBEATS) == ("actions", "heartbeats")
    for rule in (actions_rule, heartbeats_rule):
        assert rule["enabled"] is True
        assert rule["definition"]["filters"]["blobTypes"] == ["blockBlob"]
    assert str(actions_rule["definition"]["actions"]["baseBlob"]) == "actionTiers"
    tiers = json.dumps(bicep.variable("modules/archive.bicep", "actionTiers"), default=str)
    assert "delete" not in tiers
    for tier, days in (("tierToCool", "actionsCoolAfterDays"), ("tierToCold", "actionsColdAfterDays")):
        assert f'"{tier}": {{"daysAfterModificationGreaterThan": "{days}"}}' in tiers
    assert '"tierToArchive"' in tiers
    assert '"greater_than"' in tiers  # the archive tier only when asked for
    deleted = heartbeats_rule["definition"]["actions"]["baseBlob"]
    assert deleted == {"delete": {"daysAfterModificationGreaterThan": "heartbeatArchiveDays"}}
    main = bicep.parse("main.bicep")["parameters"]
    assert main["heartbeatArchiveDays"]["default"] == Settings.model_fields["heartbeat_archive_days"].default == 14
    assert "heartbeatArchiveDays" in json.dumps(bicep.variable("main.bicep", "appSettings")["HEARTBEAT_ARCHIVE_DAYS"])
    passed = bicep.module("main.bicep", "archive")["params"]
    assert str(passed["heartbeatArchiveDays"]) == "heartbeatArchiveDays"
    cool, cold = main["archiveActionsCoolAfterDays"]["default"], main["archiveActionsColdAfterDays"]["default"]
    assert 0 < cool < cold
    assert main["archiveActionsArchiveTierAfterDays"]["default"] == 0  # offline tiers only by choice
