"""Clocks the tests place by hand: a monotonic clock that moves only when the code under test sleeps (FakeTime, which
the report feeds' and the checks' tests give the code they pace), the app's clock stopped for a moment
(clock_stopped_at), and the fixed instant of a test the instant cannot matter to (QUIET_HOUR)."""

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

from shared import instants

# A fixed instant for the clock of a test the instant cannot matter to (its `own_clock` mark, tests/wall_clock.py):
# mid-hour, mid-block, mid-month, so that no hour, day or daily roll-up block ends in the 25 minutes after it.
QUIET_HOUR = datetime(2027, 1, 13, 14, 30, tzinfo=UTC)


class FakeTime:
    """A monotonic clock that moves only when the code under test sleeps (a back-off, a paced wait) or a test
    says so."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


@contextmanager
def clock_stopped_at(at: datetime) -> Iterator[None]:
    """The app's clock stopped at `at` within, then the clock it ran before: the test's own (its `own_clock` mark),
    or the wall clock. Not set_clock(None), which would leave a test of its own clock on the wall clock."""
    with instants.clock_restored():
        instants.set_clock(lambda: at)
        yield
