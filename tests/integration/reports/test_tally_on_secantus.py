"""The heartbeat tally's sweep on a real wire-protocol server (SecantusDB): a user whose bottles fill a page is read
again whole (shared/reports/tally.py: UserPages), with a query mongomock is more lenient about than pymongo."""

from datetime import timedelta
from typing import Any

import pytest

from shared.settings import Settings
from tests.tally_fleet import CLOCK, DAY, HOUR, Fleet

pytestmark = [pytest.mark.integration, pytest.mark.own_clock(CLOCK)]
MINUTE = timedelta(minutes=1)


def test_a_user_whose_bottles_fill_a_page_is_counted_whole_on_a_real_server(real_db: Any) -> None:
    fleet = Fleet(real_db, Settings(reports_page_size=2))
    for n in range(3):
        fleet.provision(f"b{n}", "u1", DAY)
        fleet.beat(f"b{n}", DAY + (20 + n) * MINUTE)
    fleet.provision("b9", "u2", DAY)
    fleet.beat("b9", DAY + 30 * MINUTE)

    assert fleet.tally(DAY + HOUR + 10 * MINUTE)

    assert (fleet.hourly("u1"), fleet.hourly("u2")) == ({DAY: 3}, {DAY: 1})
