"""A heartbeat tally back after a long stop (shared/reports/tally.py, Pass.rollup_days): its first pass rolls up
the days of its last window at once, beside the oldest day it is behind, so yesterday's daily report does not wait
for the catch-up of the days before it. Driven through provisioning, ingestion and the tally on one store with
chosen server clocks (tests/tally_fleet.py's Fleet)."""

from datetime import timedelta
from typing import Any

import pytest

from shared.reports.tally import rollup_shift
from shared.settings import Settings
from tests.tally_fleet import CLOCK, DAY, HOUR, Fleet, opened

# The tests play their instants from a fixed day: the clock runs from a week after it (tests/tally_fleet.py).
pytestmark = pytest.mark.own_clock(CLOCK)

MINUTE = timedelta(minutes=1)


def test_the_first_pass_back_after_days_rolls_up_its_last_windows_day_and_the_oldest_it_is_behind(
    mock_db: Any,
) -> None:
    fleet = Fleet(mock_db, Settings(daily_rollup_staggered=False))
    fleet.provision("b1", "u1", DAY)
    fleet.tally(DAY + 10 * MINUTE)
    for day in range(4):  # counted in their hours at once, while the day is open
        at = DAY + timedelta(days=day, hours=8)
        fleet.send("b1", opened(at), now=at)

    assert fleet.tally(DAY + timedelta(days=4, hours=1, minutes=10))  # its window: the last 24 hours

    rolled_up = [fleet.daily("u1", DAY + timedelta(days=day)) for day in range(4)]
    assert [None if d is None else d["opened"] for d in rolled_up] == [1, None, None, 1]


def test_a_staggered_users_day_whose_last_block_ended_while_the_tally_was_stopped_is_rolled_up_complete(
    mock_db: Any,
) -> None:
    """DAILY_ROLLUP_STAGGERED: a user whose blocks end at 03:00, 09:00, 15:00 and 21:00 has a day's last three
    hours rolled into it by the block that ends at 03:00 the next day. The tally stopped at 01:00 and came back two
    days later: its catch-up must roll that block up at the user's hour, so an opening at 22:00 reaches the day."""
    config = Settings()
    assert config.daily_rollup_staggered
    user_id = next(f"user{n}" for n in range(10_000) if rollup_shift(f"user{n}", config) == 3)
    fleet = Fleet(mock_db, config)
    fleet.provision("b1", user_id, DAY)
    for hour in range(26):
        if hour == 23:
            fleet.send("b1", opened(DAY + 22 * HOUR), now=DAY + 22 * HOUR)
        fleet.tally(DAY + hour * HOUR + 10 * MINUTE)  # the last at 01:10 the next day

    assert fleet.tally(DAY + timedelta(days=3, hours=1, minutes=10))

    day = fleet.daily(user_id, DAY)
    assert day is not None
    assert day["opened"] == 1
