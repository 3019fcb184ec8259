"""One lifecycle run: the plan played through the app's functions on the Cosmos-faithful store, with workers
skewed and killed, then what it found gathered into a LifecycleResult."""

import logging
import random
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from pymongo import MongoClient
from pymongo.database import Database

from shared.instants import set_clock
from shared.reports.tally import counted_from
from shared.settings import get_settings
from shared.store import schema
from tools.archive_history import archive_setting
from tools.lifecycle.faults import SkewedClock, Watch, store_calls_watched
from tools.lifecycle.plan import SETTINGS, LifecyclePlan, plan_lifecycle, planned_documents
from tools.lifecycle.play import Player, request_units_by_collection
from tools.lifecycle.result import LifecycleResult
from tools.lifecycle.splits import Splitter
from tools.lifecycle.verdict import notifications_sent, peak_drain, peak_late_doses
from tools.simulate.scoring import score

MAX_SKEW = timedelta(minutes=2)
KILL_RATE = 0.001  # per store call of a queue worker
MARK_KILL_RATE = 0.1  # per mark of a sent batch: a worker dies between its sends and their mark

Tamper = Callable[[Database[Any], Any], None]


def run_lifecycle(
    *,
    days: float,
    bottles: int,
    seed: int,
    workers: int,
    progress: bool = True,
    tamper: Tamper | None = None,
) -> LifecycleResult:
    """What a run found: the plan of `days` and `bottles` (from `seed`) played through the app's functions, loaded
    and invoked through the Functions runtime, on the Cosmos-faithful store with `workers` queue workers.
    `tamper(backend_db, host)` runs after the last step and before the checks (the tests plant faults with it)."""
    from tools.cosmos_store.local import cosmos_local_store
    from tools.cosmos_store.options import Options
    from tools.local_host import LocalHost
    from tools.local_store import secantus_process, setting_defaults

    started = time.perf_counter()
    rng = random.Random(seed)
    life = plan_lifecycle(rng, bottles, days)
    plan = life.plan
    clock = SkewedClock.for_workers(plan.start, workers, rng, MAX_SKEW)
    watch = Watch(random.Random(seed + 1), kill_rate=KILL_RATE, mark_kill_rate=MARK_KILL_RATE)
    set_clock(clock)
    logging.disable(logging.CRITICAL)  # the host logs every killed worker's traceback; the summary counts them
    try:
        with (
            setting_defaults(**SETTINGS),
            tempfile.TemporaryDirectory(prefix="lifecycle-archive-") as archive_folder,
            archive_setting(archive_folder, None),  # the archive (docs/archive.md), checked like the reports
            secantus_process(expire=False) as backend_uri,
            MongoClient[dict[str, Any]](backend_uri, directConnection=True, tz_aware=True) as observer,
            cosmos_local_store(Options(auto_split=False, seed=seed), backend_uri, expire=False) as (_, proxy),
            store_calls_watched(watch),
        ):
            settings = get_settings()
            backend = observer[settings.mongodb_database]
            splitter = Splitter(proxy, backend, planned_documents(life), clock)
            watch.before_read = splitter.in_read
            host = LocalHost.load()
            player = Player(
                host=host, clock=clock, splitter=splitter, proxy=proxy, backend=backend, workers=workers, life=life
            )
            player.play(progress)
            if tamper is not None:
                tamper(backend, host)
            watch.killing = False
            return result_of(
                player=player, life=life, backend=backend, watch=watch, days=days, workers=workers, started=started
            )
    finally:
        logging.disable(logging.NOTSET)
        set_clock(None)


def result_of(
    *,
    player: Player,
    life: LifecyclePlan,
    backend: Database[Any],
    watch: Watch,
    days: float,
    workers: int,
    started: float,
) -> LifecycleResult:
    """What the played run found: the reports and the archive compared a last time, the notifications scored and
    checked for repeats, with the splits, kills, samples and request units on the way (`started`: perf_counter)."""
    plan = life.plan
    player.ledger.compare(backend, counted_from(plan.end))
    hourly_check, daily_check = player.ledger.checks()
    notifications = list(backend[schema.NOTIFICATIONS].find())
    scores, misses, extras = score(plan.expected, notifications)
    sent, duplicates = notifications_sent(player.host, watch.killed_marks)
    proxy = player.proxy
    partitions = {c.name.split(".", 1)[1]: len(c.partitions) for c in proxy.partitions.collections()}
    return LifecycleResult(
        days=days,
        bottles=len(plan.bottles),
        users=len({b.user_id for b in plan.bottles}),
        workers=workers,
        tally=player.tally,
        splits=player.splitter.done,
        partitions=partitions,
        throttled=proxy.metered.throttled,
        throttle_episodes=player.changes["throttle"],
        hourly_check=hourly_check,
        daily_check=daily_check,
        scores=scores,
        misses=misses,
        extras=extras,
        notifications_sent=sent,
        peak_late_doses=peak_late_doses(plan),
        duplicates=duplicates,
        kills=watch.kills,
        redeliveries=player.redeliveries,
        poisoned=player.poisoned,
        re_reads=watch.re_reads,
        re_read_floor=player.splitter.re_read_floor + watch.killed_unsaved,
        request_units=request_units_by_collection(proxy),
        samples=player.samples,
        changes=player.changes,
        throttle_windows=player.throttle_windows,
        seconds=time.perf_counter() - started,
        step_seconds=player.seconds,
        peak=peak_drain(player.late_runs, notifications, player.host, watch.killed_marks),
        archive_check=player.archive_ledger.final(
            backend, counted_from(plan.end), get_settings().heartbeat_window_hours
        ),
    )
