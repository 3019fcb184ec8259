"""The heartbeat tally spread out, because autoscale bills each hour at its peak (shared/reports/tally.py): a pass
as large as the last one spreads its pages over REPORTS_TALLY_SPREAD_MINUTES instead of a burst (Pace), and with
DAILY_ROLLUP_STAGGERED each user's day rolls up at its own hour of the block; both still count every user-hour and
roll up every user's day exactly. Driven through the worker (process_partition) with a clock that the worker's own
waits move on, one run a minute as the dispatcher sends them."""

import math
from datetime import datetime, timedelta
from typing import Any

import pytest

from shared.consumers.plugged import dispatch
from shared.feeds.settling import CLOCK_MARGIN
from shared.settings import Settings
from shared.store import schema
from shared.store.partitioning import bucket_of
from tests.reports.paced_tally import BUDGET_S, SPREAD, USERS, Worker, beat, fleet, hourly, settings
from tests.tally_fleet import CLOCK, DAY

# The tests play their instants from a fixed day: the clock runs from a week after it (tests/tally_fleet.py).
pytestmark = pytest.mark.own_clock(CLOCK)


def daily(db: Any, day: datetime = DAY) -> dict[str, int]:
    found = db[schema.USER_DAILY_REPORTS].find({"day": day}, {"user_id": 1, "heartbeats": 1})
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


def users_by_shift(block: int, per_shift: int) -> dict[str, int]:
    """User ids, `per_shift` of each hour of the block at which a staggered user's day rolls up (its bucket)."""
    found: dict[str, int] = {}
    for n in range(10_000):
        user_id = f"staggered{n}"
        shift = bucket_of(user_id) % block
        if sum(1 for s in found.values() if s == shift) < per_shift:
            found[user_id] = shift
        if len(found) == block * per_shift:
            return found
    raise AssertionError("not enough users")


def test_staggered_each_users_day_rolls_up_at_its_own_hour_of_the_block_and_every_day_completes(mock_db: Any) -> None:
    """DAILY_ROLLUP_STAGGERED (the default): at each hourly pass only the users whose hour of the block it is have
    their day rolled up, with every hour up to then; every user's day lags its hours by at most a block and an hour,
    and a closed day is complete within a block of midnight, the hours a block straddles rolled into both days."""
    config = Settings(reports_partitions=1, change_source="polling")
    assert config.daily_rollup_staggered
    block = config.daily_rollup_hours
    users = users_by_shift(block, per_shift=2)
    hours = 30
    keys = fleet(mock_db, config, 0, list(users))
    worker = Worker(mock_db, config)

    for h in range(1, hours + block + 1):
        if h <= hours:
            beat(mock_db, config, keys, h - 1)
        run = worker.run(DAY + timedelta(hours=h, minutes=10))  # counts the hours up to DAY + h
        assert run.caught_up
        for user_id, shift in users.items():
            # The last end of this user's blocks the pass has counted up to: its day has every hour before it.
            rolled_to = max((e for e in range(1, h + 1) if (e - shift) % block == 0), default=None)
            for day in (0, 1):
                counted = 0 if rolled_to is None else 2 * max(0, min(rolled_to, 24 * (day + 1), hours) - 24 * day)
                found = daily(mock_db, DAY + timedelta(days=day)).get(user_id, 0)
                assert found == counted, (h, user_id, shift, day)
        rolled_now = {u for u, shift in users.items() if (h - shift) % block == 0}
        assert run.daily_written <= 2 * len(rolled_now)  # a block's share of the users (a day or two each), not all
        assert run.daily_written or h > hours

    assert daily(mock_db) == dict.fromkeys(users, 48)  # the first day, complete
    assert daily(mock_db, DAY + timedelta(days=1)) == dict.fromkeys(users, 2 * (hours - 24))


def tally_lag(db: Any, config: Settings, now: datetime) -> float:
    """The heartbeat tally's lag the dispatcher records at `now` (pillbottle.reports.lag_seconds)."""
    return dispatch(db, now=now, settings=config, send=lambda messages: None).lag_seconds["heartbeat_tally"]


def test_a_paced_pass_on_time_is_not_reported_behind_but_one_that_overran_is(mock_db: Any) -> None:
    """A paced pass takes most of the hour, so the lag (and the report-lag alert) counts its hours as counted while
    it is within its spread and a clock margin; past that, the hours it has yet to finish are a lag again."""
    config = settings()
    fleet(mock_db, config, hours=2)
    worker = Worker(mock_db, config)
    worker.pass_from(DAY + timedelta(hours=1, minutes=10))
    began = DAY + timedelta(hours=2, minutes=10)
    worker.run(began)
    worker.run(began + timedelta(minutes=1))  # under way, paced: a few pages done

    assert tally_lag(mock_db, config, began + timedelta(minutes=2)) == 0
    assert tally_lag(mock_db, config, began + SPREAD + CLOCK_MARGIN + timedelta(minutes=1)) == 3600
