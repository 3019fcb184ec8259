"""A heartbeat tally pass cut short by its time budget and carried on by the next run (shared/reports/tally.py:
Pass.token, Pass.resumed): the resumed pass must count what the whole pass would have counted, late heartbeats
and catch-up roll-ups included. Each test drives provisioning, ingestion and the tally on one store with chosen
server clocks (tests/tally_fleet.py's Fleet), with a page a user, each run out of time after one page."""

from datetime import datetime, timedelta
from typing import Any

import pytest

from shared.settings import Settings
from tests.tally_fleet import CLOCK, DAY, HOUR, Fleet, opened, user_in

# The tests play their instants from a fixed day: the clock runs from a week after it (tests/tally_fleet.py).
pytestmark = pytest.mark.own_clock(CLOCK)

MINUTE = timedelta(minutes=1)


def two_users(db: Any, settings: Settings) -> tuple[Fleet, str, str]:
    """Two users of one bottle each (b1, b2), the first one first in the sweep's order."""
    first, second = user_in(0, 100), user_in(500, 600)
    fleet = Fleet(db, settings)
    fleet.provision("b1", first, DAY)
    fleet.provision("b2", second, DAY)
    return fleet, first, second


def page_a_run(fleet: Fleet, began: datetime, runs: int) -> bool:
    """`runs` runs a minute apart from `began`, each out of time after one page; whether the last caught up."""
    return [fleet.partition.run(began + n * MINUTE, pages=1) for n in range(runs)][-1]


def test_a_late_heartbeat_of_a_user_the_resumed_pass_reaches_is_counted_in_its_hour(mock_db: Any) -> None:
    """A heartbeat that arrives late, for an hour the last pass counted, is counted by the next pass in that hour,
    even when the pass is cut after the first user and its next run reaches the bottle's user."""
    fleet, first, second = two_users(mock_db, Settings(reports_page_size=1))
    hour = DAY + 3 * HOUR
    for bottle_id in ("b1", "b2"):
        fleet.beat(bottle_id, hour + 10 * MINUTE)
    assert fleet.tally(hour + HOUR + 15 * MINUTE)
    fleet.beat("b2", hour + 40 * MINUTE, received=hour + HOUR + 30 * MINUTE)  # late: sent 50 minutes before

    assert page_a_run(fleet, hour + 2 * HOUR + 15 * MINUTE, runs=3)

    assert fleet.hourly(first) == {hour: 1}
    assert fleet.hourly(second) == {hour: 2}


def test_a_pass_back_after_days_rolls_up_the_oldest_day_it_is_behind_for_every_user_across_its_runs(
    mock_db: Any,
) -> None:
    """A tally back after a long stop rolls up, beside its last window of days, the oldest day it is behind, and
    the next passes the days after it (tests/reports/test_tally.py); when its pass takes several runs, the runs after
    the first still roll those days up for the users they reach, and pass the days left on to the next pass."""
    fleet, first, second = two_users(mock_db, Settings(reports_page_size=1, daily_rollup_staggered=False))
    fleet.tally(DAY + 10 * MINUTE)
    for day in range(3):  # counted in their hours at once, while the day is open
        for bottle_id in ("b1", "b2"):
            at = DAY + timedelta(days=day, hours=8)
            fleet.send(bottle_id, opened(at), now=at)
    back = DAY + timedelta(days=4, hours=1, minutes=10)

    for hours in range(3):
        assert page_a_run(fleet, back + hours * HOUR, runs=3)

    for user_id in (first, second):
        days = [fleet.daily(user_id, DAY + timedelta(days=day)) for day in range(3)]
        assert [None if d is None else d["opened"] for d in days] == [1, 1, 1], user_id
