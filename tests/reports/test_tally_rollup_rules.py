"""Which days a heartbeat tally pass rolls up (shared/reports/tally.py: count_page, rollup_shift): at the end of
each block of DAILY_ROLLUP_HOURS counted from midnight when not staggered; the day of an hour a pass counts whose
block has ended, however old, down to the roll-up horizon (MAX_EVENT_AGE_DAYS + 1) included. Driven through
provisioning, ingestion and the tally on one store with chosen server clocks (tests/tally_fleet.py's Fleet)."""

from datetime import timedelta
from typing import Any

import pytest

from shared.settings import Settings
from shared.store import schema
from tests.tally_fleet import CLOCK, DAY, HOUR, Fleet, opened

# The tests play their instants from a fixed day: the clock runs from a week after it (tests/tally_fleet.py).
pytestmark = pytest.mark.own_clock(CLOCK)

MINUTE = timedelta(minutes=1)


def test_not_staggered_every_users_day_rolls_up_when_the_pass_counts_a_blocks_last_hour(mock_db: Any) -> None:
    """Blocks of six hours from midnight: an opening at 08:00 reaches the daily report with the pass that counts
    11:00-12:00 (at 12:10), not before."""
    fleet = Fleet(mock_db, Settings(daily_rollup_staggered=False))
    fleet.provision("b1", "u1", DAY)
    openings = []
    for hour in range(14):
        if hour == 8:
            fleet.send("b1", opened(DAY + 8 * HOUR), now=DAY + 8 * HOUR)
        fleet.tally(DAY + hour * HOUR + 10 * MINUTE)
        day = fleet.daily("u1", DAY)
        openings.append(None if day is None else day["opened"])

    # The pass at 12:10 rolls the day up (the one at 06:10 found nothing to report), the one at 13:10 keeps it.
    assert openings == [None] * 12 + [1, 1]


def test_a_first_pass_rolls_up_the_day_of_a_silent_rings_hour_whose_block_ended_before_its_window(
    mock_db: Any,
) -> None:
    """A bottle silent since 10:54: a first pass two days later counts that hour from the ring; its block ended
    long before the pass's last window, so only the hour's own roll-up brings it into the day."""
    fleet = Fleet(mock_db, Settings(daily_rollup_staggered=False))
    fleet.provision("b1", "u1", DAY)
    fleet.beat("b1", DAY + 10 * HOUR + 54 * MINUTE)

    fleet.tally(DAY + timedelta(days=2, minutes=15))

    day = fleet.daily("u1", DAY)
    assert day is not None
    assert day["heartbeats"] == 1


def test_a_first_pass_rolls_up_the_day_of_a_silent_rings_hour_right_at_the_rollup_horizon(mock_db: Any) -> None:
    """The roll-up horizon includes its own instant: an hour that began exactly MAX_EVENT_AGE_DAYS + 1 days before
    the end of the hours a first pass counts still has its day rolled up (its hourly reports are kept longer)."""
    config = Settings(max_event_age_days=1, daily_rollup_staggered=False)
    fleet = Fleet(mock_db, config)
    fleet.provision("b1", "u1", DAY)
    hour = DAY + 10 * HOUR
    fleet.beat("b1", hour + 20 * MINUTE)

    fleet.tally(hour + timedelta(days=2, minutes=15))  # counts the hours up to `hour` + the horizon (1 + 1 days)

    day = fleet.daily("u1", DAY)
    assert day is not None
    assert day["heartbeats"] == 1


def test_a_first_pass_leaves_the_daily_report_of_a_silent_rings_day_older_than_the_rollup_horizon(
    mock_db: Any,
) -> None:
    """A day that ended more than MAX_EVENT_AGE_DAYS + 1 days before the hours a first pass counts: its hourly
    reports may have expired, so the pass that counts a silent ring's hour of it leaves its daily report as is."""
    config = Settings(max_event_age_days=1, daily_rollup_staggered=False)
    fleet = Fleet(mock_db, config)
    history = {"_id": f"u1|{DAY:%Y-%m-%d}", "user_id": "u1", "day": DAY, "opened": 3, "bottles": []}
    mock_db[schema.USER_DAILY_REPORTS].insert_one(history | {"updated_at": DAY + 23 * HOUR})
    fleet.provision("b1", "u1", DAY)
    fleet.beat("b1", DAY + 22 * HOUR + 20 * MINUTE)

    fleet.tally(DAY + timedelta(days=3, hours=10, minutes=15))  # the horizon: 2 days before 10:00 three days on

    assert fleet.hourly("u1") == {DAY + 22 * HOUR: 1}
    assert fleet.daily("u1", DAY) == {k: v for k, v in history.items() if k != "_id"}
