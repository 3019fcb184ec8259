"""The heartbeat tally's roll-ups of a bottle's earlier owners (shared/reports/tally.py, count_page): a user who
gave their only bottle away has no heartbeat document of their own, so their day reaches its daily report only
through the documents that list them among the bottle's owners; a bottle given away twice within the heartbeat
window keeps both earlier owners, so each one's heartbeats count for them. Driven through provisioning, ingestion
and the tally on one store with chosen server clocks (tests/tally_fleet.py's Fleet)."""

from datetime import timedelta
from typing import Any

import pytest

from shared.settings import Settings
from tests.tally_fleet import CLOCK, DAY, HOUR, Fleet, opened

# The tests play their instants from a fixed day: the clock runs from a week after it (tests/tally_fleet.py).
pytestmark = pytest.mark.own_clock(CLOCK)

MINUTE = timedelta(minutes=1)


def test_a_user_who_gave_their_only_bottle_away_still_gets_the_days_actions_in_their_daily_report(
    mock_db: Any,
) -> None:
    """Opened at 08:00, given to another user at 10:30: the passes at the ends of the day's later blocks roll the
    day up for the earlier owner too, so their daily report holds the opening."""
    fleet = Fleet(mock_db, Settings(daily_rollup_staggered=False))
    fleet.provision("b1", "giver", DAY)
    fleet.tally(DAY + 10 * MINUTE)
    for hour in range(1, 26):
        if hour == 9:
            fleet.send("b1", opened(DAY + 8 * HOUR), now=DAY + 8 * HOUR)
        if hour == 11:
            fleet.provision("b1", "taker", DAY + 10 * HOUR + 30 * MINUTE)
        fleet.tally(DAY + hour * HOUR + 10 * MINUTE)

    day = fleet.daily("giver", DAY)
    assert day is not None
    assert day["opened"] == 1


def test_a_bottle_reassigned_twice_within_the_window_counts_each_owners_heartbeats_for_that_owner(
    mock_db: Any,
) -> None:
    """Given away at 03:00 and again at 06:00, its ring still holding the first owner's heartbeats: the second
    reassignment keeps the first owner among the earlier owners (shared/bottles/provisioning.py), so each owner's
    hourly reports count their own hours' heartbeats, and the second owner none of the first's."""
    fleet = Fleet(mock_db, Settings(daily_rollup_staggered=False))
    fleet.provision("b1", "first", DAY)
    owners = {3: "second", 6: "third"}
    for hour in range(9):
        for minute in (10, 40):
            fleet.beat("b1", DAY + hour * HOUR + minute * MINUTE)
        if hour + 1 in owners:
            fleet.provision("b1", owners[hour + 1], DAY + (hour + 1) * HOUR)
        fleet.tally(DAY + (hour + 1) * HOUR + 10 * MINUTE)  # counts the hour just closed, or all after a move

    assert fleet.hourly("first") == {DAY + hour * HOUR: 2 for hour in range(3)}
    assert fleet.hourly("second") == {DAY + hour * HOUR: 2 for hour in range(3, 6)}
    assert fleet.hourly("third") == {DAY + hour * HOUR: 2 for hour in range(6, 9)}
