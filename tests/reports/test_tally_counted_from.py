"""counted_from: the first instant a tally pass counts the hour holding a moment, which the simulator, the
lifecycle run and the benchmarks wait for before they compare the reports with what they sent
(shared/reports/tally.py). A pass then counts the hour; a pass a second earlier does not yet."""

from datetime import timedelta
from typing import Any

import pytest

from shared.reports.tally import counted_from
from shared.settings import Settings
from tests.tally_fleet import CLOCK, DAY, HOUR, Fleet

# The tests play their instants from a fixed day: the clock runs from a week after it (tests/tally_fleet.py).
pytestmark = pytest.mark.own_clock(CLOCK)

MINUTE = timedelta(minutes=1)
SECOND = timedelta(seconds=1)


def test_a_pass_at_counted_from_counts_the_hour_and_one_a_second_earlier_does_not(mock_db: Any) -> None:
    hour = DAY + 3 * HOUR
    heartbeat = hour + 20 * MINUTE
    fleet = Fleet(mock_db, Settings())
    fleet.provision("b1", "u1", DAY)
    fleet.beat("b1", heartbeat)

    fleet.tally(counted_from(heartbeat) - SECOND)
    assert fleet.hourly("u1") == {}

    fleet.tally(counted_from(heartbeat))
    assert fleet.hourly("u1") == {hour: 1}
