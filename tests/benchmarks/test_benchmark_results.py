"""The docs' benchmark summary (docs/benchmarks.md) and design-scale table (docs/costs.md) are the ones the last
full benchmark run generated (benchmarks/RESULTS.md)."""

import json
import math
import re
from pathlib import Path

from benchmarks import costs, deployment_bill, design_scale, runtime_cost, suite, suite_command
from benchmarks.harness import PRINTED, Table
from shared.settings import Settings
from shared.store import schema
from tools.costs.request_units import UnitCost


def block(text: str, start: str, end: str) -> str:
    return text[text.index(start) + len(start) : text.index(end)].strip()


def results_table(text: str, title: str) -> Table:
    """The table of RESULTS.md whose title starts with `title`, read back as print_table printed it: the title,
    the header, a rule of dashes a column (two spaces apart, each as wide as its column), the rows to a blank
    line."""
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(title))
    starts = [match.start() for match in re.finditer(r"-+", lines[at + 2])]

    def cells(line: str) -> list[str]:
        return [line[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)]

    rows = []
    for line in lines[at + 3 :]:
        if not line.strip() or line.startswith("```"):
            break
        rows.append(cells(line))
    return Table(lines[at], cells(lines[at + 1]), rows)


def scaleout_tables() -> list[Table]:
    results = suite.RESULTS.read_text()
    return [
        results_table(results, "Report workers side by side"),
        results_table(results, "Check partitions side by side"),
    ]


def test_the_scale_out_table_in_the_docs_is_the_last_full_runs():
    """docs/benchmarks.md showed an older run's scale-out (890 changes a second against RESULTS.md's 439)."""
    expected = suite.markdown_table(suite.SCALEOUT_HEADER, suite.scaleout_rows(scaleout_tables()))

    assert "| reports | 1 | 439 changes/s | 1.00x |" in expected  # read back from RESULTS.md as it was written
    assert block(suite.SUMMARY_DOC.read_text(), suite.SCALEOUT_START, suite.SCALEOUT_END) == expected


CALL_MS = 5  # docs/costs.md's round trip to Cosmos DB in region, from which it sizes the workers
ACTIONS_PER_SECOND = 1_400
TALLY_DOCUMENTS_PER_SECOND = 30_000_000 / 3600
CHECK_SWEEP_INSTANCES = 8  # 3 checks x 16 partitions, 6 messages an instance


def test_the_workers_in_docs_costs_are_sized_from_the_last_full_runs_scale_out():
    """docs/costs.md sizes the report and check workers from the scale-out benchmark's one-worker figures: the
    ones RESULTS.md has, and what follows from them at CALL_MS a database call."""
    reports, checks = scaleout_tables()
    one_worker, one_sweeper = reports.rows[0], checks.rows[0]
    per_change = float(reports.column(one_worker, "cmds/change"))
    per_bottle = float(checks.column(one_sweeper, "cmds/bottle in trouble"))
    measured = float(reports.column(one_worker, "changes/s").replace(",", ""))
    swept = float(checks.column(one_sweeper, "in trouble/s").replace(",", ""))
    rate = 1000 / (per_change * CALL_MS)  # changes a second one worker handles at CALL_MS a call
    actions, tally = math.ceil(ACTIONS_PER_SECOND / rate), round(TALLY_DOCUMENTS_PER_SECOND / rate)
    page = " ".join(suite.TABLE_DOC.read_text().split())  # one line: the phrases may be wrapped anywhere

    for phrase in [
        f"about {per_change:.2f} database calls per report change",
        f"and {per_bottle:.2f} database calls per bottle a check finds in trouble",
        f"handles ~{round(rate, -1):.0f} changes a second (the benchmark, with the store on the same cores, "
        f"measures ~{round(measured, -1):.0f})",
        f"1.4 K / ~{round(rate, -1):.0f} ≈ {actions} workers side by side",
        f"~{tally} workers busy all the time",
        f"the queue workers add ~{actions + tally + CHECK_SWEEP_INSTANCES} ({actions} for the actions, ~{tally} for "
        f"the tally, ~{CHECK_SWEEP_INSTANCES} for a peak check sweep",
        f"One worker sweeps ~{round(swept, -1):.0f} bottles in trouble a second",
    ]:
        assert phrase in page


def test_the_design_scale_table_in_the_docs_is_the_last_full_runs():
    results = suite.RESULTS.read_text()
    doc = suite.TABLE_DOC.read_text()
    assert "full run" in results.splitlines()[2]
    table = block(results, suite.TABLE_START, suite.TABLE_END)
    assert block(doc, suite.TABLE_START, suite.TABLE_END) == table
    assert "| **total** |" in table


def test_the_summary_in_the_docs_is_the_last_full_runs():
    results = suite.RESULTS.read_text()
    summary = block(suite.SUMMARY_DOC.read_text(), suite.SUMMARY_START, suite.SUMMARY_END)
    rows = summary.splitlines()[4:]  # after the stamp, a blank line, the header and its rule
    assert any(row.startswith("| design scale | RU/s at the account's busiest hour") for row in rows)
    assert any(row.startswith("| design scale | Cosmos DB: $ a month, one region |") for row in rows)
    assert any(row.startswith("| design scale | whole deployment: $ a month, one region |") for row in rows)
    for line in rows:
        area, figure, app = (cell.strip() for cell in line.strip("|").split("|")[:3])
        assert any(area in row and figure in row and app in row for row in results.splitlines()), line


def test_update_docs_puts_each_block_between_its_markers(tmp_path):
    summary_doc, table_doc = tmp_path / "benchmarks.md", tmp_path / "costs.md"
    summary_doc.write_text(
        f"a\n{suite.SUMMARY_START}\nold\n{suite.SUMMARY_END}\nb\n{suite.SCALEOUT_START}\nold\n{suite.SCALEOUT_END}\n"
    )
    table_doc.write_text(f"c\n{suite.TABLE_START}\nold\n{suite.TABLE_END}\nd\n")

    suite.update_docs(suite.DocBlocks("stamp:\n\n| area |", "| job |", "| collection | x |"), summary_doc, table_doc)

    assert summary_doc.read_text() == (
        f"a\n{suite.SUMMARY_START}\nstamp:\n\n| area |\n{suite.SUMMARY_END}\nb\n"
        f"{suite.SCALEOUT_START}\n| job |\n{suite.SCALEOUT_END}\n"
    )
    assert table_doc.read_text() == f"c\n{suite.TABLE_START}\n| collection | x |\n{suite.TABLE_END}\nd\n"


def test_update_docs_writes_the_deployment_parameters_the_bill_carries(tmp_path):
    summary_doc, table_doc, deployment = tmp_path / "benchmarks.md", tmp_path / "costs.md", tmp_path / "p.json"
    summary_doc.write_text(f"{suite.SUMMARY_START}\n{suite.SUMMARY_END}\n")
    table_doc.write_text(f"{suite.TABLE_START}\n{suite.TABLE_END}\n")
    parameters = suite.deployment_file({"cosmosStandardThroughputByCollection": {"bottle_heartbeats": 195_000}})

    summary_doc.write_text(
        f"{suite.SUMMARY_START}\n{suite.SUMMARY_END}\n{suite.SCALEOUT_START}\n{suite.SCALEOUT_END}\n"
    )
    blocks = suite.DocBlocks(
        summary="stamp:\n\n| area |", scaleout="| job |", bill="| collection | x |", deployment=parameters
    )
    suite.update_docs(blocks, summary_doc, table_doc, deployment)

    assert table_doc.read_text() == f"{suite.TABLE_START}\n| collection | x |\n{suite.TABLE_END}\n"
    written = json.loads(deployment.read_text())
    assert written["parameters"] == {"cosmosStandardThroughputByCollection": {"value": {"bottle_heartbeats": 195_000}}}


def test_a_full_runs_bill_replaces_the_table_in_docs_costs_and_nothing_else(tmp_path):
    """The design-scale bill benchmarks/design_scale.py writes lands between the markers of docs/costs.md, and the
    page's text around them stays as it was."""
    measured = design_scale.Measured(
        heartbeat=UnitCost({schema.BOTTLE_HEARTBEATS: 5.0}),
        opened=UnitCost(),
        closed=UnitCost(),
        actions_feed=UnitCost(),
        tally=[UnitCost({schema.USER_HOURLY_REPORTS: 1.0})],
        consumer_run=UnitCost(),
        swept={},
        sweep_run={},
        sizes={},
    )
    bill = design_scale.markdown(design_scale.table(measured, Settings()))
    summary_doc, table_doc = tmp_path / "benchmarks.md", tmp_path / "costs.md"
    summary_doc.write_text(suite.SUMMARY_DOC.read_text())
    page = suite.TABLE_DOC.read_text()
    table_doc.write_text(page)

    blocks = suite.DocBlocks("stamp:\n\n| area | figure |\n| --- | --- |", "| job |", bill)
    suite.update_docs(blocks, summary_doc, table_doc)

    written = table_doc.read_text()
    assert block(written, suite.TABLE_START, suite.TABLE_END) == bill.strip()
    assert "| **total** |" in bill
    assert written[: written.index(suite.TABLE_START)] == page[: page.index(suite.TABLE_START)]
    assert written[written.index(suite.TABLE_END) :] == page[page.index(suite.TABLE_END) :]


def test_a_quick_run_writes_nowhere_unless_given_an_output(tmp_path, monkeypatch, capsys):
    written: list[str] = []
    monkeypatch.setattr(suite, "run", lambda quick: (f"quick={quick}", "bill"))
    monkeypatch.setattr(suite, "update_docs", lambda bill, *docs: written.append(bill))
    monkeypatch.setattr(Path, "write_text", lambda path, text: written.append(f"{path}: {text}"))

    suite_command.main(["--quick"])
    assert written == []
    assert "nothing written" in capsys.readouterr().out

    suite_command.main(["--quick", "--output", str(tmp_path / "quick.md")])
    assert written == [f"{tmp_path / 'quick.md'}: quick=True"]  # and not the docs

    written.clear()
    suite_command.main([])
    assert written == [f"{suite.RESULTS}: quick=False", "bill"]  # a full run: RESULTS.md and the docs


def runtime_table(heartbeat: str, action: str) -> Table:
    """benchmarks/runtime_cost.py's table of a run, as print_table printed it."""
    rows = [
        [runtime_cost.HEARTBEAT, runtime_cost.DIRECT, "600", "1.00", "1.700", "1.00x", "30.0", "1.700"],
        [runtime_cost.HEARTBEAT, runtime_cost.RUNTIME, "600", "1.00", heartbeat, "1.80x", "31.0", heartbeat],
        [runtime_cost.ACTION, runtime_cost.DIRECT, "300", "3.00", "4.000", "1.00x", "100.0", "4.000"],
        [runtime_cost.ACTION, runtime_cost.RUNTIME, "300", "3.00", action, "1.25x", "101.0", action],
    ]
    return Table(f"{runtime_cost.TITLE} (3.13.0, the store in another process)", runtime_cost.HEADER, rows)


def test_a_runs_cpu_a_request_is_read_from_its_runtime_table_and_printed_beside_the_calibration_never_priced():
    live = suite.measured_live_cpu([runtime_table("3.500", "6.000")])
    assert live == suite.LiveCpu(3.5, 6.0)
    assert suite.measured_live_cpu([]) is None
    calibrated = deployment_bill.RequestCpu(heartbeat_ms=3.0, action_ms=5.0, host_ms=1.2)

    rows = suite.cpu_rows(calibrated, live)

    assert rows == [
        ["a heartbeat", "3.000", "3.500", "+17%"],
        ["an opened or closed event", "5.000", "6.000", "+20%"],
    ]
    assert suite.cpu_rows(calibrated, None)[0] == ["a heartbeat", "3.000", "not measured", "-"]


def test_the_bill_is_priced_from_the_calibration_whatever_this_runs_cpu(capsys):
    """The same pinned inputs, two runs on machines a CPU apart: the same money lines."""
    PRINTED.clear()
    first = suite.cost_section(synthetic_costs(), suite.LiveCpu(2.0, 4.0), pinned=synthetic_costs())
    second = suite.cost_section(synthetic_costs(), suite.LiveCpu(6.0, 9.0), pinned=synthetic_costs())
    assert first.money == second.money
    out = capsys.readouterr().out
    assert "CPU ms a request through the runtime: the calibration the bill is priced from" in out
    assert "The Functions host's own CPU a request (HOST_CPU_MS" in out


def test_a_runs_request_units_are_billed_beside_the_recorded_ones_which_the_headline_takes(capsys):
    PRINTED.clear()
    heavier = synthetic_costs()
    heavier.units["heartbeat"] = costs.PerUnit(1, UnitCost({schema.BOTTLE_HEARTBEATS: 20.0}), 1)

    section = suite.cost_section(heavier, None, pinned=synthetic_costs())

    [table] = [t for t in PRINTED if t.title.startswith("Cosmos DB $ a month: the recorded")]
    assert section.money == suite.cost_section(synthetic_costs(), None, pinned=synthetic_costs()).money
    recorded, now = (float(table.column(table.rows[0], c).replace(",", "")) for c in ("recorded (priced)", "this run"))
    assert now > recorded
    assert section.priced is not None


def test_the_summary_takes_the_design_scale_bill_and_not_the_table_of_other_ways_beside_it():
    bill = Table("Design scale: the bill from these costs", ["measure", "value", "goal"], [["RU/s", "1", "2"]])
    other_ways = Table(
        "Design scale: the same work run other ways, side by side, billed by the same model",
        ["how", "billed RU/s", "vs today"],
        [["today", "1", "1.00x"]],
    )

    assert suite.summary_rows([bill, other_ways]) == [["design scale", "RU/s", "1", "-", "goal: 2"]]


def synthetic_costs() -> costs.Costs:
    """What benchmarks/costs.py measures, made up: a heartbeat of 10 RU, events of 17, a tally change of 1."""
    unit = {
        "heartbeat": UnitCost({schema.BOTTLE_HEARTBEATS: 10.0}),
        "opened": UnitCost({schema.BOTTLES: 10.0, schema.BOTTLE_ACTIONS: 7.0}),
        "closed": UnitCost({schema.BOTTLES: 10.0, schema.BOTTLE_ACTIONS: 7.0}),
        "actions feed": UnitCost({schema.USER_HOURLY_REPORTS: 0.5}),
        "consumer change": UnitCost({schema.USER_HOURLY_REPORTS: 1.5}),
        "consumer run": UnitCost({schema.LEASES: 1.0}),
        **{f"tally {h}": UnitCost({schema.USER_HOURLY_REPORTS: 1.0, schema.BOTTLE_HEARTBEATS: 0.3}) for h in range(6)},
        **{kind: UnitCost({schema.NOTIFICATIONS: 10.0}) for kind in ("late_dose", "left_open", "silent")},
        **{f"{kind} empty": UnitCost({schema.BOTTLES: 1.0}) for kind in ("late_dose", "left_open", "silent")},
    }
    units = {name: costs.PerUnit(1, cost, 1) for name, cost in unit.items()}
    for name in ("heartbeat", "opened", "closed", "consumer change", "late_dose", "left_open", "silent"):
        units[f"seeds {name}"] = costs.PerUnit(1, UnitCost({schema.BOTTLES: 5.55}), 1)
    sizes = {"heartbeat max": 299.0, schema.BOTTLE_HEARTBEATS: 280.0, "heartbeat index terms": 2.0}
    return costs.Costs(units, sizes)


def test_the_cost_section_ends_with_the_dollars_of_cosmos_db_and_of_the_whole_deployment(capsys):
    """`./dev bench` prints, among its summary lines, `Cosmos DB: $N a month` and `whole deployment: $N a month`
    (one region), the figures of the bill's headline: the account's busiest hour and a line a component."""
    PRINTED.clear()
    section = suite.cost_section(synthetic_costs(), pinned=synthetic_costs())

    cosmos, whole = section.money
    assert re.fullmatch(r"Cosmos DB: \$[\d,]+ a month", cosmos)
    assert re.fullmatch(r"whole deployment: \$[\d,]+ a month", whole)
    [bill] = [table for table in PRINTED if table.title.startswith("Design scale: the bill")]
    value = {row[0]: row[1] for row in bill.rows}
    assert cosmos == f"Cosmos DB: ${value['Cosmos DB: $ a month, one region']} a month"
    assert whole == f"whole deployment: ${value['whole deployment: $ a month, one region']} a month"
    assert any(name.startswith("RU/s at the account's busiest hour (") for name in value)
    assert {"Functions: $ a month, one region", "Blob Storage archive: $ a month, one region"} <= set(value)
    assert "Cosmos DB: $ a month, one region" in capsys.readouterr().out
    assert f"{suite.DEPLOYMENT_START}\n" in section.bill
    assert suite.money_lines(20_981.4, 64_000.5) == ["Cosmos DB: $20,981 a month", "whole deployment: $64,000 a month"]
