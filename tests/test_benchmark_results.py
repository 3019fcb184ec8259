"""The README's benchmark summary and design-scale table are the ones the last full benchmark run generated
(benchmarks/RESULTS.md)."""

from pathlib import Path

from benchmarks import suite
from benchmarks.harness import Table


def block(text: str, start: str, end: str) -> str:
    return text[text.index(start) + len(start) : text.index(end)].strip()


def test_the_readme_design_scale_table_is_the_last_full_runs():
    results = suite.RESULTS.read_text()
    readme = suite.README.read_text()
    assert "full run" in results.splitlines()[2]
    table = block(results, suite.TABLE_START, suite.TABLE_END)
    assert block(readme, suite.TABLE_START, suite.TABLE_END) == table
    assert "| **total** |" in table


def test_the_readme_summary_is_the_last_full_runs():
    results = suite.RESULTS.read_text()
    summary = block(suite.README.read_text(), suite.SUMMARY_START, suite.SUMMARY_END)
    rows = summary.splitlines()[4:]  # after the stamp, a blank line, the header and its rule
    assert any(row.startswith("| design scale | RU/s |") for row in rows)
    for line in rows:
        area, figure, app = (cell.strip() for cell in line.strip("|").split("|")[:3])
        assert any(area in row and figure in row and app in row for row in results.splitlines()), line


def test_update_readme_puts_each_block_between_its_markers(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(
        f"a\n{suite.SUMMARY_START}\nold\n{suite.SUMMARY_END}\nb\n{suite.TABLE_START}\nold\n{suite.TABLE_END}\nc\n"
    )

    suite.update_readme("stamp:\n\n| area |\n\n| collection | x |", readme)

    assert readme.read_text() == (
        f"a\n{suite.SUMMARY_START}\nstamp:\n\n| area |\n{suite.SUMMARY_END}\n"
        f"b\n{suite.TABLE_START}\n| collection | x |\n{suite.TABLE_END}\nc\n"
    )


def test_a_quick_run_writes_nowhere_unless_given_an_output(tmp_path, monkeypatch, capsys):
    written: list[str] = []
    monkeypatch.setattr(suite, "run", lambda quick: (f"quick={quick}", "bill"))
    monkeypatch.setattr(suite, "update_readme", lambda bill, readme=suite.README: written.append(bill))
    monkeypatch.setattr(Path, "write_text", lambda path, text: written.append(f"{path}: {text}"))

    suite.main(["--quick"])
    assert written == []
    assert "nothing written" in capsys.readouterr().out

    suite.main(["--quick", "--output", str(tmp_path / "quick.md")])
    assert written == [f"{tmp_path / 'quick.md'}: quick=True"]  # and not the README

    written.clear()
    suite.main([])
    assert written == [f"{suite.RESULTS}: quick=False", "bill"]  # a full run: RESULTS.md and the README


def test_the_summary_takes_the_design_scale_bill_and_not_the_table_of_other_ways_beside_it():
    bill = Table("Design scale: the bill from these costs", ["measure", "value", "goal"], [["RU/s", "1", "2"]])
    other_ways = Table(
        "Design scale: the same work run other ways, side by side, billed by the same model",
        ["how", "billed RU/s", "vs today"],
        [["today", "1", "1.00x"]],
    )

    assert suite.summary_rows([bill, other_ways]) == [["design scale", "RU/s", "1", "-", "goal: 2"]]
