"""The report tests' shared fixtures."""

from collections.abc import Iterator
from datetime import timedelta

import pytest

from shared import instants
from shared.instants import set_clock
from tests.reports.documents import DAY


@pytest.fixture
def clock_after_day() -> Iterator[None]:
    """These tests store reports of a fixed DAY, and mongomock applies retention (the TTL indexes) by the app's
    clock: the clock runs from two days after DAY, so that they keep whenever the suite runs."""
    wall = instants._wall_clock
    offset = DAY + timedelta(days=2) - wall()
    set_clock(lambda: wall() + offset)
    yield
    set_clock(None)
