"""Every benchmark in one run: ingestion, the notification checks, the report consumer, and what the app's work
costs on Cosmos DB in request units (benchmarks/costs.py, by the rules of tools/costs/rules.py), each beside
its same-run baseline (the seeds' approach) with the ratio; then the design-scale bill (benchmarks/design_scale.py)
from those costs. The command, `./dev bench`, and what it prints and writes: benchmarks/suite_command.py.
"""

import json
import os
import platform
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple

from benchmarks import (
    costs,
    cpu_calibration,
    deployment_bill,
    design_scale,
    runtime_cost,
    scaleout,
    telemetry,
)
from benchmarks.checks import runs as checks
from benchmarks.harness import PRINTED, Table, print_table
from benchmarks.ingestion import FLEETS, QUICK_FLEETS, STEADY_EVENTS
from benchmarks.ingestion import runs as ingestion
from benchmarks.reports import runs as reports
from shared.settings import get_settings
from shared.store import schema
from shared.store.command_line import CommandFailed, user_problem
from tools.costs.rules import ASSUMPTIONS, RULES
from tools.progress import Ticker

RESULTS = Path(__file__).with_name("RESULTS.md")
DOCS = Path(__file__).resolve().parent.parent / "docs"
SUMMARY_DOC = DOCS / "benchmarks.md"  # the summary, between SUMMARY_START and SUMMARY_END
TABLE_DOC = DOCS / "costs.md"  # the design-scale table, between TABLE_START and TABLE_END
TABLE_START = "<!-- design-scale table: written by ./dev bench (benchmarks/suite.py) -->"
TABLE_END = "<!-- end of the design-scale table -->"
SUMMARY_START = "<!-- benchmark summary: written by ./dev bench (benchmarks/suite.py) -->"
SUMMARY_END = "<!-- end of the benchmark summary -->"
DEPLOYMENT_FILE = DOCS.parent / "infra" / "design-scale.parameters.json"  # the bill's choice, for infra/main.bicep
DEPLOYMENT_START = "<!-- deployment parameters -->"
SUMMARY_HEADER = ["area", "figure", "app", "baseline (seeds)", "ratio"]
SCALEOUT_START = "<!-- scale-out table: written by ./dev bench (benchmarks/suite.py) -->"
SCALEOUT_END = "<!-- end of the scale-out table -->"
SCALEOUT_HEADER = ["job", "workers", "throughput", "vs 1 worker", "commands per unit"]


def _commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return out.stdout.strip() + (" (with uncommitted changes)" if dirty.stdout.strip() else "")


Rows = list[list[str]]


def _ingestion(table: Table) -> Rows:
    col, rows = table.column, []
    if "steady state" in table.title:
        for bottles in dict.fromkeys(col(row, "bottles") for row in table.rows):
            fleet = [row for row in table.rows if col(row, "bottles") == bottles]
            seeds, app = fleet[0], next(row for row in fleet if col(row, "approach") == ingestion.APP_SINGLE)
            floor = next(row for row in fleet if col(row, "approach") == ingestion.FLOOR)
            case = f"one event per request, {bottles} bottles"
            rows.append(["ingestion", f"events/s, {case}", col(app, "events/s"), col(seeds, "events/s"),
                         col(app, "vs seeds")])  # fmt: skip
            rows.append(["ingestion", f"events/s against the store floor, {case}", col(app, "events/s"),
                         f"{col(floor, 'events/s')} (store floor)",
                         f"{_number(col(app, 'events/s')) / _number(col(floor, 'events/s')):.2f}x"])  # fmt: skip
        return rows
    one, many = table.rows[0], table.rows[1]
    for row in table.rows[2:]:
        case = col(row, "approach").removeprefix("app: ")
        rows.append(["ingestion", f"events/s, {case}", col(row, "events/s"), f"{col(many, 'events/s')} (insert_many)",
                     col(row, "vs insert_many")])  # fmt: skip
        rows.append(["ingestion", f"events/s, {case}, against single inserts", col(row, "events/s"),
                     f"{col(one, 'events/s')} (one insert per event)", col(row, "vs one insert")])  # fmt: skip
        fewer = f"{col(row, 'fewer commands')} fewer"
        rows.append(["ingestion", f"commands/event, {case}", col(row, "commands/event"),
                     f"{col(many, 'commands/event')} (insert_many)", fewer])  # fmt: skip
    return rows


def _number(cell: str) -> float:
    return float(cell.replace(",", ""))


def _checks(table: Table) -> Rows:
    col, rows = table.column, []
    for seeds, app in zip(table.rows, table.rows[1:], strict=False):
        same = all(col(seeds, c) == col(app, c) for c in ("check", "bottles", "in trouble"))
        if same and "seeds" in col(seeds, "approach") and "app" in col(app, "approach"):
            case = f"commands per sweep, {col(app, 'check')} at {col(app, 'bottles')} bottles"
            rows.append(["checks", case, col(app, "commands"), col(seeds, "commands"),
                         f"{col(app, 'fewer commands')} fewer"])  # fmt: skip
    return rows


def _reports(table: Table) -> Rows:
    col, rows = table.column, []
    for naive, app in zip(table.rows[::2], table.rows[1::2], strict=True):
        scenario = col(app, "scenario")
        rows.append(["reports", f"changes/s, {scenario}", col(app, "changes/s"), col(naive, "changes/s"),
                     col(app, "speed vs naive")])  # fmt: skip
        rows.append(["reports", f"commands/change, {scenario}", col(app, "cmds/change"),
                     col(naive, "cmds/change"), f"{col(app, 'fewer cmds')} fewer"])  # fmt: skip
    return rows


def _request_units(table: Table) -> Rows:
    col = table.column
    return [["cost", f"RU per {col(row, 'RU per')}", col(row, "app"), col(row, "seeds"),
             f"{col(row, 'seeds / app')} of the app's"] for row in table.rows]  # fmt: skip


def _heartbeat_document(table: Table) -> Rows:
    col = table.column
    return [["heartbeats", f"document {col(row, 'measure')}", col(row, "value"), "-", "goal: at most 512"]
            for row in table.rows[:1]]  # fmt: skip


def _design_scale(table: Table) -> Rows:
    col = table.column
    return [["design scale", col(row, "measure"), col(row, "value"), "-", f"goal: {col(row, 'goal')}"]
            for row in table.rows]  # fmt: skip


_SUMMARIES = {
    "Ingestion": _ingestion,
    "Notification checks": _checks,
    "Report consumer": _reports,
    "Request units": _request_units,
    "One bottle's heartbeat document": _heartbeat_document,
    "Design scale: the bill": _design_scale,  # not the table of other ways to run it, which has no goals
}


def scaleout_rows(tables: list[Table]) -> Rows:
    """The scale-out benchmark's two tables (report workers, check partitions side by side) as the rows of
    docs/benchmarks.md's table: per worker count, the throughput, its ratio to one worker, and the commands per
    unit of work."""
    rows: Rows = []
    for table in tables:
        col = table.column
        if table.title.startswith("Report workers side by side"):
            rows += [["reports", col(row, "workers"), f"{col(row, 'changes/s')} changes/s", col(row, "vs 1 worker"),
                      f"{col(row, 'cmds/change')} per change ({col(row, 'writes/change')} writes)"]
                     for row in table.rows]  # fmt: skip
        elif table.title.startswith("Check partitions side by side"):
            rows += [["checks", col(row, "workers"), f"{col(row, 'in trouble/s')} bottles in trouble/s",
                      col(row, "vs 1 worker"), f"{col(row, 'cmds/bottle in trouble')} per bottle in trouble"]
                     for row in table.rows]  # fmt: skip
    return rows


def summary_rows(tables: list[Table]) -> list[list[str]]:
    """The headline figures of every benchmark, each beside its same-run baseline, as one table."""
    rows: list[list[str]] = []
    for table in tables:
        for prefix, summarise in _SUMMARIES.items():
            if table.title.startswith(prefix):
                rows += summarise(table)
    return rows


class CostSection(NamedTuple):
    """The cost part of a run: its text for RESULTS.md, the bill's block for the docs (followed by the deployment
    parameters that take its choice: DEPLOYMENT_START, then infra/design-scale.parameters.json's text), and the
    money lines the summary ends with (MONEY_LINES)."""

    text: str
    bill: str
    money: list[str]
    priced: costs.Costs | None = None  # the request units the bill is priced from


def money_lines(cosmos: float, whole: float) -> list[str]:
    """The two lines a run's summary ends with: Cosmos DB's and the whole deployment's dollars a month, one
    region, at the design scale."""
    return [f"Cosmos DB: ${cosmos:,.0f} a month", f"whole deployment: ${whole:,.0f} a month"]


def headline(rows: list[design_scale.Row], lines: list[deployment_bill.Line]) -> list[list[str]]:
    """The design-scale bill's headline: the RU/s of the account's busiest hour (the collections' bills in the
    same hour), and dollars a month by component and in all, one region and two."""
    hour, billed = design_scale.busiest_hour(rows)
    found = [[f"RU/s at the account's busiest hour ({hour:02d}:00 UTC)", f"{billed:,.0f}", "-"]]
    for line in lines:
        goal = f"at most {design_scale.GOAL_DOLLARS:,}" if line.component == "Cosmos DB" else "-"
        found.append([f"{line.component}: $ a month, one region", f"{line.one_region:,.0f}", goal])
        if line.two_regions != line.one_region:
            found.append([f"{line.component}: $ a month, two regions", f"{line.two_regions:,.0f}", "-"])
    found.append(["whole deployment: $ a month, one region", f"{deployment_bill.total(lines, 1):,.0f}", "-"])
    found.append(["whole deployment: $ a month, two regions", f"{deployment_bill.total(lines, 2):,.0f}", "-"])
    found.append(["stored after a year, GB (data and index)", f"{sum(r.storage_gb for r in rows):,.0f}", "-"])
    return found


@dataclass(frozen=True)
class LiveCpu:
    """The CPU a request took through the runtime in this run (benchmarks/runtime_cost.py), milliseconds."""

    heartbeat_ms: float
    action_ms: float


def whole_deployment(
    measured: costs.Costs, cpu: deployment_bill.RequestCpu
) -> tuple[list[design_scale.Row], deployment_bill.FunctionsBill, deployment_bill.Workload, list[deployment_bill.Line]]:
    """The design-scale bill from the measured request units and `cpu`: the collections' rows, the Functions
    part, its work and the whole deployment's lines."""
    model = measured.measured()
    rows = design_scale.table(model, get_settings())
    requests, work = deployment_bill.design_scale_work(
        model.calls, design_scale.partitions_of(rows).get(schema.BOTTLE_ACTIONS, 1), get_settings(), cpu=cpu
    )
    functions = deployment_bill.functions_bill(requests, work)
    lines = deployment_bill.whole_bill(rows, functions, work, design_scale.notifications_a_day() / 86_400)
    return rows, functions, work, lines


def design_parameters(rows: list[design_scale.Row], functions: deployment_bill.FunctionsBill) -> dict[str, object]:
    """The infra/main.bicep parameters that deploy the bill's choices at the design scale (the file
    infra/design-scale.parameters.json): each collection's throughput, the Functions hosting, and the telemetry's
    sampling ratio and daily cap."""
    return (
        design_scale.deployment_parameters(rows)
        | deployment_bill.functions_parameters(functions)
        | deployment_bill.telemetry_parameters(functions)
    )


def cpu_rows(calibrated: deployment_bill.RequestCpu, live: LiveCpu | None) -> list[list[str]]:
    """The calibration's CPU a request beside this run's, with the difference: the bill takes the calibration's."""
    found = []
    for name, pinned, now in (
        ("a heartbeat", calibrated.heartbeat_ms, live.heartbeat_ms if live else None),
        ("an opened or closed event", calibrated.action_ms, live.action_ms if live else None),
    ):
        difference = f"{now / pinned - 1:+.0%}" if now else "-"
        found.append([name, f"{pinned:.3f}", f"{now:.3f}" if now else "not measured", difference])
    return found


def host_range_rows(measured: costs.Costs, calibrated: deployment_bill.RequestCpu) -> list[list[str]]:
    """The Functions line and the whole deployment with the host's CPU at the low end of its range, as assumed and
    at the high end (HOST_CPU_MS)."""
    found = []
    host = deployment_bill.HOST_CPU_MS
    for label, host_ms in (("low", host.low), ("assumed", host.assumed), ("high", host.high)):
        _rows, functions, _work, lines = whole_deployment(measured, replace(calibrated, host_ms=host_ms))  # pinned
        hosting = functions.hosting.name if functions.hosting else "-"
        instances = f"{functions.hosting.instances:,.0f}" if functions.hosting else "-"
        found.append([f"{label}: {host_ms} ms", hosting, instances, f"{functions.cost.total:,.0f}",
                      f"{deployment_bill.total(lines, 1):,.0f}"])  # fmt: skip
    return found


def cost_section(measured: costs.Costs, live: LiveCpu | None = None, pinned: costs.Costs | None = None) -> CostSection:
    """The RU table, the steady-state heartbeat document, the design-scale bill, the whole deployment's and the
    models' rules, all from the one honest model (tools/costs/rules.py, benchmarks/deployment_bill.py), priced
    from pinned inputs: the request units of `pinned` (None: the recorded full-size measurement,
    benchmarks/cost_record.json; this run's, `measured`, billed beside it), the CPU a request takes from
    benchmarks/cpu_calibration.json (this run's, `live`, printed beside it, never priced) and the host's as
    HOST_CPU_MS assumes it (the bill is printed at both ends of its range too)."""
    pinned = pinned or costs.load_record()
    sizes = measured.sizes
    calibrated = deployment_bill.RequestCpu.calibrated()
    rows, functions, _work, lines = whole_deployment(pinned, calibrated)
    live_rows = design_scale.table(measured.measured(), get_settings())
    per_unit = costs.table(measured, design_scale.partitions_of(rows))
    recorded, now = design_scale.monthly(rows, 1), design_scale.monthly(live_rows, 1)
    cosmos = print_table(
        "Cosmos DB $ a month: the recorded full-size measurement the bill is priced from "
        "(benchmarks/cost_record.json) beside this run's",
        [["Cosmos DB, one region", f"{recorded:,.0f}", f"{now:,.0f}", f"{now / recorded - 1:+.1%}"]],
        ["bill", "recorded (priced)", "this run", "difference"],
    )
    bill = "\n\n".join(
        [
            design_scale.markdown(rows),
            deployment_bill.functions_markdown(functions),
            deployment_bill.bill_markdown(lines, design_scale.reserved(rows)),
        ]
    )
    parameters = design_parameters(rows, functions)
    heartbeat = print_table(
        "One bottle's heartbeat document at steady state (a heartbeat every 30 minutes, window full)",
        [
            ["BSON bytes, largest", f"{sizes['heartbeat max']:,.0f}"],
            ["BSON bytes, average", f"{sizes['bottle_heartbeats']:,.0f}"],
            ["index terms a heartbeat deletes and inserts", f"{measured.terms_per_heartbeat}"],
        ],
        ["measure", "value"],
    )
    record = cpu_calibration.load()
    cpu = print_table(
        f"CPU ms a request through the runtime: the calibration the bill is priced from ({record.recorded}, "
        f"{record.machine}) beside this run",
        cpu_rows(calibrated, live),
        CPU_HEADER,
    )
    hosts = print_table(
        f"The Functions host's own CPU a request (HOST_CPU_MS, an assumption: {deployment_bill.HOST_CPU_MS.low} to "
        f"{deployment_bill.HOST_CPU_MS.high} ms): the bill at both ends",
        host_range_rows(pinned, calibrated),
        HOST_HEADER,
    )
    print_table("Design scale: the bill from these costs", headline(rows, lines), ["measure", "value", "goal"])
    alternatives = print_table(
        "Design scale: the same work run other ways, side by side, billed by the same model",
        design_scale.alternatives(pinned.measured(), get_settings()),
        design_scale.ALTERNATIVES_HEADER,
    )
    floor = print_table(
        "Design scale: the floor, every feature kept",
        design_scale.floor(pinned.measured(), get_settings()).lines(),
        design_scale.FLOOR_HEADER,
    )
    rules = "\n".join(
        f"- {rule.name}: {rule.statement}. Example: {rule.example} ({rule.source})"
        for rule in (*RULES, *deployment_bill.RULES)
    )
    assumptions = "\n".join(f"- {text}" for text in (*ASSUMPTIONS, *deployment_bill.ASSUMPTIONS))
    rates = "\n".join(f"- {name}: {value:,.2f}" for name, value in design_scale.ASSUMED_RATES.items())
    text = (
        f"{per_unit}\n\n{heartbeat}\n\n{cosmos}\n\n{cpu}\n\n{hosts}\n\nDesign scale ({design_scale.BOTTLES:,} bottles, "
        f"{design_scale.USERS:,} users), from the RU above:\n\n{TABLE_START}\n{bill}\n{TABLE_END}\n\n{alternatives}\n\n"
        f"{floor}\n\nRules (tools/costs/rules.py, benchmarks/deployment_bill.py):\n{rules}\n\nAssumptions:\n"
        f"{assumptions}\n\nRates the design does not give (benchmarks/design_scale.py):\n{rates}"
    )
    money = money_lines(lines[0].one_region, deployment_bill.total(lines, 1))
    return CostSection(text, f"{bill}\n\n{DEPLOYMENT_START}\n{deployment_file(parameters)}", money, pinned)


CPU_HEADER = ["request", "calibrated (priced)", "this run", "difference"]
HOST_HEADER = ["host CPU a request", "HTTP requests on", "instances", "Functions $/month", "whole deployment $/month"]
INGESTION_STEADY = "Ingestion, one event per request at steady state"


def measured_live_cpu(tables: list[Table]) -> LiveCpu | None:
    """The CPU a heartbeat and an opened/closed request took through the Functions runtime in this run
    (benchmarks/runtime_cost.py: provisioned bottles, the store in another process), or None if it did not run."""
    for table in tables:
        if table.title.startswith(runtime_cost.TITLE):
            found = {
                table.column(row, "requests"): _number(table.column(row, "CPU ms/request"))
                for row in table.rows
                if table.column(row, "invoked") == runtime_cost.RUNTIME
            }
            if runtime_cost.HEARTBEAT in found and runtime_cost.ACTION in found:
                return LiveCpu(found[runtime_cost.HEARTBEAT], found[runtime_cost.ACTION])
    return None


def deployment_file(parameters: dict[str, object]) -> str:
    """An ARM parameters file of `parameters` (infra/design-scale.parameters.json)."""
    document = {
        "$schema": "https://schema.management.azure.com/schemas/2019-04-01/deploymentParameters.json#",
        "contentVersion": "1.0.0.0",
        "parameters": {name: {"value": value} for name, value in parameters.items()},
    }
    return json.dumps(document, indent=2) + "\n"


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    return "\n".join(lines + ["| " + " | ".join(cell.strip() for cell in row) + " |" for row in rows])


@dataclass(frozen=True)
class Part:
    """One benchmark of the suite: `run` prints its tables as they are measured and returns them."""

    label: str  # what the progress lines and a failure call it
    title: str  # its section of the results document
    run: Callable[[], str]


def parts(quick: bool) -> list[Part]:
    """The suite's benchmarks, in the order they run."""
    fleets, steady = (QUICK_FLEETS, 300) if quick else (FLEETS, STEADY_EVENTS)
    swept = 2_000 if quick else 20_000
    return [
        Part("ingestion", "Ingestion", lambda: ingestion.run(1000 if quick else 4000, 50, fleets, steady)),
        Part("notification checks", "Notification checks", lambda: checks.run(checks.default_fleets(quick))),
        Part("report consumer", "Report consumer", lambda: reports.run(30 if quick else 100, quick=quick)),
        Part(
            "report workers side by side",
            "Report workers side by side",
            lambda: scaleout.run(30 if quick else 150, 2 if quick else 4),
        ),
        Part(
            "check partitions side by side",
            "Check partitions side by side",
            lambda: scaleout.sweep_table(swept, swept // 20),
        ),
        Part(
            "the Functions runtime",
            "Requests through the Functions runtime",
            lambda: runtime_cost.run(200 if quick else 600, 3 if quick else 5),
        ),
        Part("telemetry", "Telemetry per unit of work", telemetry.run),
        Part("request units", "Cost on Cosmos DB", lambda: _cost_part(quick)),
    ]


# Every cost section this process made, in order: run() takes its bill and money lines from the last of its own.
_COST_SECTIONS: list[CostSection] = []


def _cost_part(quick: bool) -> str:
    """The request units measured, priced as recorded (a quick run: benchmarks/cost_record.json; a full run: its
    own measurement, which it records) with the CPU a request takes as the calibration recorded it, and the
    telemetry each unit of work sends as tools/costs/telemetry.py records it (the telemetry part measured it again
    in this run, beside it); this run's figures printed beside them."""
    measured = costs.measure(quick)
    section = cost_section(measured, measured_live_cpu(list(PRINTED)), None if quick else measured)
    _COST_SECTIONS.append(section)
    return section.text


@dataclass(frozen=True)
class DocBlocks:
    """What a full run writes into the docs, each between its markers."""

    summary: str  # docs/benchmarks.md: SUMMARY_START to SUMMARY_END
    scaleout: str  # docs/benchmarks.md: SCALEOUT_START to SCALEOUT_END
    bill: str  # docs/costs.md: TABLE_START to TABLE_END
    deployment: str = ""  # infra/design-scale.parameters.json (empty: none measured)
    record: costs.Costs | None = None  # benchmarks/cost_record.json: the full run's measurement, priced


def run(quick: bool, ticker: Ticker | None = None, todo: list[Part] | None = None) -> tuple[str, DocBlocks]:
    """The results document, and the docs' blocks. Each part's tables are printed as it ends; if one fails (or
    Ctrl-C stops it), the summary of the parts that finished is printed before the failure is raised, naming the
    part (a CommandFailed when its cause is the user's to fix: run_command's one line)."""
    ticker = ticker or Ticker()
    todo = parts(quick) if todo is None else todo
    costs_before = len(_COST_SECTIONS)
    sections: list[tuple[str, str]] = []
    started, first = time.perf_counter(), len(PRINTED)  # the tables this run prints: PRINTED[first:]
    for number, part in enumerate(todo, 1):
        named = f"{part.label} ({number} of {len(todo)})"
        try:
            with ticker.running(f"bench: {named}"):
                sections.append((part.title, part.run()))
        except BaseException as error:  # Ctrl-C too: what finished is worth printing
            _print_finished(sections, named, PRINTED[first:])
            problem = user_problem(error)
            if problem is None:  # a bug, or Ctrl-C: as it was, the part named in its traceback's notes
                error.add_note(f"in ./dev bench: {named}")
                raise
            raise CommandFailed(f"{named} failed: {problem}") from None
    elapsed = time.perf_counter() - started
    headline = summary_rows(PRINTED[first:])
    summary = print_table(
        "Summary: the app against the seeds' approach, measured in the same run", headline, SUMMARY_HEADER
    )
    money = _COST_SECTIONS[-1].money if len(_COST_SECTIONS) > costs_before else []
    if money:
        print("\n" + "\n".join(money))
        summary += "\n\n" + "\n".join(money)
    header = (
        f"# Benchmark results\n\n{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, commit {_commit()}, "
        f"{'quick' if quick else 'full'} run in {elapsed:.0f} s on {platform.machine()} with {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}. SecantusDB in-process; figures are ratios against the baseline "
        "measured in the same run, since absolute speeds vary from machine to machine.\n"
    )
    cost_text = next(text for title, text in sections if title == "Cost on Cosmos DB")
    kept = _COST_SECTIONS[costs_before:]
    bill, _, deployment = kept[-1].bill.partition(f"\n\n{DEPLOYMENT_START}\n") if kept else ("", "", "")
    body = "\n".join(f"\n## {title}\n\n```\n{table}\n```" for title, table in [("Summary", summary), *sections]
                     if title != "Cost on Cosmos DB")  # fmt: skip
    stamp = f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {'quick' if quick else 'full'} run in {elapsed:.0f} s"
    blocks = DocBlocks(
        summary=f"{stamp}:\n\n{markdown_table(SUMMARY_HEADER, headline)}",
        scaleout=markdown_table(SCALEOUT_HEADER, scaleout_rows(PRINTED[first:])),
        bill=bill or _block(cost_text, TABLE_START, TABLE_END),
        deployment=deployment,
        record=kept[-1].priced if kept and not quick else None,
    )
    return header + body + f"\n\n## Cost on Cosmos DB\n\n{cost_text}\n", blocks


def _print_finished(sections: list[tuple[str, str]], failed: str, printed: list[Table]) -> None:
    """On stdout, after the finished parts' own tables (`printed`): which parts they were, and the summary of
    their figures."""
    if not sections:
        print(f"\nno part finished before {failed} stopped")
        return
    titles = ", ".join(title for title, _ in sections)
    print(f"\nfinished before {failed} stopped: {titles} (their tables above)\n")
    print_table("Summary of the parts that finished", summary_rows(printed), SUMMARY_HEADER)


def _block(text: str, start: str, end: str) -> str:
    """What `text` holds between the lines `start` and `end`."""
    return text[text.index(start) + len(start) : text.index(end)].strip()


def _between(text: str, start: str, end: str, block: str) -> str:
    first, last = text.index(start), text.index(end)
    return text[:first] + start + "\n" + block + "\n" + text[last:]


def update_docs(
    blocks: DocBlocks,
    summary_doc: Path = SUMMARY_DOC,
    table_doc: Path = TABLE_DOC,
    deployment: Path = DEPLOYMENT_FILE,
    record: Path = costs.RECORD,
) -> None:
    """Put the summary and the scale-out table into docs/benchmarks.md and the design-scale table into
    docs/costs.md, each between its markers, the deployment parameters (when measured) into
    infra/design-scale.parameters.json, and a full run's measurement, which its bill is priced from, into
    benchmarks/cost_record.json (the record every later run prices its headline from)."""
    text = _between(summary_doc.read_text(), SUMMARY_START, SUMMARY_END, blocks.summary)
    summary_doc.write_text(_between(text, SCALEOUT_START, SCALEOUT_END, blocks.scaleout))
    table_doc.write_text(_between(table_doc.read_text(), TABLE_START, TABLE_END, blocks.bill))
    if blocks.deployment:
        deployment.write_text(blocks.deployment)
    if blocks.record is not None:
        costs.write_record(blocks.record, record)
