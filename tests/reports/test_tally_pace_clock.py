"""When a paced heartbeat tally pass reads its pages (shared/reports/tally.py: Pace), on the tally's own clock:
a pass as large as the last one reads its pages evenly over REPORTS_TALLY_SPREAD_MINUTES, one every spread/pages,
whether or not its runs end between pages; a pass with fewer pages than the spread has minutes, or of one page, is
not paced;
and a grown fleet's pages past the expected ones are read at once, even by an instance whose clock is behind.
Autoscale bills each hour's peak RU/s, so these times are what the bill follows (docs/reports.md)."""

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from shared.feeds.leases import Lease
from shared.feeds.sweeps import LAST_BEGAN
from shared.reports.tally import TallyRun, run_tally
from shared.settings import Settings
from shared.store import schema
from shared.store.partitioning import BucketRange
from tests.tally_fleet import CLOCK, DAY, HOUR, Fleet
from tests.tally_runner import POLICY, out_of_time_after

# The tests play their instants from a fixed day: the clock runs from a week after it (tests/tally_fleet.py).
pytestmark = pytest.mark.own_clock(CLOCK)

MINUTE = timedelta(minutes=1)
SPREAD_MINUTES = 10
BEGAN = DAY + 2 * HOUR + 10 * MINUTE  # the paced pass's start: it counts the hour DAY 01:00-02:00


class ClockedPartition:
    """The tally's one partition, run by run_tally on a clock that only its waits (pause) move on: what time each
    page was read, and each wait."""

    def __init__(self, db: Any, settings: Settings) -> None:
        self.db, self.settings = db, settings
        self.lease = Lease()
        self.clock = DAY
        self.page_times: list[datetime] = []
        self.waits: list[float] = []

    def run(self, now: datetime, pages: int | None = None) -> TallyRun:
        """A run starting at `now`, out of time after `pages` pages (None: never)."""
        self.clock = now

        def pause(seconds: float) -> bool:
            self.waits.append(seconds)
            self.clock += timedelta(seconds=seconds)
            return True

        def save(lease: Lease) -> bool:
            self.lease = lease
            if LAST_BEGAN not in (lease.token or {}):  # not the pass's end: a page read
                self.page_times.append(self.clock)
            return True

        _, run = run_tally(
            self.db,
            BucketRange(0, 1),
            self.lease,
            settings=self.settings,
            policy=POLICY,
            wall_clock=lambda: self.clock,
            out_of_time=out_of_time_after(pages),
            save=save,
            pause=pause,
        )
        return run


def fleet_of(db: Any, users: int, spread: int = SPREAD_MINUTES) -> tuple[Fleet, ClockedPartition]:
    """`users` users of one bottle each, heard from at DAY 00:30 and 01:30, and the tally's partition after its
    first pass at 01:10 (unpaced: the last pass's size is not known), which counted the hour DAY 00:00-01:00."""
    config = Settings(reports_page_size=1, reports_tally_spread_minutes=spread)
    fleet = Fleet(db, config)
    for n in range(users):
        fleet.provision(f"b{n:02d}", f"user{n:02d}", DAY)
        fleet.beat(f"b{n:02d}", DAY + 30 * MINUTE)
    partition = ClockedPartition(db, config)
    first = partition.run(DAY + HOUR + 10 * MINUTE)
    assert (first.pages, first.caught_up, partition.waits) == (users, True, [])
    for n in range(users):
        fleet.beat(f"b{n:02d}", DAY + HOUR + 30 * MINUTE)
    partition.page_times.clear()
    return fleet, partition


def every_user_counted(fleet: Fleet, users: int) -> bool:
    return all(fleet.hourly(f"user{n:02d}") == {DAY: 1, DAY + HOUR: 1} for n in range(users))


def test_a_pass_as_large_as_the_last_reads_one_page_every_spread_over_pages(mock_db: Any) -> None:
    """As many pages as the spread has minutes: the smallest pass that is paced; a page a minute, the last at
    the spread's end."""
    fleet, partition = fleet_of(mock_db, SPREAD_MINUTES)

    run = partition.run(BEGAN)

    assert partition.page_times == [BEGAN + k * MINUTE for k in range(1, SPREAD_MINUTES + 1)]
    assert run.caught_up
    assert every_user_counted(fleet, SPREAD_MINUTES)


def test_a_paced_pass_carried_on_by_a_next_run_keeps_its_pages_evenly_spread(mock_db: Any) -> None:
    """A run that ends after three pages (its budget spent): the next one, starting 20 s after the third page,
    reads the fourth when it was due, a page interval after the third, not at once."""
    users = 12
    fleet, partition = fleet_of(mock_db, users)
    interval = SPREAD_MINUTES * MINUTE / users

    assert not partition.run(BEGAN, pages=3).caught_up
    assert partition.run(partition.page_times[-1] + timedelta(seconds=20)).caught_up

    assert partition.page_times == [BEGAN + k * interval for k in range(1, users + 1)]
    assert every_user_counted(fleet, users)


def test_a_grown_fleets_page_past_the_expected_ones_is_read_at_once_by_a_run_whose_clock_is_behind(
    mock_db: Any,
) -> None:
    """A user added since the last pass: the pass has a page more than it expects. Its run read the expected
    pages up to the spread's end and ran out of time; the next run, on an instance whose clock is a minute behind
    (before the spread's end by its clock), reads the page left at once and ends the pass."""
    fleet, partition = fleet_of(mock_db, SPREAD_MINUTES)
    fleet.provision("b99", "user99", DAY)
    fleet.beat("b99", DAY + HOUR + 30 * MINUTE)
    end_of_spread = BEGAN + SPREAD_MINUTES * MINUTE
    partition.run(BEGAN, pages=SPREAD_MINUTES)
    assert partition.page_times[-1] == end_of_spread
    waits = len(partition.waits)

    last = partition.run(end_of_spread - MINUTE)

    assert (last.pages, last.caught_up) == (1, True)
    assert len(partition.waits) == waits
    assert fleet.hourly("user99") == {DAY + HOUR: 1}


def test_a_pass_with_fewer_pages_than_the_spread_has_minutes_is_read_at_once(mock_db: Any) -> None:
    """No burst worth spreading: a pass of six pages with a ten-minute spread waits for none."""
    fleet, partition = fleet_of(mock_db, 6)

    run = partition.run(BEGAN)

    assert (run.pages, run.caught_up, partition.waits) == (6, True, [])
    assert partition.page_times == [BEGAN] * 6
    assert every_user_counted(fleet, 6)


# Two pages: the second is read as the next hour comes due, so the run ends behind (not caught up).
@pytest.mark.parametrize(("users", "waits", "caught_up"), [(1, [], True), (2, [15.0, 15.0], False)])
def test_a_one_page_pass_begun_in_the_last_minute_before_the_next_hour_is_due_is_read_at_once(
    mock_db: Any, users: int, waits: list[float], caught_up: bool
) -> None:
    """Half a minute before the next hour is due (03:10), the spread left is 30 s, fewer minutes than any page
    count: a one-page pass has nothing to spread and reads its page at once, not after waiting the 30 s out (which
    a run with less budget left could not, ending with nothing read). Two pages still share the 30 s."""
    started = BEGAN + HOUR - timedelta(seconds=30)
    fleet, partition = fleet_of(mock_db, users)

    run = partition.run(started)

    assert (run.pages, run.caught_up, partition.waits) == (users, caught_up, waits)
    assert partition.page_times[-1] == started + timedelta(seconds=sum(waits))
    assert every_user_counted(fleet, users)


def test_a_run_that_starts_after_its_next_page_was_due_reads_it_at_once_and_spreads_the_rest(mock_db: Any) -> None:
    """A run that ended after three pages, and a next run that starts 20 s after the fourth was due (runs are
    started a minute apart): the fourth page at once, the eight left evenly over what is left of the spread."""
    users = 12
    fleet, partition = fleet_of(mock_db, users)
    interval = SPREAD_MINUTES * MINUTE / users
    partition.run(BEGAN, pages=3)
    started = BEGAN + 4 * interval + timedelta(seconds=20)

    assert partition.run(started).caught_up

    rest = (BEGAN + SPREAD_MINUTES * MINUTE - started) / (users - 4)
    assert partition.page_times[3:] == [started + k * rest for k in range(users - 3)]
    assert every_user_counted(fleet, users)


def test_each_pages_hourly_reports_are_stamped_when_the_page_is_written_not_when_the_run_began(mock_db: Any) -> None:
    """A paced run takes most of the spread: a reader polling the reports by `updated_at` from where it last read
    must find each page's reports dated when they were written, not back at the run's start."""
    _, partition = fleet_of(mock_db, SPREAD_MINUTES)

    partition.run(BEGAN)

    found = mock_db[schema.USER_HOURLY_REPORTS].find({"hour": DAY + HOUR}, {"updated_at": 1})
    stamps = sorted(r["updated_at"].replace(tzinfo=UTC) for r in found)  # a user a page, in the sweep's order
    assert stamps == partition.page_times == [BEGAN + k * MINUTE for k in range(1, SPREAD_MINUTES + 1)]


def test_a_pass_spread_over_the_hour_ends_when_the_next_hour_is_due_and_the_next_pass_keeps_to_the_clock(
    mock_db: Any,
) -> None:
    """REPORTS_TALLY_SPREAD_MINUTES=60: a pass's pages spread over the hour from when it began, but it ends when the
    next hour is due (its due time, an hour after its own: 03:10), not an hour after a late start; the next pass,
    begun half a minute after that, ends at the next due time again. So the passes do not drift later hour after
    hour (to a pass that counts two hours at once), and each hour is counted exactly once."""
    users = 60
    fleet, partition = fleet_of(mock_db, users, spread=60)
    started = BEGAN + 90 * timedelta(seconds=1)  # the run began a minute and a half after the hour was due

    run = partition.run(started)

    assert (run.pages, run.caught_up) == (users, False)  # done as the next hour comes due
    assert partition.page_times[-1] == BEGAN + HOUR  # 03:10, when DAY 02:00-03:00 is due
    interval = (BEGAN + HOUR - started) / users
    assert partition.page_times == [started + k * interval for k in range(1, users + 1)]
    assert every_user_counted(fleet, users)
    for n in range(users):
        fleet.beat(f"b{n:02d}", DAY + 2 * HOUR + 30 * MINUTE)
    partition.page_times.clear()

    run = partition.run(BEGAN + HOUR + 30 * timedelta(seconds=1))

    assert (run.pages, run.caught_up) == (users, False)
    assert partition.page_times[-1] == BEGAN + 2 * HOUR
    assert all(fleet.hourly(f"user{n:02d}") == {DAY: 1, DAY + HOUR: 1, DAY + 2 * HOUR: 1} for n in range(users))


def test_the_spread_may_be_the_whole_hour_and_no_more() -> None:
    assert Settings(reports_tally_spread_minutes=60).reports_tally_spread_minutes == 60
    with pytest.raises(ValidationError, match="reports_tally_spread_minutes"):
        Settings(reports_tally_spread_minutes=61)
