"""The heartbeat tally at its edges: when an hour is counted, which days are rolled up, where late heartbeats are
looked for (shared/reports/tally.py). Each test drives provisioning, ingestion and the tally on one store with
chosen server clocks (tests/tally_fleet.py's Fleet) and reads the reports a user would read."""

from datetime import timedelta
from typing import Any

import pytest

from shared.devices.device_time import LATE_AFTER
from shared.settings import Settings
from tests.tally_fleet import CLOCK, DAY, HOUR, Fleet, opened

# The tests play their instants from a fixed day: the clock runs from a week after it (tests/tally_fleet.py).
pytestmark = pytest.mark.own_clock(CLOCK)

MINUTE = timedelta(minutes=1)


def test_an_hour_is_counted_only_after_the_clock_margin_so_a_prompt_heartbeat_stored_late_still_counts(
    mock_db: Any,
) -> None:
    """An hour is counted LATE_AFTER plus a clock margin after it ends: a heartbeat received promptly by an
    instance whose clock is a few minutes behind the tally's (so not marked late) is stored after a pass that,
    by the tally's clock, began LATE_AFTER after the hour; that pass must not have counted the hour yet."""
    fleet = Fleet(mock_db, Settings())
    fleet.provision("b1", "u1", DAY)
    hour = DAY + 3 * HOUR
    fleet.beat("b1", hour + 50 * MINUTE)
    fleet.tally(hour + HOUR + LATE_AFTER + 2 * MINUTE)  # the tally's clock, 2 minutes ahead of ingestion's
    # Received 4 minutes after it was sent, by ingestion's clock: prompt, so not marked late.
    fleet.beat("b1", hour + 59 * MINUTE, received=hour + HOUR + 3 * MINUTE)
    fleet.tally(hour + 2 * HOUR + 15 * MINUTE)

    assert fleet.hourly("u1")[hour] == 2


def test_a_day_with_only_actions_gets_its_daily_report_from_the_hourly_passes(mock_db: Any) -> None:
    """A bottle opened but silent all day: no heartbeat changes an hour, so the day reaches its daily report only
    through the roll-up of the pass whose hours end where the day's last block ends."""
    fleet = Fleet(mock_db, Settings())
    fleet.provision("b1", "u1", DAY)
    fleet.tally(DAY + 10 * MINUTE)
    fleet.send("b1", opened(DAY + 8 * HOUR), now=DAY + 8 * HOUR)
    for hour in range(1, 26):
        fleet.tally(DAY + hour * HOUR + 10 * MINUTE)

    day = fleet.daily("u1", DAY)
    assert day is not None
    assert (day.get("opened", 0), day.get("heartbeats", 0)) == (1, 0)


def test_a_late_heartbeat_stored_just_as_a_pass_began_is_counted_by_the_next_pass(mock_db: Any) -> None:
    """A late heartbeat received, by ingestion's clock, a minute before a pass began by the tally's (clocks a
    minute apart, or a write that committed late) was not seen by that pass: the next pass looks for late
    heartbeats from the poll overlap before the last pass began, and counts it in its hour."""
    fleet = Fleet(mock_db, Settings())
    fleet.provision("b1", "u1", DAY)
    hour = DAY + 3 * HOUR
    fleet.beat("b1", hour + 10 * MINUTE)
    fleet.tally(hour + HOUR + 15 * MINUTE)
    fleet.beat("b1", hour + 20 * MINUTE, received=hour + HOUR + 14 * MINUTE)  # late: sent an hour before
    fleet.tally(hour + 2 * HOUR + 15 * MINUTE)

    assert fleet.hourly("u1")[hour] == 2
