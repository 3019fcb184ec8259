"""The upgrade over the leases the code before feed ranges left on MongoDB (shared/feeds/layouts.py): bucket
leases `reports:<feed>:buckets:<index>/<count>` without `kind` or `range`, every layout it ever ran still live.
A new REPORTS_PARTITIONS layout must start each range from the legacy leases over that range in the layout that
ran last, retire the earlier layouts at once, and retire the last one once the new leases have run."""

import json
from datetime import datetime, timedelta
from typing import Any

import pytest

from shared.consumers.plugged import dispatch, partition_of, process_partition
from shared.feeds.partitions import Partition
from shared.instants import utc_now
from shared.reports.feeds import ACTIONS_FEED, HEARTBEAT_TALLY
from shared.settings import Settings
from shared.store import schema
from tests.cosmos_fakes import CosmosTokens

MINUTE = timedelta(minutes=1)
HOUR = timedelta(hours=1)
DAY = timedelta(days=1)
FOUR = Settings(reports_partitions=4, change_source="polling")
ACTIVITY = ("created_at", "claimed_at", "updated_at", "released_at")


def legacy_lease(
    partition: int,
    of: int,
    checkpoint_time: datetime,
    feed: str = ACTIONS_FEED.key,
    kind: str = "buckets",
    **times: datetime,
) -> dict[str, Any]:
    """A lease (of the actions feed unless told) as the code before feed ranges wrote it: no kind, range or
    retired_at; `cosmos` in its id for a Cosmos DB physical partition (by its place in the token list)."""
    return {
        "_id": f"reports:{feed}:{kind}:{partition}/{of}",
        "feed": feed,
        "partition": partition,
        "of": of,
        "start_token": None,
        "token": None,
        "checkpoint_time": checkpoint_time,
        "owner": None,
        "expires_at": None,
        "version": 2,
        "dispatched_until": None,
        **times,
    }


def all_times(at: datetime) -> dict[str, datetime]:
    return dict.fromkeys(ACTIVITY, at)


def dispatch_four(db: Any, now: datetime) -> list[Partition]:
    """A dispatch of four bucket partitions per feed; the actions partitions it sent."""
    sent: list[str] = []
    dispatch(db, now=now, settings=FOUR, send=sent.extend, on_cosmos=False)
    return [p for p in (partition_of(json.loads(m)) for m in sent) if p.feed == ACTIONS_FEED]


def retired_at(db: Any, partition: int, of: int, feed: str = ACTIONS_FEED.key) -> datetime | None:
    """When a legacy lease was retired (None: it is live)."""
    return lease(db, legacy_lease(partition, of, utc_now(), feed)["_id"]).get("retired_at")


def lease(db: Any, lease_id: str) -> dict[str, Any]:
    found = db[schema.LEASES].find_one({"_id": lease_id})
    assert found is not None, lease_id
    return dict(found)


def new_checkpoints(db: Any) -> list[datetime | None]:
    return [lease(db, Partition(ACTIONS_FEED, i, 4).lease_id)["checkpoint_time"] for i in range(4)]


def test_a_new_partition_count_starts_each_range_from_the_legacy_leases_over_it(mock_db: Any) -> None:
    """Legacy layout 1 froze a month ago; layout 2 ran until lately, its halves at different positions. Each new
    quarter starts from the half it lies in: from the oldest of all (or of the frozen layout) it re-reads far more,
    and a legacy lease whose range is not known would be every new lease's parent. The tally's one legacy lease,
    the latest to run, is its own feed's layout: it neither keeps nor retires the actions' layouts."""
    now = utc_now()
    frozen, low_half, high_half = now - 30 * DAY, now - 40 * MINUTE, now - 10 * MINUTE
    mock_db[schema.LEASES].insert_many(
        [
            legacy_lease(0, 1, frozen, **all_times(frozen)),
            legacy_lease(0, 2, low_half, **all_times(low_half)),
            legacy_lease(1, 2, high_half, **all_times(high_half)),
            legacy_lease(0, 1, now - 5 * MINUTE, HEARTBEAT_TALLY.key, **all_times(now - 5 * MINUTE)),
        ]
    )

    sent = dispatch_four(mock_db, now)

    assert new_checkpoints(mock_db) == [low_half, low_half, high_half, high_half]
    assert retired_at(mock_db, 0, 1) == now  # an earlier layout: at once
    assert [retired_at(mock_db, i, 2) for i in range(2)] == [None, None]
    assert retired_at(mock_db, 0, 1, HEARTBEAT_TALLY.key) is None

    for partition in sent:  # the new leases run once (nothing to read), then the last legacy layout retires
        assert process_partition(mock_db, partition, now=now + MINUTE, settings=FOUR).claimed
    dispatch_four(mock_db, now + 2 * MINUTE)

    assert [retired_at(mock_db, i, 2) for i in range(2)] == [now + 2 * MINUTE] * 2


@pytest.mark.parametrize("latest", ACTIVITY)
def test_the_legacy_layout_that_stays_is_the_one_last_made_claimed_checkpointed_or_released(
    mock_db: Any, latest: str
) -> None:
    """Of two legacy layouts, the one whose leases were last active in any way (made, claimed, checkpointed or
    released) started from the other and stays a parent; the other retires at once."""
    now = utc_now()
    older, recent = now - 3 * HOUR, now - 10 * MINUTE
    mock_db[schema.LEASES].insert_many(
        [
            legacy_lease(0, 1, now - 50 * MINUTE, **all_times(now - 2 * HOUR)),
            *(legacy_lease(i, 2, now - 40 * MINUTE, **{**all_times(older), latest: recent}) for i in range(2)),
        ]
    )

    dispatch_four(mock_db, now)

    assert new_checkpoints(mock_db) == [now - 40 * MINUTE] * 4
    assert retired_at(mock_db, 0, 1) == now
    assert [retired_at(mock_db, i, 2) for i in range(2)] == [None, None]


@pytest.mark.parametrize("frozen_count", [4, 2], ids=["other count", "same count as the partitions"])
def test_on_cosmos_a_bucket_layout_the_old_code_fell_back_to_is_an_earlier_layout_too(
    mock_db: Any, frozen_count: int
) -> None:
    """The code before ranges read a Cosmos DB feed by bucket ranges whenever GetChangeStreamTokens gave no tokens
    (and its first versions always did): such a bucket layout, frozen a month ago, is as much an earlier layout as
    a frozen physical-partition one. Kept live beside the physical partitions' layout that ran since, it would be
    every new feed-range lease's parent (another kind: it read the whole key space), and each would re-read the
    month from its frozen checkpoint. The legacy leases of the physical partitions carry no kind, only `cosmos` in
    their id tells them from the fallback's bucket leases: a frozen bucket layout of as many partitions is still an
    earlier layout, not one layout with them."""
    now = utc_now()
    frozen, lately = now - 30 * DAY, now - 40 * MINUTE
    mock_db[schema.LEASES].insert_many(
        [
            *(legacy_lease(i, frozen_count, frozen, **all_times(frozen)) for i in range(frozen_count)),
            *(legacy_lease(i, 2, lately, kind="cosmos", **all_times(lately)) for i in range(2)),
        ]
    )
    streams = Settings(reports_partitions=4, change_source="change_stream")

    dispatch(CosmosTokens(mock_db, partitions=2), now=now, settings=streams, send=lambda _: None, on_cosmos=True)

    ranges = mock_db[schema.LEASES].find({"feed": ACTIONS_FEED.key, "range": {"$exists": True}})
    assert [doc["checkpoint_time"] for doc in ranges] == [lately, lately]
    assert [retired_at(mock_db, i, frozen_count) for i in range(frozen_count)] == [now] * frozen_count
