"""The late-dose check re-plays an every-hours count from the doses a bottle keeps (the newest DOSE_HISTORY). Once
that history is full, the doses before it are gone: the count must start at the oldest dose kept, not at the
schedule's start, or the slots those forgotten doses satisfied would look late."""

from collections.abc import Iterator
from typing import Any

import pytest

from tests.checking import World
from tests.report_client import set_setting
from tests.test_checks_late_doses import DAY, h


@pytest.fixture
def world(mock_db: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    set_setting(monkeypatch, "DOSE_HISTORY", "2")
    bench = World(mock_db, DAY + h(5))
    yield bench
    bench.stop()


def test_doses_on_time_are_never_late_though_the_checks_ran_only_after_the_history_rolled_over(
    world: World,
) -> None:
    start = world.now
    world.provision(schedule={"every_hours": 8})
    for hours in (8, 16, 24):  # each slot's dose on time; the bottle keeps only the last two
        world.at(start + h(hours)).dose()

    assert world.at(start + h(25)).check("late_dose") == []  # the checks were down until now

    assert world.notifications("late_dose") == []
    assert world.status()["next_dose_due"] == "2026-05-05T13:00:00.000Z"  # 8 hours after the last dose
