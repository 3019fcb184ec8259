"""Fleet simulation: provision a fleet, play simulated days through the app's real function entry points
(device requests, the three checks and the report consumer on their schedules, in simulated time), then
score the notifications against the trouble that was injected.

    ./dev simulate [--bottles 200] [--users 30] [--days 2] [--seed 7] [--mongodb-uri URI] [--chart PATH]
                   [--cosmos-store [--partition-kb 64]]
    ./dev simulate --http http://127.0.0.1:7071 [--function-key KEY] [--minutes 2] [--heartbeat-seconds 10]

The first form runs on the default store (SecantusDB in-process) or any MongoDB, with `--cosmos-store` behind the
Cosmos-faithful store (docs/cosmos-store.md: partitions that split, throttling, Cosmos DB's change-stream tokens).
The second sends the same kind of device traffic over real HTTP, in real time, to a local server, `func start`
or a deployed app: a smoke and load test for operations.
"""

import argparse
import contextlib
import http.client
import json
import os
import random
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from shared.archive.current import get_archive
from shared.instants import set_clock, utc_now
from shared.reports.tally import counted_from
from shared.settings import get_settings
from shared.store import schema
from shared.store.command_line import CommandFailed, run_command
from tools.archive_history import DEFAULT_DIR as DEFAULT_ARCHIVE_DIR
from tools.archive_history import archive_setting, fresh_folder
from tools.archive_truth import ArchiveCheck, check_archive, swept_until, tallied_until
from tools.arguments import float_above, http_url, int_between, positive_float, positive_int, writable_file
from tools.command_tally import CommandTally
from tools.cosmos_store.options import Options
from tools.fleet import Bottle, Expected, Request, make_fleet, plan_fleet
from tools.progress import Progress
from tools.report_truth import complete_from, reported_totals, source_totals
from tools.simulation_result import ReportCheck, Score, SimulationResult, Tally

Send = Callable[[str, str, dict[str, str], bytes], tuple[int, Any]]

# A Saturday just before Europe's spring DST change (29 March 2026): schedules must survive it.
SIMULATION_START = datetime(2026, 3, 28, 5, 0, tzinfo=UTC)
KINDS = ("late_dose", "left_open", "silent")
SIMULATION_REPORTS_SCHEDULE = "0 */10 * * * *"
REPORTS_TIMER = "aggregate_reports"
MAX_DAYS = 366


def provision(fleet: list[Bottle], send: Send, function_key: str | None = None) -> dict[str, str]:
    headers = {"x-functions-key": function_key} if function_key else {}
    keys = {}
    for bottle in fleet:
        status, body = send("PUT", f"/api/bottles/{bottle.bottle_id}", headers, json.dumps(bottle.spec()).encode())
        if status == 200:  # the bottle exists from an earlier run: a new key makes it ours again
            status, body = send(
                "PUT", f"/api/bottles/{bottle.bottle_id}?rotate_key=true", headers, json.dumps(bottle.spec()).encode()
            )
        if status not in (200, 201):
            raise CommandFailed(f"provisioning {bottle.bottle_id} failed: {status} {body}")
        keys[bottle.bottle_id] = body["device_key"]
    return keys


def post(request: Request, keys: dict[str, str], send: Send, tally: Tally) -> None:
    started = time.perf_counter()
    status, body = send(
        "POST",
        f"/api/bottles/{request.bottle_id}/events",
        {"X-Device-Key": keys[request.bottle_id]},
        json.dumps(request.payload).encode(),
    )
    tally.record(request, status, body, time.perf_counter() - started)


# --- in-process simulation, simulated time ------------------------------------------------------


def check_reports(db: Any) -> ReportCheck:
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
    from tools.cosmos_store.local import cosmos_local_store, describe_store
    from tools.local_host import LocalHost
    from tools.local_store import local_store, setting_defaults

    rng = random.Random(seed)
    fleet = make_fleet(rng, bottles, users)
    plan = plan_fleet(rng, fleet, SIMULATION_START, days)
    commands = CommandTally()
    clock = [plan.start]
    set_clock(lambda: clock[0])
    proxy = None
    try:
        # The checks keep their default schedules; the report consumer runs every 10 simulated minutes (its
        # cost is per run, and nothing here reads reports sooner). The environment can override both.
        with contextlib.ExitStack() as stack:
            # A paced late-dose sweep waits in real time (CHECK_LATE_DOSES_SPREAD_MINUTES): in simulated time it
            # would stall a large fleet's morning peak for minutes, so it runs unpaced here.
            stack.enter_context(
                setting_defaults(REPORTS_SCHEDULE=SIMULATION_REPORTS_SCHEDULE, CHECK_LATE_DOSES_SPREAD_MINUTES="0")
            )
            if archive_dir is not None:
                stack.enter_context(archive_setting(str(fresh_folder(archive_dir)), None))
            # The simulated clock is months from the real one, which the embedded store's expiry runs on.
            if cosmos is None:
                db = stack.enter_context(local_store(mongodb_uri, listeners=[commands], expire=False))
            else:
                db, proxy = stack.enter_context(
                    cosmos_local_store(cosmos, mongodb_uri, listeners=[commands], expire=False)
                )
            settings_used = describe_settings(embedded=mongodb_uri is None)
            if mongodb_uri:
                _clear(db)
            host = LocalHost.load()

            def send(method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, Any]:
                route, _, query = path.partition("?")
                params = dict(p.split("=", 1) for p in query.split("&") if p)
                response = host.handle(method, route, headers=headers, params=params, body=body)
                raw = response.get_body()
                return response.status_code, json.loads(raw) if raw else None

            keys = provision(fleet, send)
            timeline = list(_merge(plan.requests, host.due_timers(plan.start, plan.end)))
            # A last consumer run once the last hour has closed, so the reports include the events sent after
            # its last scheduled run and the heartbeat tally has counted every hour (a very short run may have
            # nothing else).
            last = max(timeline[-1][0] if timeline else plan.end, plan.end)
            timeline.append((counted_from(last), REPORTS_TIMER))
            played = play(
                timeline,
                clock,
                host=host,
                post_request=lambda request, tally: post(request, keys, send, tally),
                commands=commands,
                progress=progress,
                workers=workers,
            )
            if tamper is not None:
                tamper(db)
            notifications = list(db[schema.NOTIFICATIONS].find())
            scores, misses, extras = score(plan.expected, notifications)
            queued = len(host.queues.get(get_settings().notifications_queue, []))
            report = _daily_report(db, fleet[0].user_id, plan.start + timedelta(days=1))
            report_check = check_reports(db)
            archive_check = check_simulated_archive(db) if archive_dir is not None else None
            store_lines = describe_store(proxy) if proxy is not None else []
    finally:
        set_clock(None)
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


def _merge(requests: list[Request], firings: list[tuple[datetime, str]]) -> Iterator[tuple[datetime, Any]]:
    """Requests and timer firings in time order; at the same instant the devices go first."""
    items = [(r.at, 0, i, r) for i, r in enumerate(requests)] + [(t, 1, i, n) for i, (t, n) in enumerate(firings)]
    for at, _, _, item in sorted(items, key=lambda x: (x[0], x[1], x[2])):
        yield at, item


def score(
    expected: set[Expected], notifications: list[dict[str, Any]]
) -> tuple[dict[str, Score], list[Expected], list[Expected]]:
    actual = {
        Expected(n["bottle_id"], n["kind"], _utc(n["episode_start"])) for n in notifications if n.get("kind") in KINDS
    }
    scores = {}
    for kind in KINDS:
        want = {e for e in expected if e.kind == kind}
        got = {a for a in actual if a.kind == kind}
        scores[kind] = Score(expected=len(want), notified=len(got), matched=len(want & got))
    return scores, sorted(expected - actual, key=str), sorted(actual - expected, key=str)


def _utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _daily_report(db: Any, user_id: str, day: datetime) -> dict[str, Any] | None:
    found = db[schema.USER_DAILY_REPORTS].find_one({"_id": f"{user_id}|{day:%Y-%m-%d}", "user_id": user_id})
    return dict(found) if found else None


# --- over HTTP, in real time --------------------------------------------------------------------


def http_sender(base_url: str) -> Send:
    """Requests to `base_url`; a server that cannot be reached, or that drops a request, ends the run with a
    CommandFailed saying which request (a load test against a server that is not there measures nothing)."""

    def send(method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, Any]:
        request = urllib.request.Request(
            base_url.rstrip("/") + path,
            data=body or None,
            method=method,
            headers={"Content-Type": "application/json", **headers},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                raw = response.read()
                return response.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as error:
            raw = error.read()
            try:
                return error.code, json.loads(raw) if raw else None
            except ValueError:
                return error.code, raw.decode(errors="replace")
        except urllib.error.URLError as error:
            raise CommandFailed(f"--http {base_url}: {method} {path}: {_why(error.reason)}") from None
        except (OSError, http.client.HTTPException) as error:  # a timeout, a reset, a malformed answer
            raise CommandFailed(f"--http {base_url}: {method} {path}: {_why(error)}") from None

    return send


def _why(reason: object) -> str:
    if isinstance(reason, TimeoutError):
        return "no answer in time"
    if isinstance(reason, OSError) and reason.strerror:
        return reason.strerror
    return str(reason) or type(reason).__name__


def run_over_http(
    base_url: str,
    *,
    bottles: int,
    users: int,
    minutes: float,
    heartbeat_seconds: float,
    seed: int,
    function_key: str | None = None,
    progress: bool = True,
) -> Tally:
    """Send a fleet's device traffic to `base_url` as it happens (event times are the app's clock,
    `utc_now`: the real one unless set or placed)."""
    rng = random.Random(seed)
    fleet = make_fleet(rng, bottles, users)
    send = http_sender(base_url)
    keys = provision(fleet, send, function_key)
    start = utc_now()
    plan = plan_fleet(rng, fleet, start, minutes / 1440, heartbeat=timedelta(seconds=heartbeat_seconds))
    tally = Tally()
    bar = Progress(len(plan.requests), "sending", what="requests") if progress else None
    for done, request in enumerate(plan.requests, 1):
        delay = (request.at - utc_now()).total_seconds()
        if delay > 0:
            time.sleep(delay)
        post(request, keys, send, tally)
        if bar is not None and done % 50 == 0:
            bar.update(done, f"{done:,} requests sent")
    if bar is not None:
        bar.finish(f"{len(plan.requests):,} requests sent")
    return tally


# --- output -------------------------------------------------------------------------------------


def describe_ingestion(tally: Tally, seconds: float) -> list[str]:
    latencies = sorted(tally.latencies) or [0.0]
    p50, p99 = latencies[len(latencies) // 2], latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    return [
        f"requests: {tally.requests}  statuses: {dict(sorted(tally.statuses.items()))}",
        f"events sent: {tally.sent}  stored: {tally.stored}  duplicates: {tally.duplicates}  "
        f"expired: {tally.expired}  rejected: {tally.rejected}",
        f"throughput: {tally.sent / seconds if seconds else 0:,.0f} events/s over {seconds:.1f} s of requests  "
        f"(latency p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms)",
    ]


def describe(result: SimulationResult) -> str:
    plan, lines = result.plan, []
    lines.append(
        f"Simulated {len(plan.bottles)} bottles of {len({b.user_id for b in plan.bottles})} users from "
        f"{plan.start:%Y-%m-%d %H:%M} to {plan.end:%Y-%m-%d %H:%M} UTC"
    )
    lines += describe_ingestion(result.tally, result.device_seconds)
    lines.append(f"database commands per event: {result.commands_per_event:.2f}")
    lines.append(result.settings_used)
    runs = ", ".join(
        f"{name} x{count} ({result.timer_seconds[name]:.1f} s)" for name, count in sorted(result.timer_runs.items())
    )
    lines.append(f"timer runs: {runs}")
    lines.append("")
    lines.append("notifications     injected  notified  matched  precision  recall")
    for kind, s in result.scores.items():
        lines.append(
            f"  {kind:<15} {s.expected:>8}  {s.notified:>8}  {s.matched:>7}  {s.precision:>9.3f}  {s.recall:>6.3f}"
        )
    total = Score(*(sum(getattr(s, f) for s in result.scores.values()) for f in ("expected", "notified", "matched")))
    lines.append(
        f"  {'all':<15} {total.expected:>8}  {total.notified:>8}  {total.matched:>7}  "
        f"{total.precision:>9.3f}  {total.recall:>6.3f}"
    )
    lines.append(f"queue messages sent: {result.queue_messages}")
    for label, items in (("missed", result.misses), ("unexpected", result.extras)):
        for item in items[:5]:
            lines.append(f"  {label}: {item.kind} {item.bottle_id} episode {item.episode_start:%Y-%m-%d %H:%M:%S}")
    lines.append("")
    lines += describe_report_check(result.report_check)
    if result.archive_check is not None:
        lines.append(result.archive_check.describe())
    lines += describe_report(result.daily_report)
    if result.store_lines:
        lines += ["", *result.store_lines]
    return "\n".join(lines)


def describe_report_check(check: ReportCheck) -> list[str]:
    since = f" from {check.since:%Y-%m-%d %H}:00" if check.since else ""
    verdict = "all match" if not check.mismatches else f"{len(check.mismatches)} differ"
    lines = [f"hourly reports against the source ({check.user_hours} user-hours{since}): {verdict}"]
    return lines + [f"  {mismatch}" for mismatch in check.mismatches[:5]]


def describe_report(report: dict[str, Any] | None) -> list[str]:
    if report is None:
        return ["daily report: none found"]
    totals = ", ".join(f"{k} {report.get(k)}" for k in ("opened", "closed", "doses", "pills_taken", "heartbeats"))
    lines = [f"daily report {report['_id']}: {totals}"]
    for entry in report.get("bottles", []):
        counts = ", ".join(f"{k} {entry.get(k)}" for k in ("opened", "closed", "doses", "pills_taken", "heartbeats"))
        lines.append(f"  {entry.get('bottle_id')} ({entry.get('medication')}): {counts}")
    return lines


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="./dev simulate", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--bottles", type=positive_int, default=200, help="bottles in the fleet (default 200)")
    parser.add_argument(
        "--users", type=positive_int, default=30, help="users owning them, at most one per bottle (default 30)"
    )
    parser.add_argument(
        "--days",
        type=float_above(0, MAX_DAYS),
        default=2.0,
        help=f"simulated days, at most {MAX_DAYS} (default 2; in-process mode)",
    )
    parser.add_argument("--seed", type=int, default=7, help="another seed, another deterministic run (default 7)")
    parser.add_argument(
        "--workers",
        type=int_between(1, 16),
        default=2,
        help="queue workers side by side for the queue-triggered functions (default 2)",
    )
    parser.add_argument("--mongodb-uri", help="any MongoDB, Cosmos DB included (default: SecantusDB in-process)")
    parser.add_argument(
        "--cosmos-store",
        action="store_true",
        help="run on the Cosmos-faithful store (partitions, splits, throttling: docs/cosmos-store.md) in front of it",
    )
    parser.add_argument(
        "--partition-kb",
        type=positive_int,
        default=64,
        help="--cosmos-store: a physical partition's size limit in KB, standing for 50 GB (default 64)",
    )
    parser.add_argument(
        "--chart",
        type=writable_file,
        default="simulation.png",
        help="where to write the PNG chart (default %(default)s)",
    )
    parser.add_argument(
        "--archive-dir",
        type=Path,
        default=Path(os.environ.get("ARCHIVE_DIR") or DEFAULT_ARCHIVE_DIR),
        help="the archive's folder, emptied first (default: ARCHIVE_DIR, else %(default)s); ./dev archive reads it",
    )
    parser.add_argument(
        "--http", type=http_url, metavar="BASE_URL", help="send device traffic over HTTP in real time instead"
    )
    parser.add_argument("--function-key", help="Functions key for the provisioning route (--http)")
    parser.add_argument(
        "--minutes", type=positive_float, default=2.0, help="how long to send, in minutes (default 2; --http)"
    )
    parser.add_argument(
        "--heartbeat-seconds",
        type=positive_float,
        default=10.0,
        help="each bottle's heartbeat period in seconds (default 10; --http)",
    )
    args = parser.parse_args(argv)
    if args.users > args.bottles:
        parser.error(f"--users {args.users} is more than --bottles {args.bottles}: every user needs a bottle")
    return args


def main(argv: list[str] | None = None) -> None:
    run_command("./dev simulate", lambda: _simulate(argv))


def _simulate(argv: list[str] | None) -> None:
    args = parse_arguments(argv)

    if args.http:
        started = time.perf_counter()
        tally = run_over_http(
            args.http,
            bottles=args.bottles,
            users=args.users,
            minutes=args.minutes,
            heartbeat_seconds=args.heartbeat_seconds,
            seed=args.seed,
            function_key=args.function_key,
        )
        print("\n".join(describe_ingestion(tally, time.perf_counter() - started)))
        return

    started = time.perf_counter()
    result = run_simulation(
        bottles=args.bottles,
        users=args.users,
        days=args.days,
        seed=args.seed,
        mongodb_uri=args.mongodb_uri,
        workers=args.workers,
        cosmos=Options(partition_bytes=args.partition_kb * 1024) if args.cosmos_store else None,
        archive_dir=args.archive_dir,
    )
    print(describe(result))
    from tools.chart import draw

    try:
        chart = draw(result, args.chart)
    except OSError as error:
        raise CommandFailed(f"--chart {args.chart}: {error.strerror or error}") from None
    print(f"\nchart: {chart.resolve()}")
    print(
        f"archive: {args.archive_dir} (./dev archive {result.plan.bottles[0].bottle_id} {result.plan.start:%Y-%m-%d})"
    )
    print(f"finished in {time.perf_counter() - started:.1f} s")
    failures = result.failures()
    print("verdict: PASS" if not failures else "verdict: FAIL: " + "; ".join(failures))
    if failures:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
