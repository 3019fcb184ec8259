"""The heartbeat tally's sweep of a partition a page of users at a time (shared/reports/tally.py: UserPages), in
(user bucket, user_id) order: users who share a bucket are each reached, one page after another."""

from datetime import timedelta
from typing import Any

import pytest

from shared.feeds.leases import Lease
from shared.reports.tally import run_tally
from shared.settings import Settings
from shared.store.partitioning import BucketRange, bucket_of
from tests.tally_fleet import CLOCK, DAY, HOUR, Fleet, user_in
from tests.tally_runner import POLICY

# The tests play their instants from a fixed day: the clock runs from a week after it (tests/tally_fleet.py).
pytestmark = pytest.mark.own_clock(CLOCK)

MINUTE = timedelta(minutes=1)


def test_every_user_of_a_bucket_shared_by_several_is_counted_a_page_each(mock_db: Any) -> None:
    by_bucket: dict[int, list[str]] = {}
    for n in range(100_000):
        users = by_bucket.setdefault(bucket_of(f"user{n}"), [])
        users.append(f"user{n}")
        if len(users) == 3:
            break
    fleet = Fleet(mock_db, Settings(reports_page_size=1))
    for user_id in users:
        fleet.provision(f"b-{user_id}", user_id, DAY)
        fleet.beat(f"b-{user_id}", DAY + 20 * MINUTE)

    assert fleet.tally(DAY + HOUR + 10 * MINUTE)

    assert {user_id: fleet.hourly(user_id) for user_id in users} == {user_id: {DAY: 1} for user_id in users}


@pytest.mark.parametrize("page_size", [1, 100])
def test_a_partition_s_pass_reads_only_its_own_buckets_not_the_next_partition_s_first(
    mock_db: Any, page_size: int
) -> None:
    """Partition 0 of 2 holds the buckets [0, 512): a user in its last bucket, 511, is read, and one in 512, the next
    partition's first, is not, whether the pass finds it by its first query (the partition's range, `page_size`
    100) or by the query after a user (`page_size` 1). Reading it would count it again to the same reports, so only
    the documents read show it (the invocation's `changes`: what the pass costs)."""
    fleet = Fleet(mock_db, Settings(reports_page_size=page_size))
    ours = [user_in(0, 1), user_in(300, 301), user_in(511, 512)]
    theirs = [user_in(512, 513), user_in(513, 514)]
    for user_id in ours + theirs:
        fleet.provision(f"b-{user_id}", user_id, DAY)
        fleet.beat(f"b-{user_id}", DAY + 20 * MINUTE)
    now = DAY + HOUR + 10 * MINUTE

    _, first = run_tally(
        mock_db,
        BucketRange(0, 2),
        Lease(),
        settings=fleet.settings,
        policy=POLICY,
        wall_clock=lambda: now,
        out_of_time=lambda: False,
        save=lambda saved: True,
    )
    _, second = run_tally(
        mock_db,
        BucketRange(1, 2),
        Lease(),
        settings=fleet.settings,
        policy=POLICY,
        wall_clock=lambda: now,
        out_of_time=lambda: False,
        save=lambda saved: True,
    )

    assert (first.caught_up, first.documents, second.documents) == (True, len(ours), len(theirs))
    assert {user_id: fleet.hourly(user_id) for user_id in ours + theirs} == {u: {DAY: 1} for u in ours + theirs}
