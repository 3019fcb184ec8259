"""One stable figure: the design-scale bill's headline is computed from pinned inputs (the request units of
benchmarks/cost_record.json, the CPU a request takes from benchmarks/cpu_calibration.json, HOST_CPU_MS's assumed
host share), so `./dev bench --quick`, a full run, README.md and docs/costs.md give the same `Cosmos DB: $N a month`
and `whole deployment: $N a month`. The figures expected here are the model's, computed now: a change to any line of
the bill (the telemetry's, a price, the hosting) that the README and docs/costs.md do not follow fails here, naming
the figures they should give."""

import json
from pathlib import Path

import pytest

from benchmarks import costs, cpu_calibration, deployment_bill, design_scale, suite

ROOT = Path(__file__).resolve().parent.parent.parent


@pytest.fixture(scope="module")
def bill() -> tuple[list[design_scale.Row], deployment_bill.FunctionsBill, list[deployment_bill.Line]]:
    rows, functions, _work, lines = suite.whole_deployment(costs.load_record(), deployment_bill.RequestCpu.calibrated())
    return rows, functions, lines


def money(lines: list[deployment_bill.Line]) -> list[str]:
    return suite.money_lines(lines[0].one_region, deployment_bill.total(lines, 1))


def test_the_readme_gives_the_models_cosmos_db_and_whole_deployment_figures(bill):
    _rows, _functions, lines = bill
    readme = (ROOT / "README.md").read_text()

    for line in money(lines):
        assert f"`{line}`" in readme, f"README.md should say `{line}` (the model's figure from its pinned inputs)"


def test_docs_costs_gives_the_same_figures_and_its_bill_is_the_models(bill):
    rows, functions, lines = bill
    page = (ROOT / "docs" / "costs.md").read_text()

    for line in money(lines):
        assert f"`{line}`" in page, f"docs/costs.md should say `{line}`"
    table = deployment_bill.bill_markdown(lines, design_scale.reserved(rows))
    assert table in page, "docs/costs.md's bill is not the model's: run ./dev bench (or regenerate its cost section)"
    assert deployment_bill.functions_markdown(functions) in page


def test_the_design_scale_parameters_deploy_the_models_choice(bill):
    rows, functions, _lines = bill
    given = json.loads((ROOT / "infra" / "design-scale.parameters.json").read_text())["parameters"]
    expected = suite.design_parameters(rows, functions)

    assert {name: entry["value"] for name, entry in given.items()} == expected


def test_the_cost_record_and_the_calibration_say_what_they_are():
    record = costs.load_record()
    assert {"heartbeat", "opened", "closed", "actions feed", "consumer run", "tally 0"} <= set(record.units)
    assert record.units["heartbeat"].commands == record.units["heartbeat"].units  # one command a heartbeat
    calibration = cpu_calibration.load()
    assert all((calibration.recorded, calibration.machine, calibration.load, calibration.method))
    assert calibration.figures[cpu_calibration.HEARTBEAT_COMMANDS] == 1.0
    assert calibration.figures[cpu_calibration.ACTION_COMMANDS] == 3.0
    assert calibration.heartbeat_cpu_ms > calibration.figures[cpu_calibration.HEARTBEAT_DIRECT] > 0


def test_a_broken_record_is_refused_naming_its_file(tmp_path):
    broken = tmp_path / "cost_record.json"
    broken.write_text('{"units": {}}')
    with pytest.raises(ValueError, match=r"cost_record\.json: not a cost record"):
        costs.load_record(broken)
    calibration = tmp_path / "cpu_calibration.json"
    calibration.write_text(json.dumps({"recorded": "x", "machine": "m", "load": "l", "method": "m", "commit": "c",
                                       "figures": {"heartbeat_cpu_ms": 1.0}}))  # fmt: skip
    with pytest.raises(ValueError, match="no figures"):
        cpu_calibration.load(calibration)


def test_a_cost_record_reads_back_as_it_was_written(tmp_path):
    record = costs.load_record()
    copy = tmp_path / "record.json"

    costs.write_record(record, copy)

    assert costs.load_record(copy) == record
