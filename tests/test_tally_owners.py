"""The heartbeat tally's roll-ups of a bottle's earlier owners (shared/reports/tally.py, count_page): a user who
gave their only bottle away has no heartbeat document of their own, so their day reaches its daily report only
through the documents that list them among the bottle's owners. Driven through provisioning, ingestion and the
tally on one store with chosen server clocks (tests/test_tally.py's Fleet)."""

from datetime import timedelta
from typing import Any

from shared.settings import Settings
from tests.test_tally import DAY, HOUR, Fleet, opened

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
