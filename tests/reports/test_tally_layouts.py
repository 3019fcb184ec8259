"""The heartbeat tally's roll-ups across a REPORTS_PARTITIONS change (shared/feeds/layouts.py): the new layout's
leases take over the days their parents had yet to roll up (a first pass that never ran: every day since its
lease was made; a pass that fell behind: from its `rollups_from`). Those days' hours were counted already, or
hold actions counted while the day was open, so nothing else brings them into the daily reports. The gaps here
are longer than the roll-up window of a pass, which would otherwise bring the days in by itself."""

from datetime import timedelta
from typing import Any

import pytest

from shared.consumers.plugged import dispatch
from shared.settings import Settings
from tests.tally_fleet import CLOCK, DAY, HOUR, Fleet, opened, tally_passes

# The tests play their instants from a fixed day: the clock runs from a week after it (tests/tally_fleet.py).
pytestmark = pytest.mark.own_clock(CLOCK)

ONE = Settings(reports_partitions=1, change_source="polling")
TWO = Settings(reports_partitions=2, change_source="polling")
FOUR = Settings(reports_partitions=4, change_source="polling")
MINUTE = timedelta(minutes=1)


@pytest.mark.parametrize("later", [ONE, TWO], ids=["same layout", "next layout"])
def test_a_first_pass_rolls_up_the_days_since_its_lease_was_made_in_its_layout_or_the_next(
    mock_db: Any, later: Settings
) -> None:
    fleet = Fleet(mock_db, ONE)
    dispatch(mock_db, now=DAY, settings=ONE, send=lambda _: None)  # the tally's lease; its passes fail
    fleet.provision("b1", "u1", DAY)
    fleet.send("b1", opened(DAY + 8 * HOUR), now=DAY + 8 * HOUR)

    tally_passes(mock_db, later, DAY + timedelta(days=4, minutes=70))

    day = fleet.daily("u1", DAY)
    assert day is not None
    assert day["opened"] == 1


def test_a_pass_behind_by_days_leaves_the_days_it_has_yet_to_roll_up_to_the_next_layout(mock_db: Any) -> None:
    fleet = Fleet(mock_db, ONE)
    fleet.provision("b1", "u1", DAY)
    fleet.beat("b1", DAY + timedelta(hours=5, minutes=2))
    tally_passes(mock_db, ONE, DAY + timedelta(hours=6, minutes=10))
    for day in range(6):  # counted in their hours at once, while each day is open
        at = DAY + timedelta(days=day, hours=8)
        fleet.send("b1", opened(at), now=at)
    back = DAY + timedelta(days=6, hours=1, minutes=10)
    tally_passes(mock_db, ONE, back)  # the first pass back: its own window, and the oldest day it is behind

    for hours in range(1, 8):  # the layout changes; a pass every hour
        tally_passes(mock_db, TWO, back + hours * HOUR)

    days = [fleet.daily("u1", DAY + timedelta(days=day)) for day in range(6)]
    assert [None if d is None else d["opened"] for d in days] == [1] * 6


def test_a_first_pass_cut_short_hands_the_days_since_its_layouts_parent_was_made_on_to_the_next_layout(
    mock_db: Any,
) -> None:
    """The tally's first layout never ran; the next one took over the days since it was made, and its first pass
    was cut short (its budget spent) before it checkpointed: it released its lease, the first layout retired, and
    the days it took over are still to roll up. Those days are what it hands on to the layout after it, not only
    the days since its own leases were made: else the action of the first day reaches no daily report."""
    fleet = Fleet(mock_db, ONE)
    dispatch(mock_db, now=DAY, settings=ONE, send=lambda _: None)  # the tally's lease, which never runs
    fleet.provision("b1", "u1", DAY)
    fleet.send("b1", opened(DAY + 8 * HOUR), now=DAY + 8 * HOUR)
    two = DAY + timedelta(days=2)
    tally_passes(mock_db, TWO, two, cut_short=lambda: True)
    dispatch(mock_db, now=two + MINUTE, settings=TWO, send=lambda _: None)  # the first layout retires

    tally_passes(mock_db, FOUR, DAY + timedelta(days=4, minutes=70))

    day = fleet.daily("u1", DAY)
    assert day is not None
    assert day["opened"] == 1
