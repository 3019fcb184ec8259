"""The docs' benchmark summary (docs/benchmarks.md) and design-scale table (docs/costs.md) are the ones the last
full benchmark run generated (benchmarks/RESULTS.md)."""

import math
import re
from pathlib import Path

from benchmarks import design_scale, suite
from benchmarks.cost_model import UnitCost
from benchmarks.harness import Table
from shared.settings import Settings
from shared.store import schema


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
    assert any(row.startswith("| design scale | RU/s |") for row in rows)
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

    suite.main(["--quick"])
    assert written == []
    assert "nothing written" in capsys.readouterr().out

    suite.main(["--quick", "--output", str(tmp_path / "quick.md")])
    assert written == [f"{tmp_path / 'quick.md'}: quick=True"]  # and not the docs

    written.clear()
    suite.main([])
    assert written == [f"{suite.RESULTS}: quick=False", "bill"]  # a full run: RESULTS.md and the docs


def test_the_summary_takes_the_design_scale_bill_and_not_the_table_of_other_ways_beside_it():
    bill = Table("Design scale: the bill from these costs", ["measure", "value", "goal"], [["RU/s", "1", "2"]])
    other_ways = Table(
        "Design scale: the same work run other ways, side by side, billed by the same model",
        ["how", "billed RU/s", "vs today"],
        [["today", "1", "1.00x"]],
    )

    assert suite.summary_rows([bill, other_ways]) == [["design scale", "RU/s", "1", "-", "goal: 2"]]
