"""The tally's worker keeps to its time budget (REPORTS_TIME_BUDGET_SECONDS): a paced pass never waits past it for
its next page, and an unpaced pass whose pages take longer than the budget stops between pages and leaves the rest
to the next run. The worker's clock here moves with its waits, and with the time each page takes."""

from datetime import timedelta
from typing import Any

import pytest

from shared.feeds.consumers import PartitionRun
from tests.reports.paced_tally import USERS, Worker, fleet, hourly, settings
from tests.tally_fleet import CLOCK, DAY

# The tests play their instants from a fixed day: the clock runs from a week after it (tests/tally_fleet.py).
pytestmark = pytest.mark.own_clock(CLOCK)

BUDGET = 50.0  # not a multiple of the pace's 15 s a page: a wait past the budget would show


def test_a_paced_run_never_waits_past_its_budget_for_the_next_page(mock_db: Any) -> None:
    config = settings().model_copy(update={"reports_time_budget_seconds": BUDGET})
    fleet(mock_db, config, hours=2)
    worker = Worker(mock_db, config)
    worker.pass_from(DAY + timedelta(hours=1, minutes=10))  # unpaced: the pass's size is not known yet
    ended_at: list[float] = []
    start = DAY + timedelta(hours=2, minutes=10)

    for minute in range(30):
        run = worker.run(start + timedelta(minutes=minute))
        ended_at.append(worker.elapsed)
        if run.caught_up:
            break

    assert run.caught_up
    assert len(ended_at) > 3  # paced over several runs
    assert max(ended_at) <= BUDGET, ended_at  # each run ended by its budget, not after a wait past it


class SlowPages(Worker):
    """Every look at the clock finds 4 s gone: the pages themselves take time."""

    def clock(self) -> float:
        self.elapsed += 4.0
        return self.elapsed


def test_an_unpaced_pass_longer_than_the_budget_stops_between_pages_and_the_next_run_carries_on(
    mock_db: Any,
) -> None:
    config = settings(spread=timedelta(0))
    fleet(mock_db, config, hours=1)
    worker = SlowPages(mock_db, config)

    runs: list[PartitionRun] = worker.pass_from(DAY + timedelta(hours=1, minutes=10))

    assert 0 < runs[0].pages < USERS  # the first run stopped at its budget
    assert not runs[0].caught_up
    assert runs[-1].caught_up
    assert sum(run.pages for run in runs) == USERS
    assert hourly(mock_db) == {(f"user{n:02d}", DAY): 2 for n in range(USERS)}
