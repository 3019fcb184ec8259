"""What the app's work costs on Cosmos DB, measured on SecantusDB and priced by tools/costs/request_units.py, beside
the seeds' approach measured in the same run:

- per heartbeat, per opened and per closed event (one event per request, the bottle's heartbeat document at
  steady state): the app's commands, beside one insert per event. A heartbeat is one update of
  its heartbeat document (a findAndModify, whose reply tells repeats, only when not every heartbeat is new); an
  opened or closed event is one read of its bottle (its key is checked against it, and a closed event with a
  dose has its status write computed from it), one insert of the action and one status
  update of the bottle, a single statement (Cosmos DB charges every statement that changes a document as a
  replace of it: the five statements a closed event used to send came to ~22 RU);
- per report consumer change, at the design's density (each bottle heard from every 30 minutes, the consumer
  every minute), over whole blocks of daily roll-ups: the app's actions feed, hourly heartbeat tally and
  daily roll-ups, beside the naive `$inc` per event; the leases and empty polls of a run, apart, per
  partition run;
- per bottle in trouble a check's sweep finds (and per run that finds none), beside one query per bottle.

    python -m benchmarks.costs [--quick]
    python -m benchmarks.costs --record     measure at full size, and rewrite benchmarks/cost_record.json

The bill's headline is priced from a recorded measurement at full size (RECORD, written by `--record` and by every
full `./dev bench`), never from a quick run's smaller passes, whose per-unit costs differ a little (fuller pages, other
id lengths): so `./dev bench --quick`, a full run, README.md and docs/costs.md give the same dollars for the same
code. Every run prints its own measurement's Cosmos DB bill beside the record's, with the difference
(benchmarks/suite.py); a large one says the record is stale: re-record it.

Costs are measured in their own passes: the meter reads every written document aside (before and after), which
slows a run down. Nothing here is timed.
"""

import argparse
import contextlib
import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import azure.functions as func
import bson
from pymongo.database import Database

from benchmarks import design_scale
from benchmarks.checks import runs as check_bench
from benchmarks.design_scale import Measured
from benchmarks.harness import installed_store, print_table
from benchmarks.ingestion import runs as ingestion
from benchmarks.reports.runs import NaiveConsumer, provision_fleet
from shared.consumers.plugged import dispatch, partition_of, process_partition
from shared.ingestion.receive import receive
from shared.instants import clock_restored, set_clock
from shared.notifications.documents import KINDS
from shared.reports.feeds import HEARTBEAT_TALLY
from shared.settings import Settings, get_settings
from shared.store import schema
from shared.store.schema import collection_specs
from tools.costs.meter import CostMeter, IndexedPaths, bson_size
from tools.costs.request_units import Operation, UnitCost, combine

T0 = datetime(2026, 11, 2, 0, 0, 7, tzinfo=UTC)  # the server clock when a pass begins
SEEDS_EVENTS = ingestion.SEEDS_EVENTS  # the seeds' one document per event


@contextlib.contextmanager
def metered_store(settings: Settings | None = None) -> Iterator[tuple[Database[Any], CostMeter]]:
    """A fresh, set-up database on an in-process SecantusDB, installed as the app's store, its commands metered."""
    from secantus import SecantusDBServer

    settings = settings or get_settings()
    with SecantusDBServer(storage_path=":memory:", ttl_sweep_seconds=0) as server:
        meter = CostMeter(settings, observe=server.uri, extra=[SEEDS_EVENTS])
        meter.recording = False  # the set-up is not measured
        try:
            database = get_settings().mongodb_database
            with clock_restored(), installed_store(server.uri, database, settings, [meter]) as db:
                yield db, meter
        finally:
            meter.close()


@contextlib.contextmanager
def clock_at(moment: datetime) -> Iterator[None]:
    with clock_restored():
        set_clock(lambda: moment)
        yield


@dataclass
class PerUnit:
    """RU per unit of work (a heartbeat, a change, ...) by collection, its fan-out queries priced by the
    partitions each collection has (tools.costs.request_units.UnitCost)."""

    units: int
    cost: UnitCost = field(default_factory=UnitCost)
    commands: int = 0

    @classmethod
    def of(cls, operations: list[Operation], units: int) -> "PerUnit":
        return cls(units, UnitCost.of(operations, max(units, 1)), len(operations))

    def total(self, partitions: dict[str, int] | None = None) -> float:
        return self.cost.total(partitions)


# --- ingestion -------------------------------------------------------------------------------------------


def _request(bottle_id: str, key: str, event: dict[str, Any]) -> func.HttpRequest:
    return ingestion.bottle_request("POST", bottle_id, json.dumps(event).encode(), key)


NOTES: dict[str, str] = {}  # what the last passes found that is not a number


def ingestion_costs(bottles: int, rounds: int) -> tuple[dict[str, PerUnit], dict[str, float]]:
    """RU per heartbeat, opened and closed event (the app, and the seeds' one insert per event), and the
    average document sizes the app leaves. Each closed event is a dose (one pill), on an `every_hours` schedule:
    the bottle's read, the action's insert and one status statement (status, last dose, dose history, next dose
    due)."""
    results: dict[str, PerUnit] = {}
    with metered_store() as (db, meter):
        with clock_at(T0):
            keys = ingestion.provision(bottles)
        # A day of heartbeats first, uploaded at once, so that every heartbeat document is at steady state.
        day = T0 + timedelta(hours=24)
        with clock_at(day):
            for bottle_id, key in keys.items():
                day_of_beats = [{"type": "heartbeat", "time": (T0 + timedelta(minutes=30 * i, seconds=9)).isoformat()}
                                for i in range(48)]  # fmt: skip
                response = ingestion.post_device_events(_request(bottle_id, key, {"events": day_of_beats}))
                assert response.status_code == 202, response.get_body()
        meter.recording = True
        counts: Counter[str] = Counter()
        for r in range(rounds):
            for n, (bottle_id, key) in enumerate(keys.items()):
                at = day + timedelta(minutes=30 * r + 1, seconds=n)
                events: dict[str, dict[str, Any]] = {
                    "heartbeat": {"type": "heartbeat", "time": at.isoformat()},
                    "opened": {"type": "opened", "time": (at + timedelta(seconds=1)).isoformat(),
                               "mass_of_contents": 15.0, "number_of_pills": 30},
                    "closed": {"type": "closed", "time": (at + timedelta(seconds=2)).isoformat(),
                               "mass_of_contents": 14.5, "number_of_pills": 29, "pills_taken": 1},
                }  # fmt: skip
                for kind, event in events.items():
                    with clock_at(at + timedelta(seconds=3)), meter.labelled(kind):
                        response = ingestion.post_device_events(_request(bottle_id, key, event))
                    assert response.status_code == 202, response.get_body()
                    with meter.labelled(f"seeds {kind}"):
                        ingestion.naive_post(db, _request(bottle_id, key, event))
                    counts[kind] += 1
        meter.recording = False
        for kind, count in counts.items():
            results[kind] = PerUnit.of(meter.operations(kind), count)
            results[f"seeds {kind}"] = PerUnit.of(meter.operations(f"seeds {kind}"), count)
        sizes = average_sizes(db, [schema.BOTTLES, schema.BOTTLE_HEARTBEATS, schema.BOTTLE_ACTIONS])
        sizes["heartbeat max"] = max(bson_size(d) for d in db[schema.BOTTLE_HEARTBEATS].find())
        beats = [
            w for op in meter.operations("heartbeat") for w in op.writes if op.collection == schema.BOTTLE_HEARTBEATS
        ]
        sizes["heartbeat index terms"] = sum(w.terms_deleted + w.terms_inserted for w in beats) / len(beats)
        changed_by = Counter(name for w in beats for name in w.indexes)
        NOTES["heartbeat indexes"] = ", ".join(
            f"{name} ({n / len(beats):.0%} of them)" for name, n in changed_by.items()
        )
    return results, sizes


INDEX_TERM_OVERHEAD = 16  # bytes an index term stores beside its values (a reference to its document): assumed


def average_sizes(db: Database[Any], collections: list[str]) -> dict[str, float]:
    """Average BSON bytes of each collection's documents, and of their index terms on Cosmos DB as
    "<collection> index" (each term's values plus INDEX_TERM_OVERHEAD)."""
    paths = {spec.name: IndexedPaths.of(spec) for spec in collection_specs(get_settings())}
    found = {}
    for name in collections:
        docs = list(db[name].find())
        if docs:
            found[name] = sum(bson_size(d) for d in docs) / len(docs)
            terms = [term for d in docs for term in paths[name].terms(d)]
            found[f"{name} index"] = sum(len(bson.encode({"v": list(t[1:])})) + INDEX_TERM_OVERHEAD for t in terms)
            found[f"{name} index"] /= len(docs)
    return found


# --- the report consumer ------------------------------------------------------------------------------------


def consumer_costs(users: int, hours: int) -> tuple[dict[str, PerUnit], dict[str, float]]:
    """RU per source change of the report consumer at the design's density, the app beside the naive `$inc`
    consumer fed by the same change streams: the actions feed's ("actions feed"), the tally's hour by hour of the
    roll-up block ("tally 0" ... : autoscale bills each hour's peak, and the roll-up hour costs more), and both
    ("consumer change"); the app's per-run overhead (leases, empty polls) per partition run; and the report
    documents' average sizes.

    The design's density: every bottle heard from every 30 minutes (each at its own minute) and an opened/closed
    pair per 24 heartbeats, the consumer every minute, with pages as full as a partition's (one partition here,
    so a minute's actions fill its pages as a physical partition's do at 30 M bottles). The app's actions feed
    runs every minute, its heartbeat tally once an hour, and the days roll up at the end of each block of
    DAILY_ROLLUP_HOURS: `hours` (a multiple of it) after a setup that left every report current, so every
    cost comes in its steady-state proportion. Measured from 12:10 (the tally has counted up to noon), after a
    day and a half of heartbeats."""
    # Every user's roll-up at the block's end: the roll-up hour measured whole, the staggered app's hours derived
    # from it (design_scale.tally_of_hour).
    settings = Settings(
        change_source="change_stream", reports_page_size=500, reports_partitions=1, daily_rollup_staggered=False
    )
    assert hours % settings.daily_rollup_hours == 0, "whole blocks of daily roll-ups"
    noon = T0 + timedelta(hours=36, minutes=10)
    with metered_store(settings) as (db, meter):
        with clock_at(T0):
            keys = provision_fleet(db, users, T0)
        bottles = list(keys.items())
        with clock_at(noon):  # heartbeats up to noon, aggregated: steady-state documents and reports
            for bottle_id, key in bottles:
                for back in (24, 0):
                    first = noon - timedelta(hours=back + 12)
                    beats = [{"type": "heartbeat", "time": (first + timedelta(minutes=30 * i, seconds=9)).isoformat()}
                             for i in range(24)]  # fmt: skip
                    # Received in one batch, so late: before the overlap the next pass looks back over for late
                    # heartbeats (REPORTS_POLL_OVERLAP_SECONDS), which would otherwise recount the setup's hours
                    # and bill the first measured hour for a backlog the steady state does not have.
                    received = noon - timedelta(hours=back, seconds=settings.reports_poll_overlap_seconds + 60)
                    receive_events(db, bottle_id, key, beats, settings, now=received)
            while not consume(db, settings, now=noon)[1]:
                pass
            naive = NaiveConsumer(db)
        changes = sent = 0
        partition_runs = 0
        changes_in_hour = [0] * hours
        for minute in range(1, 60 * hours + 1):
            now = noon + timedelta(minutes=minute)
            hour = (minute - 1) // 60
            with clock_at(now):
                meter.recording = False  # ingestion is measured apart
                for n, (bottle_id, key) in enumerate(bottles):
                    if n % 30 != minute % 30:
                        continue  # each bottle's heartbeat comes every 30 minutes, at its own minute
                    sending: list[dict[str, Any]] = [{"type": "heartbeat", "time": now.isoformat()}]
                    sent += 1
                    if sent % 24 == 0:  # an opened/closed pair per 24 heartbeats: the design's 1.4 K to 17 K a second
                        reading: dict[str, Any] = {"number_of_pills": 30, "mass_of_contents": 15.0}
                        sending.append({"type": "opened", "time": (now - timedelta(seconds=20)).isoformat(), **reading})
                        sending.append({"type": "closed", "time": (now - timedelta(seconds=10)).isoformat(), **reading,
                                        "pills_taken": 1})  # fmt: skip
                    stored = receive_events(db, bottle_id, key, sending, settings, now=now)
                    changes += stored
                    changes_in_hour[hour] += stored
                meter.recording = True
                partition_runs += consume(db, settings, now=now + timedelta(seconds=30), meter=meter, hour=hour)[0]
                with meter.labelled("naive"):
                    naive.run()
        meter.recording = False

        def overhead(op: Operation) -> bool:
            return op.collection == schema.LEASES or (op.is_read and not op.returned)

        labels = [f"actions {h}" for h in range(hours)] + [f"tally {h}" for h in range(hours)]
        app = [op for label in labels for op in meter.operations(label)]
        results = {
            "consumer change": PerUnit.of([op for op in app if not overhead(op)], changes),
            "actions feed": PerUnit.of(
                [op for h in range(hours) for op in meter.operations(f"actions {h}") if not overhead(op)], changes
            ),
            "consumer run": PerUnit.of([op for op in app if overhead(op)], partition_runs),
            "seeds consumer change": PerUnit.of(meter.operations("naive"), changes),
        }
        for h in range(hours):  # the tally, hour by hour of the roll-up block: its roll-up hour costs more
            work = [op for op in meter.operations(f"tally {h}") if not overhead(op)]
            results[f"tally {h}"] = PerUnit.of(work, changes_in_hour[h])
        sizes = average_sizes(
            db, [schema.USER_HOURLY_REPORTS, schema.USER_DAILY_REPORTS, schema.BOTTLES, schema.BOTTLE_HEARTBEATS]
        )
        hours_seen = {doc["hour"] for doc in db[schema.USER_HOURLY_REPORTS].find({}, {"hour": 1})}
        sizes["user-hours per user-hour"] = db[schema.USER_HOURLY_REPORTS].count_documents({}) / (
            users * len(hours_seen)
        )
    return results, sizes


def receive_events(
    db: Database[Any], bottle_id: str, key: str, events: list[dict[str, Any]], settings: Settings, *, now: datetime
) -> int:
    body = json.dumps({"events": events}).encode()
    return receive(db, bottle_id, key, body, now=now, settings=settings).stored


def consume(
    db: Database[Any], settings: Settings, *, now: datetime, meter: CostMeter | None = None, hour: int = 0
) -> tuple[int, bool]:
    """One dispatch of the report feeds and a worker run per partition: (partitions run, all caught up). With a
    meter, each run's commands are labelled by its feed and `hour` ("actions 0", "tally 0", ...)."""
    messages: list[str] = []
    with meter.labelled(f"actions {hour}") if meter else contextlib.nullcontext():
        dispatch(db, now=now, settings=settings, send=messages.extend)
    runs = []
    for message in messages:
        partition = partition_of(json.loads(message))
        label = f"{'tally' if partition.feed == HEARTBEAT_TALLY else 'actions'} {hour}"
        with meter.labelled(label) if meter else contextlib.nullcontext():
            runs.append(process_partition(db, partition, now=now, settings=settings))
    return len(runs), all(run.caught_up for run in runs)


# --- the checks ---------------------------------------------------------------------------------------------


def sweep_costs(bottles: int, in_trouble: int) -> tuple[dict[str, PerUnit], dict[str, float]]:
    """RU per bottle in trouble a check's run finds (the app's sweep, and the seeds' query per bottle), and per
    run that finds none; the notification's size."""
    results: dict[str, PerUnit] = {}
    with metered_store(check_bench.SETTINGS) as (db, meter):
        check_bench.seed(db, bottles, in_trouble)
        meter.recording = True
        for kind in KINDS:
            with meter.labelled(f"seeds {kind}"):
                seeds = check_bench.per_bottle(db, kind)
            with meter.labelled(kind):
                ours = check_bench.sweep(db, kind)
            with meter.labelled(f"{kind} empty"):
                check_bench.sweep(db, kind)
            results[kind] = PerUnit.of(meter.operations(kind), ours)
            results[f"seeds {kind}"] = PerUnit.of(meter.operations(f"seeds {kind}"), seeds)
            results[f"{kind} empty"] = PerUnit.of(meter.operations(f"{kind} empty"), 1)
        meter.recording = False
        sizes = average_sizes(db, [schema.NOTIFICATIONS])
    return results, sizes


# --- everything, as the suite prints it ---------------------------------------------------------------------


@dataclass
class Costs:
    units: dict[str, PerUnit]
    sizes: dict[str, float]
    notes: dict[str, str] = field(default_factory=dict)

    @property
    def terms_per_heartbeat(self) -> str:
        found = self.sizes.get("heartbeat index terms", 0.0)
        return f"{found:.1f}: {self.notes.get('heartbeat indexes', '')}"

    def measured(self) -> Measured:
        u = self.units
        hours = sorted(int(k.split()[1]) for k in u if k.startswith("tally "))
        return Measured(
            heartbeat=u["heartbeat"].cost,
            opened=u["opened"].cost,
            closed=u["closed"].cost,
            actions_feed=u["actions feed"].cost,
            tally=[u[f"tally {h}"].cost for h in hours],
            consumer_run=u["consumer run"].cost,
            swept={kind: marginal(u[kind], u[f"{kind} empty"]) for kind in KINDS},
            sweep_run={kind: u[f"{kind} empty"].cost for kind in KINDS},
            sizes=self.sizes,
            hourly_reports_per_user_hour=self.sizes.get("user-hours per user-hour", 1.0),
            calls={kind: u[kind].commands / max(u[kind].units, 1) for kind in CALLS if kind in u},
        )

    def to_json(self) -> dict[str, Any]:
        """The measurement as plain JSON (RECORD)."""
        units = {
            name: {"units": unit.units, "commands": unit.commands, "base": unit.cost.base,
                   "queries": {c: {str(reach): n for reach, n in by.items()} for c, by in unit.cost.queries.items()}}
            for name, unit in sorted(self.units.items())
        }  # fmt: skip
        return {"units": units, "sizes": dict(sorted(self.sizes.items())), "notes": dict(sorted(self.notes.items()))}

    @classmethod
    def from_json(cls, found: dict[str, Any]) -> "Costs":
        units = {
            name: PerUnit(
                int(unit["units"]),
                UnitCost(
                    {c: float(ru) for c, ru in unit["base"].items()},
                    {c: {int(reach): float(n) for reach, n in by.items()} for c, by in unit["queries"].items()},
                ),
                int(unit["commands"]),
            )
            for name, unit in found["units"].items()
        }
        return cls(units, {k: float(v) for k, v in found["sizes"].items()}, dict(found.get("notes", {})))


RECORD = Path(__file__).with_name("cost_record.json")


def write_record(costs: "Costs", path: Path = RECORD) -> None:
    path.write_text(json.dumps(costs.to_json(), indent=1) + "\n")


def load_record(path: Path = RECORD) -> "Costs":
    """The recorded full-size measurement the bill is priced from; a broken record fails here, naming the file."""
    try:
        return Costs.from_json(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError) as error:
        problem = f"{path}: not a cost record ({error}); python -m benchmarks.costs --record makes one"
        raise ValueError(problem) from error


CALLS = ("heartbeat", "opened", "closed", "actions feed")  # the commands a unit takes, for the Functions bill


def marginal(run: PerUnit, empty: PerUnit) -> UnitCost:
    """RU per bottle found beyond the run's fixed cost: the run's RU less an empty run's, over the bottles found
    (the fixed cost is priced per run: design_scale.Measured.sweep_run)."""
    return combine([(run.cost, 1.0), (empty.cost, -1.0 / max(run.units, 1))], floor_at_zero=True)


def measure(quick: bool) -> Costs:
    units: dict[str, PerUnit] = {}
    sizes: dict[str, float] = {}
    for found, more in (
        ingestion_costs(bottles=10 if quick else 30, rounds=2 if quick else 4),
        consumer_costs(users=60 if quick else 200, hours=6),
        sweep_costs(bottles=1000 if quick else 2000, in_trouble=10 if quick else 20),
    ):
        units |= found
        sizes |= more
    return Costs(units, sizes, dict(NOTES))


UNITS = [
    ("heartbeat", "heartbeat", "seeds heartbeat", "one insert per heartbeat"),
    ("opened event", "opened", "seeds opened", "one insert per event"),
    ("closed event", "closed", "seeds closed", "one insert per event"),
    ("report change", "consumer change", "seeds consumer change", "$inc per event"),
    *[(f"swept bottle in trouble, {kind}", kind, f"seeds {kind}", "one query per bottle") for kind in KINDS],
]


def table(costs: Costs, partitions: dict[str, int] | None = None) -> str:
    """RU per unit of work as the design scale pages it (design_scale.unit_costs), the app beside the seeds'
    approach measured in the same run, each query that fans out priced by `partitions` (by collection: the
    design scale's physical partitions)."""
    rows = []
    app_units = design_scale.unit_costs(costs.measured(), get_settings())
    for name, app, seeds, how in UNITS:
        ours, theirs = app_units[app], costs.units[seeds]
        mine, their = ours.total(partitions), theirs.total(partitions)
        fanout = mine - sum(ours.base.values())
        rows.append(
            [
                name,
                f"{mine:.2f}",
                f"{fanout:.2f}",
                f"{their:.2f} ({how})",
                f"{their / mine:.2f}x" if mine else "-",
            ]
        )
    header = ["RU per", "app", "of which fan-out", "seeds", "seeds / app"]
    title = "Request units on Cosmos DB (tools/costs/request_units.py), measured in the same run"
    if partitions:
        title += ", queries priced at the design scale's physical partitions"
    return print_table(title, rows, header)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.costs", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="smaller passes")
    parser.add_argument("--record", action="store_true", help=f"measure at full size and write {RECORD.name}")
    args = parser.parse_args(argv)
    if args.quick and args.record:
        parser.error("--record measures at full size: not with --quick")
    costs = measure(args.quick)
    table(costs)
    if args.record:
        write_record(costs)
        print(f"written to {RECORD}")


if __name__ == "__main__":
    main()
