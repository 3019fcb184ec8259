"""The late-dose check re-plays an every-hours count from the doses a bottle keeps (the newest DOSE_HISTORY). Once
that history is full, the doses before it are gone: the count must start at the oldest dose kept, not at the
schedule's start, or the slots those forgotten doses satisfied would look late."""

from collections.abc import Iterator
from typing import Any

import pytest

from tests.checking import World
from tests.notifications.test_late_doses import DAY, h
from tests.report_client import set_setting


@pytest.fixture
def world(mock_db: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    set_setting(monkeypatch, "DOSE_HISTORY", "2")
    bench = World(mock_db, DAY + h(5))
    yield bench
    bench.stop()


def test_a_buffered_dose_older_than_the_history_kept_makes_no_slot_late(world: World) -> None:
    """Every slot's dose on time; the first one (+8 h) was buffered and arrives only after two newer ones, when
    the bottle keeps just those two: the check reviews from that dose (the earliest that arrived), finds it
    gone from the history, and counts from the oldest dose kept."""
    start = world.now
    world.provision(schedule={"every_hours": 8})
    for hours in (16, 24):
        world.at(start + h(hours)).dose()
    world.at(start + h(25)).dose(at=start + h(8))  # uploaded at +25 h: older than both doses kept

    assert world.after(minutes=30).check("late_dose") == []  # the checks were down until now

    assert world.notifications("late_dose") == []
    assert world.status()["next_dose_due"] == "2026-05-05T13:00:00.000Z"  # 8 hours after the last dose
