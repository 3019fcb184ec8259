"""The simulation in process, in simulated time: a fleet provisioned and its planned days played through the
app's functions (device requests, the checks and the report dispatcher on their schedules, each firing followed
by its queue deliveries) on the local store, then what it found: the scores, the reports and the archive against
their source, a daily report."""

import contextlib
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from shared.archive.current import get_archive
from shared.instants import set_clock
from shared.reports.tally import counted_from
from shared.settings import get_settings
from shared.store import schema
from tools.archive_history import archive_setting, fresh_folder
from tools.archive_truth import ArchiveCheck, check_archive, swept_until, tallied_until
from tools.command_tally import CommandTally
from tools.cosmos_store.options import Options
from tools.fleet import Plan, Request, make_fleet, plan_fleet
from tools.progress import Progress
from tools.report_truth import complete_from, reported_totals, source_totals
from tools.simulate.devices import host_sender, post, provision
from tools.simulate.result import ReportCheck, SimulationResult, Tally
from tools.simulate.scoring import score

# A Saturday just before Europe's spring DST change (29 March 2026): schedules must survive it.
SIMULATION_START = datetime(2026, 3, 28, 5, 0, tzinfo=UTC)
SIMULATION_REPORTS_SCHEDULE = "0 */10 * * * *"
REPORTS_TIMER = "aggregate_reports"


def run_simulation(
    *,
    bottles: int,
    users: int,
    days: float,
    seed: int,
    mongodb_uri: str | None,
    progress: bool = True,
    workers: int = 2,
    cosmos: Options | None = None,
    archive_dir: Path | None = None,
    tamper: Callable[[Any], None] | None = None,
) -> SimulationResult:
    """Play the plan through the app's functions, loaded and invoked through the Functions runtime, with `workers` queue
    workers side by side for the queue-triggered functions. `cosmos`: on the Cosmos-faithful store
    (docs/cosmos-store.md) in front of the store, with these options. `archive_dir`: the archive's folder
    (docs/archive.md), emptied first (None: no archive). `tamper(db)` runs after the last step and before the
    checks (the tests plant faults with it)."""
    from tools.local_host import LocalHost

    rng = random.Random(seed)
    fleet = make_fleet(rng, bottles, users)
    plan = plan_fleet(rng, fleet, SIMULATION_START, days)
    commands = CommandTally()
    clock = [plan.start]
    set_clock(lambda: clock[0])
    try:
        with contextlib.ExitStack() as stack:
            db, proxy = _enter_store(stack, mongodb_uri, cosmos, archive_dir, commands)
            settings_used = describe_settings(embedded=mongodb_uri is None)
            if mongodb_uri:
                _clear(db)
            host = LocalHost.load()
            send = host_sender(host)
            keys = provision(fleet, send)
            played = play(
                timeline(plan, host.due_timers(plan.start, plan.end)),
                clock,
                host=host,
                post_request=lambda request, tally: post(request, keys, send, tally),
                commands=commands,
                progress=progress,
                workers=workers,
            )
            if tamper is not None:
                tamper(db)
            return _found(
                plan,
                played,
                db=db,
                host=host,
                proxy=proxy,
                settings_used=settings_used,
                archived=archive_dir is not None,
            )
    finally:
        set_clock(None)


def _enter_store(
    stack: contextlib.ExitStack[Any],
    mongodb_uri: str | None,
    cosmos: Options | None,
    archive_dir: Path | None,
    commands: CommandTally,
) -> tuple[Any, Any]:
    """The run's settings, archive folder and store, entered on `stack`: the database, and the Cosmos-faithful
    proxy (None without `cosmos`)."""
    from tools.cosmos_store.local import cosmos_local_store
    from tools.local_store import local_store, setting_defaults

    # The checks keep their default schedules; the report consumer runs every 10 simulated minutes (its cost is
    # per run, and nothing here reads reports sooner). The environment can override both. A paced late-dose sweep
    # waits in real time (CHECK_LATE_DOSES_SPREAD_MINUTES): in simulated time it would stall a large fleet's
    # morning peak for minutes, so it runs unpaced here.
    stack.enter_context(
        setting_defaults(REPORTS_SCHEDULE=SIMULATION_REPORTS_SCHEDULE, CHECK_LATE_DOSES_SPREAD_MINUTES="0")
    )
    if archive_dir is not None:
        stack.enter_context(archive_setting(str(fresh_folder(archive_dir)), None))
    # The simulated clock is months from the real one, which the embedded store's expiry runs on.
    if cosmos is None:
        return stack.enter_context(local_store(mongodb_uri, listeners=[commands], expire=False)), None
    db, proxy = stack.enter_context(cosmos_local_store(cosmos, mongodb_uri, listeners=[commands], expire=False))
    return db, proxy


def timeline(plan: Plan, firings: list[tuple[datetime, str]]) -> list[tuple[datetime, Any]]:
    """The plan's requests and the timer `firings` in time order (at the same instant the devices go first), then
    a last report run once the last hour has closed, so the reports include the events sent after its last
    scheduled run and the heartbeat tally has counted every hour (a very short run may have nothing else)."""
    items = [(r.at, 0, i, r) for i, r in enumerate(plan.requests)] + [(t, 1, i, n) for i, (t, n) in enumerate(firings)]
    ordered: list[tuple[datetime, Any]] = [(at, item) for at, _, _, item in sorted(items, key=lambda x: x[:3])]
    last = max(ordered[-1][0] if ordered else plan.end, plan.end)
    return [*ordered, (counted_from(last), REPORTS_TIMER)]


def _found(
    plan: Plan, played: "Playback", *, db: Any, host: Any, proxy: Any, settings_used: str, archived: bool
) -> SimulationResult:
    """What the played run found: the notifications scored, the reports (and the archive, if `archived`) against
    their source, the first user's daily report of the second day, the store's lines."""
    from tools.cosmos_store.local import describe_store

    notifications = list(db[schema.NOTIFICATIONS].find())
    scores, misses, extras = score(plan.expected, notifications)
    queued = len(host.queues.get(get_settings().notifications_queue, []))
    report = _daily_report(db, plan.bottles[0].user_id, plan.start + timedelta(days=1))
    report_check = check_reports(db)
    archive_check = check_simulated_archive(db) if archived else None
    store_lines = describe_store(proxy) if proxy is not None else []  # last: the checks' reads are metered too
    return SimulationResult(
        plan=plan,
        tally=played.tally,
        scores=scores,
        misses=misses,
        extras=extras,
        queue_messages=queued,
        notifications=notifications,
        device_seconds=played.device_seconds,
        timer_seconds=played.timer_seconds,
        timer_runs=played.timer_runs,
        commands_per_event=played.device_commands / max(played.tally.sent, 1),
        daily_report=report,
        report_check=report_check,
        settings_used=settings_used,
        store_lines=store_lines,
        archive_check=archive_check,
    )


@dataclass
class Playback:
    """What playing a timeline counted: the device traffic's tally and time, and each timer's runs and time."""

    tally: Tally = field(default_factory=Tally)
    device_seconds: float = 0.0
    device_commands: int = 0
    timer_runs: Counter[str] = field(default_factory=Counter)
    timer_seconds: dict[str, float] = field(default_factory=dict)


def play(
    timeline: list[tuple[datetime, Any]],
    clock: list[datetime],
    *,
    host: Any,
    post_request: Callable[[Request, Tally], None],
    commands: CommandTally,
    progress: bool,
    workers: int = 1,
) -> Playback:
    """Each request and timer firing at its simulated instant, timed and counted; after each firing, the queue
    messages it sent are delivered to their queue-triggered functions by `workers` threads side by side."""
    played = Playback()
    bar = Progress(len(timeline), "simulating", what="requests and timer runs") if progress else None
    for done, (at, item) in enumerate(timeline, 1):
        clock[0] = at
        started, before = time.perf_counter(), commands.count
        if isinstance(item, Request):
            post_request(item, played.tally)
            played.device_seconds += time.perf_counter() - started
            played.device_commands += commands.count - before
        else:
            host.run_timer(item)
            host.deliver(now=at, workers=workers)  # the work messages a dispatcher sent, to its queue workers
            played.timer_runs[item] += 1
            played.timer_seconds[item] = played.timer_seconds.get(item, 0.0) + time.perf_counter() - started
        if bar is not None and done % 200 == 0:
            bar.update(done, f"simulated {at:%Y-%m-%d %H:%M} UTC")
    if bar is not None:
        bar.finish(f"simulated {clock[0]:%Y-%m-%d %H:%M} UTC")
    return played


def describe_settings(*, embedded: bool) -> str:
    """One line of the store and the settings the run used (its reports' source and schedules, the checks')."""
    settings = get_settings()
    source = f"{settings.change_source} source"
    if settings.change_source == "polling":
        source += f" (overlap {settings.reports_poll_overlap_seconds} s)"
    return (
        f"store: {'SecantusDB (embedded)' if embedded else 'MongoDB by URI'}; reports: {source}, "
        f"schedule '{settings.reports_schedule}'; checks: open '{settings.check_open_bottles_schedule}', "
        f"silent '{settings.check_silent_bottles_schedule}', late '{settings.check_late_doses_schedule}', "
        f"{settings.check_partitions} partitions each"
    )


def _clear(db: Any) -> None:
    """A simulation on a shared MongoDB starts from empty collections (it owns the database it is given)."""
    for name in db.list_collection_names():
        db[name].delete_many({})


def _daily_report(db: Any, user_id: str, day: datetime) -> dict[str, Any] | None:
    """The user's daily report of `day` as stored, or None."""
    found = db[schema.USER_DAILY_REPORTS].find_one({"_id": f"{user_id}|{day:%Y-%m-%d}", "user_id": user_id})
    return dict(found) if found else None


def check_reports(db: Any) -> ReportCheck:
    """Every user-hour the heartbeat rings still hold, its hourly report against its source (tools/report_truth)."""
    since = complete_from(db, get_settings().heartbeat_window_hours)
    expected, reported = source_totals(db), reported_totals(db)
    keys = sorted(k for k in expected.keys() | reported.keys() if since is not None and k[1] >= since)
    mismatches = [
        f"{user} {hour:%Y-%m-%d %H}:00: reported {reported.get((user, hour))}, source {expected.get((user, hour))}"
        for user, hour in keys
        if expected.get((user, hour)) != reported.get((user, hour))
    ]
    return ReportCheck(len(keys), since, mismatches)


def check_simulated_archive(db: Any) -> ArchiveCheck:
    """The archive against the source after the run's last report run: every event stored, once; every bottle-hour
    the rings still hold and the tally counted, with the ring's slots (tools/archive_truth.py)."""
    archive = get_archive(get_settings())
    assert archive is not None, "the simulation runs with an archive folder"
    since, tallied = complete_from(db, get_settings().heartbeat_window_hours), tallied_until(db)
    hours = (since, tallied) if since is not None and tallied is not None and since < tallied else None
    return check_archive(db, archive, until=swept_until(db), heartbeats=hours, every_event=True)
