"""The heartbeat tally's pacing (shared/reports/tally.py, Pace): a pass as large as the last one spreads its pages
over REPORTS_TALLY_SPREAD_MINUTES instead of a burst, because autoscale bills each hour at its peak, and still
counts every user-hour and rolls up every user's day exactly. Driven through the worker (process_partition) with
a clock that the worker's own waits move on, one run a minute as the dispatcher sends them."""

import json
import math
from datetime import datetime, timedelta
from typing import Any

from shared.bottles.provisioning import provision
from shared.bottles.spec import BottleSpec
from shared.ingestion.receive import receive
from shared.instants import day_of, utc_now
from shared.reports.change_feed import PartitionRun, dispatch, process_partition
from shared.reports.leases import Partition
from shared.settings import Settings
from shared.store import schema

DAY = day_of(utc_now()) - timedelta(days=7)  # within the reports' retention, and every instant played is past
USERS = 40
BUDGET_S = 45.0
SPREAD = timedelta(minutes=10)


def settings(spread: timedelta = SPREAD) -> Settings:
    # A page a user, and a roll-up at every pass (DAILY_ROLLUP_HOURS=1): every page of a pass rolls days up.
    return Settings(
        reports_page_size=1,
        reports_partitions=1,
        change_source="polling",
        daily_rollup_hours=1,
        reports_time_budget_seconds=BUDGET_S,
        reports_tally_spread_minutes=int(spread / timedelta(minutes=1)),
    )


def fleet(db: Any, config: Settings, hours: int) -> None:
    """USERS users of one bottle each, heard from every half hour for `hours` hours from DAY."""
    spec = BottleSpec(user_id="u", medication="med", schedule={"every_hours": 12})
    for n in range(USERS):
        user = spec.model_copy(update={"user_id": f"user{n:02d}"})
        key = provision(db, f"b{n:02d}", user, rotate_key=False, now=DAY, settings=config).device_key
        assert key is not None
        for half in range(2 * hours):
            at = DAY + timedelta(minutes=30 * half + 1)
            body = json.dumps({"events": [{"type": "heartbeat", "time": at.isoformat()}]}).encode()
            receive(db, f"b{n:02d}", key, body, now=at, settings=config)


class Worker:
    """The tally partition's worker, one run a minute from `start`, on a clock its waits move on."""

    def __init__(self, db: Any, config: Settings) -> None:
        self.db, self.config = db, config
        self.elapsed = 0.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.elapsed

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.elapsed += seconds

    def run(self, now: datetime) -> PartitionRun:
        messages: list[str] = []
        dispatch(self.db, now=now, settings=self.config, send=messages.extend)
        tally = [p for p in (Partition.from_message(json.loads(m)) for m in messages) if p.feed.tally]
        if not tally:
            return PartitionRun("none", caught_up=True)
        self.elapsed = 0.0
        return process_partition(self.db, tally[0], now=now, settings=self.config, clock=self.clock, sleep=self.sleep)

    def pass_from(self, start: datetime, *, minutes: int = 60) -> list[PartitionRun]:
        """A run each minute from `start` until the pass is done (or `minutes` have gone)."""
        runs = []
        for minute in range(minutes):
            run = self.run(start + timedelta(minutes=minute))
            runs.append(run)
            if run.caught_up:
                break
        return runs


def hourly(db: Any) -> dict[tuple[str, datetime], int]:
    found = db[schema.USER_HOURLY_REPORTS].find({}, {"user_id": 1, "hour": 1, "heartbeats": 1})
    return {(r["user_id"], r["hour"]): r["heartbeats"] for r in found if r.get("heartbeats")}


def daily(db: Any) -> dict[str, int]:
    found = db[schema.USER_DAILY_REPORTS].find({"day": DAY}, {"user_id": 1, "heartbeats": 1})
    return {r["user_id"]: r["heartbeats"] for r in found}


def test_a_pass_as_large_as_the_last_spreads_its_pages_over_the_spread(mock_db: Any) -> None:
    """The second pass (the first is unpaced: no size known yet) reads its 40 pages at most a fair share a run,
    none before its time, and ends within the spread plus a run; its users' hours and days are exact."""
    config = settings()
    fleet(mock_db, config, hours=2)
    worker = Worker(mock_db, config)
    first = worker.pass_from(DAY + timedelta(hours=1, minutes=10))
    assert sum(run.pages for run in first) == USERS
    assert len(first) == 1

    began = DAY + timedelta(hours=2, minutes=10)
    runs = worker.pass_from(began)

    interval = SPREAD.total_seconds() / USERS  # 15 s a page
    share = math.ceil(BUDGET_S / interval) + 1
    assert sum(run.pages for run in runs) == USERS
    assert max(run.pages for run in runs) <= share, [run.pages for run in runs]
    assert len(runs) <= SPREAD / timedelta(minutes=1) + 2
    assert len(runs) >= SPREAD / timedelta(minutes=1) - 1  # spread, not a burst
    assert worker.slept
    assert max(worker.slept) <= interval + 1e-6
    assert hourly(mock_db) == {(f"user{n:02d}", DAY + timedelta(hours=h)): 2 for n in range(USERS) for h in range(2)}
    assert daily(mock_db) == {f"user{n:02d}": 4 for n in range(USERS)}


def test_unpaced_the_same_pass_is_one_run(mock_db: Any) -> None:
    """REPORTS_TALLY_SPREAD_MINUTES=0: the second pass reads every page in its first run, as before pacing."""
    config = settings(spread=timedelta(0))
    fleet(mock_db, config, hours=2)
    worker = Worker(mock_db, config)
    worker.pass_from(DAY + timedelta(hours=1, minutes=10))

    runs = worker.pass_from(DAY + timedelta(hours=2, minutes=10))

    assert [run.pages for run in runs] == [USERS]
    assert not worker.slept
    assert daily(mock_db) == {f"user{n:02d}": 4 for n in range(USERS)}


def test_a_paced_pass_still_under_way_when_the_next_hour_is_due_finishes_at_once(mock_db: Any) -> None:
    """Pacing never makes the tally fall behind: a paced pass that is still under way when a later hour is due (its
    worker was stopped for a while, say) reads every page it has left in its next run, with no waits."""
    config = settings()
    fleet(mock_db, config, hours=3)
    worker = Worker(mock_db, config)
    worker.pass_from(DAY + timedelta(hours=1, minutes=10))
    began = DAY + timedelta(hours=2, minutes=10)
    first = [worker.run(began + timedelta(minutes=m)) for m in range(3)]
    done = sum(run.pages for run in first)
    assert 0 < done < USERS
    waits = len(worker.slept)

    late = worker.run(DAY + timedelta(hours=3, minutes=15))  # the hour 02:00-03:00 is due: the pass is behind

    assert late.checkpoint_time == DAY + timedelta(hours=2)
    assert done + late.pages == USERS
    assert len(worker.slept) == waits
    assert daily(mock_db) == {f"user{n:02d}": 4 for n in range(USERS)}


def test_a_pass_cut_off_by_its_budget_leaves_no_burst_for_the_next_run(mock_db: Any) -> None:
    """A run ends when its next page is due after its budget; the next run, a minute on, reads the page due then
    and waits for the rest as before, rather than catching up a backlog at once."""
    config = settings()
    fleet(mock_db, config, hours=2)
    worker = Worker(mock_db, config)
    worker.pass_from(DAY + timedelta(hours=1, minutes=10))

    runs = worker.pass_from(DAY + timedelta(hours=2, minutes=10))

    middle = runs[1:-1]
    assert middle
    assert all(run.pages <= math.ceil(60 / (SPREAD.total_seconds() / USERS)) for run in middle)
    assert not any(run.caught_up for run in runs[:-1])
    assert runs[-1].caught_up
