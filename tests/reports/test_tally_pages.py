"""The heartbeat tally's sweep of a partition a page of users at a time (shared/reports/tally.py: UserPages), in
(user bucket, user_id) order: users who share a bucket are each reached, one page after another."""

from datetime import timedelta
from typing import Any

from shared.settings import Settings
from shared.store.partitioning import bucket_of
from tests.tally_fleet import DAY, HOUR, Fleet

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
