"""Report writes at their edges (shared/reports/aggregation.py): an action that reaches its hour late, after the
tally's pass at midnight rolled the day up, rolls the day up again at once, from the first minutes of the next day
on; and each page a run writes is stamped later than the last. Driven through provisioning, ingestion, the
actions' consumer and the tally (tests/tally_fleet.py's Fleet)."""

from datetime import timedelta
from typing import Any

import pytest

from shared.settings import Settings
from shared.store import schema
from tests.tally_fleet import CLOCK, DAY, HOUR, Fleet, opened

# The tests play their instants from a fixed day: the clock runs from a week after it (tests/tally_fleet.py).
pytestmark = pytest.mark.own_clock(CLOCK)

MINUTE = timedelta(minutes=1)


@pytest.mark.parametrize("received_minute", [12, 30])
def test_a_late_action_received_just_after_midnight_reaches_yesterdays_daily_report(
    mock_db: Any, received_minute: int
) -> None:
    """Received at 00:12 or 00:30, after the midnight pass (00:10) and before the tally's next: at once."""
    fleet = Fleet(mock_db, Settings())
    fleet.provision("b1", "u1", DAY)
    fleet.send("b1", opened(DAY + 8 * HOUR), now=DAY + 8 * HOUR)
    for hour in range(1, 25):
        fleet.tally(DAY + hour * HOUR + 10 * MINUTE)  # the pass at 00:10 rolls the whole day up
    day = fleet.daily("u1", DAY)
    assert day is not None
    assert day["opened"] == 1

    # Sent at 22:00, buffered by the bottle while offline, received after midnight.
    fleet.send("b1", opened(DAY + 22 * HOUR), now=DAY + 24 * HOUR + received_minute * MINUTE)

    day = fleet.daily("u1", DAY)
    assert day is not None
    assert day["opened"] == 2


def test_each_page_of_a_run_is_written_later_than_the_page_before(mock_db: Any) -> None:
    """A run writes page after page at one clock reading; a reader that polls the reports by `updated_at`
    between two pages must see the second page's reports as newer than any it read, so each page's stamp is
    later than the last page's."""
    fleet = Fleet(mock_db, Settings(reports_page_size=1))
    for user in ("u1", "u2", "u3"):
        fleet.provision(f"b-{user}", user, DAY)
        fleet.beat(f"b-{user}", DAY + 20 * MINUTE)
    fleet.tally(DAY + HOUR + 15 * MINUTE)  # one pass, a page a user, the clock read once

    stamps = [r["updated_at"] for r in mock_db[schema.USER_HOURLY_REPORTS].find({"hour": DAY})]
    assert len(stamps) == 3
    assert len(set(stamps)) == 3
