"""What a heartbeat tally run says it did (shared/reports/tally.py: TallyRun), which the worker's invocation log
reports (aggregate_report_partition: pages, changes, hourly_written, daily_written): the pages and heartbeat
documents it read, and the hourly and daily reports it wrote, none where it wrote none; and the worker's run of
the tally's partitions, which carries them."""

import json
from datetime import datetime, timedelta
from typing import Any

import pytest

from shared.consumers.plugged import dispatch, partition_of, process_partition
from shared.feeds.consumers import PartitionRun
from shared.feeds.leases import Lease
from shared.reports.feeds import HEARTBEAT_TALLY
from shared.reports.tally import TallyRun, run_tally
from shared.settings import Settings
from shared.store.partitioning import BucketRange
from tests.tally_fleet import CLOCK, DAY, HOUR, Fleet, ticking
from tests.tally_runner import POLICY

# The tests play their instants from a fixed day: the clock runs from a week after it (tests/tally_fleet.py).
pytestmark = pytest.mark.own_clock(CLOCK)

MINUTE = timedelta(minutes=1)
COUNTS = ("pages", "changes", "hourly_written", "daily_written")  # a PartitionRun's, as its log line gives them


def test_a_tally_run_counts_the_pages_documents_and_reports_it_wrote_and_no_daily_report_between_blocks(
    mock_db: Any,
) -> None:
    config = Settings(reports_page_size=1, daily_rollup_staggered=False)
    fleet = Fleet(mock_db, config)
    for user_id in ("u1", "u2"):
        fleet.provision(f"b-{user_id}", user_id, DAY)
    lease = Lease()

    def run(now: datetime) -> TallyRun:
        nonlocal lease
        lease, done = run_tally(
            mock_db,
            BucketRange(0, 1),
            lease,
            settings=config,
            policy=POLICY,
            wall_clock=lambda: now,
            out_of_time=lambda: False,
            save=lambda saved: True,
        )
        return done

    run(DAY + 10 * MINUTE)  # the first pass: nothing heard yet
    counts = []
    for hour in range(1, 7):
        for user_id in ("u1", "u2"):
            fleet.beat(f"b-{user_id}", DAY + (hour - 1) * HOUR + 20 * MINUTE)
        done = run(DAY + hour * HOUR + 10 * MINUTE)
        counts.append((done.pages, done.documents, done.hourly_written, done.daily_written))

    # Each pass: two pages of one document, each user's last hour; the pass at 06:10 rolls both days up.
    assert counts == [(2, 2, 2, 0)] * 5 + [(2, 2, 2, 2)]


def test_a_tally_run_with_no_hour_due_reads_nothing_and_says_it_is_caught_up(mock_db: Any) -> None:
    """Between the hours (the dispatcher sends the tally's work every few minutes): no page, caught up."""
    config = Settings()
    fleet = Fleet(mock_db, config)
    fleet.provision("b1", "u1", DAY)
    assert fleet.tally(DAY + HOUR + 10 * MINUTE)

    _, done = run_tally(
        mock_db,
        BucketRange(0, 1),
        fleet.partition.lease,
        settings=config,
        policy=POLICY,
        wall_clock=lambda: DAY + HOUR + 40 * MINUTE,
        out_of_time=lambda: False,
        save=lambda saved: True,
    )

    assert (done.pages, done.caught_up) == (0, True)


def test_a_tally_partitions_worker_run_reports_the_counts_of_its_pass(mock_db: Any) -> None:
    """The worker's run (the invocation's log line of aggregate_report_partition) carries the tally's counts: the
    same passes as above, dispatched and run as the queue trigger runs them, say what they read and wrote, summed
    over the tally's partitions."""
    config = Settings(reports_page_size=1, daily_rollup_staggered=False)
    fleet = Fleet(mock_db, config)
    for user_id in ("u1", "u2"):
        fleet.provision(f"b-{user_id}", user_id, DAY)

    def runs(now: datetime) -> list[PartitionRun]:
        sent: list[str] = []
        dispatch(mock_db, now=now, settings=config, send=sent.extend)
        tally = [p for p in (partition_of(json.loads(body)) for body in sent) if p.feed == HEARTBEAT_TALLY]
        return [process_partition(mock_db, p, now=now, settings=config, clock=ticking(1)) for p in tally]

    runs(DAY + 10 * MINUTE)  # the first pass: nothing heard yet
    counts = []
    for hour in range(1, 7):
        for user_id in ("u1", "u2"):
            fleet.beat(f"b-{user_id}", DAY + (hour - 1) * HOUR + 20 * MINUTE)
        done = runs(DAY + hour * HOUR + 10 * MINUTE)
        assert done
        assert all(run.caught_up for run in done)
        counts.append(tuple(sum(getattr(run, count) for run in done) for count in COUNTS))

    assert counts == [(2, 2, 2, 0)] * 5 + [(2, 2, 2, 2)]
