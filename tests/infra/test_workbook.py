"""The workbook the infra deploys (infra/modules/workbook.bicep, its layout infra/workbook.json): its queries name
only metrics the app emits (shared/telemetry/metrics.py), with their dimensions, and Cosmos DB metrics that exist; every
metric the app emits is on it; the deployment fills every resource id its queries read; and its picture in the
docs is drawn from this layout."""

import json
import re
from pathlib import Path
from typing import Any

from PIL import Image

from shared.telemetry import metrics
from tests import bicep
from tools import workbook_picture

LAYOUT = bicep.INFRA / "workbook.json"
# Cosmos DB's own metrics the workbook charts, as "Supported metrics for Microsoft.DocumentDB/DatabaseAccounts"
# names them (https://learn.microsoft.com/azure/azure-monitor/reference/supported-metrics/microsoft-documentdb-
# databaseaccounts-metrics, read 2026-11-28): the name and the dimensions the workbook splits or filters by.
COSMOS_METRICS = {
    "NormalizedRUConsumption": {"CollectionName", "DatabaseName", "Region", "PartitionKeyRangeId"},
    "MongoRequests": {"DatabaseName", "CollectionName", "Region", "CommandName", "ErrorCode", "Status"},
}


def items(node: Any) -> list[dict[str, Any]]:
    """Every item of the layout, the groups' too."""
    found = []
    for item in node.get("items", []):
        found.append(item)
        if item["type"] == 12:
            found += items(item["content"])
    return found


def layout() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(LAYOUT.read_text())
    return loaded


def queries() -> list[str]:
    return [item["content"]["query"] for item in items(layout()) if item["type"] == 3]


def test_the_workbook_s_queries_name_only_metrics_and_dimensions_the_app_emits() -> None:
    for query in queries():
        named = set(re.findall(r"'(pillbottle\.[a-z0-9_.]+)'", query))
        assert named <= set(metrics.NAMES), f"the workbook queries {sorted(named - set(metrics.NAMES))}"
        read = {dot or bracket for dot, bracket in re.findall(r"customDimensions(?:\.(\w+)|\['(\w+)'\])", query)}
        for dimension in read:
            assert any(dimension in metrics.ATTRIBUTES[name] for name in named), (dimension, sorted(named))


def test_every_metric_the_app_emits_is_on_the_workbook() -> None:
    shown = {name for query in queries() for name in re.findall(r"'(pillbottle\.[a-z0-9_.]+)'", query)}
    assert set(metrics.NAMES) == shown, f"not on the workbook: {sorted(set(metrics.NAMES) - shown)}"


def test_cosmos_db_s_charts_name_metrics_and_dimensions_cosmos_db_has() -> None:
    charted = {}
    for item in items(layout()):
        if item["type"] != 10:
            continue
        content = item["content"]
        assert content["resourceType"] == "microsoft.documentdb/databaseaccounts"
        for metric in content["metrics"]:
            name = metric["metric"].removeprefix("microsoft.documentdb/databaseaccounts-Requests-")
            dimensions = {metric["splitBy"], *(f["key"] for f in content.get("filters", []))}
            assert dimensions <= COSMOS_METRICS[name], (name, dimensions)
            charted[name] = content.get("filters", [])
    assert set(charted) == set(COSMOS_METRICS)
    assert charted["MongoRequests"] == [{"id": "1", "key": "ErrorCode", "operator": 0, "values": ["16500"]}]


def test_the_deployment_fills_every_resource_id_the_queries_read_and_deploys_the_workbook() -> None:
    text = LAYOUT.read_text()
    placeholders = set(re.findall(r"__[A-Z_]+__", text))
    module = (bicep.INFRA / "modules" / "workbook.bicep").read_text()
    assert placeholders == set(re.findall(r"replace\(\w+, '(__[A-Z_]+__)'", module))
    assert "loadTextContent('../workbook.json')" in module
    workbook = bicep.resource("modules/workbook.bicep", "workbook")
    assert workbook["type"] == "Microsoft.Insights/workbooks"
    assert workbook["config"]["kind"] == "shared"
    assert str(workbook["config"]["properties"]["serializedData"]) == "serialized"
    assert set(bicep.module("main.bicep", "workbook")["params"]) >= {
        "applicationInsightsName",
        "logAnalyticsWorkspaceName",
        "cosmosAccountName",
    }


def recorded_hash(path: Path) -> str | None:
    """The layout hash a PNG records (its text chunk)."""
    with Image.open(path) as picture:
        return picture.info.get(workbook_picture.HASH_KEY)


def test_the_picture_in_the_docs_is_drawn_from_this_layout() -> None:
    assert recorded_hash(workbook_picture.PICTURE) == workbook_picture.layout_hash(), (
        "docs/workbook.png was drawn from another layout: python -m tools.workbook_picture"
    )
    assert "![" in (bicep.ROOT / "docs" / "operations.md").read_text().split("workbook.png")[0][-400:]


def test_a_picture_of_a_changed_layout_records_the_change(tmp_path: Path) -> None:
    changed = layout()
    changed["items"][1]["content"]["title"] = "Another title"
    source = tmp_path / "workbook.json"
    source.write_text(json.dumps(changed))
    output = tmp_path / "picture.png"

    workbook_picture.draw(changed, output, workbook_picture.layout_hash(source))

    assert recorded_hash(output) not in (None, workbook_picture.layout_hash())
