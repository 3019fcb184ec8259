"""A heartbeat tally back after a long stop (shared/reports/tally.py, Pass.rollup_days): its first pass rolls up
the days of its last window at once, beside the oldest day it is behind, so yesterday's daily report does not wait
for the catch-up of the days before it. Driven through provisioning, ingestion and the tally on one store with
chosen server clocks (tests/test_tally.py's Fleet)."""

from datetime import timedelta
from typing import Any

from shared.settings import Settings
from tests.test_tally import DAY, Fleet, opened

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
