"""The report tests' shared fixtures."""

from collections.abc import Iterator
from datetime import timedelta

import pytest

from shared.instants import set_clock
from tests.reports.documents import DAY
from tests.wall_clock import PlacedClock


@pytest.fixture
def clock_after_day() -> Iterator[None]:
    """These tests store reports of a fixed DAY, and mongomock applies retention (the TTL indexes) by the app's
    clock: the clock runs in real time from two days after DAY, so that they keep whenever the suite runs. It reads
    no wall clock, so the instant the suite runs at cannot matter to them (tests/wall_clock.py)."""
    set_clock(PlacedClock(DAY + timedelta(days=2)))
    yield
    set_clock(None)
