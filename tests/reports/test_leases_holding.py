"""A lease while its worker holds it, and the work messages that name partitions (shared/feeds/leases.py,
partitions.py): a checkpoint renews the lease (no dispatch sends the partition to a second worker while the first keeps
saving) and records when and by which source it was saved (docs/architecture.md, `leases`); a work message names exactly
the partition it was made for, and a malformed one is refused, saying what is wrong."""

from datetime import timedelta
from typing import Any

import pytest

from shared.consumers.plugged import partition_of
from shared.feeds.layouts import ensure_leases
from shared.feeds.leases import Lease, checkpoint, claim, leases_to_dispatch
from shared.feeds.partitions import Partition, retired
from shared.instants import utc_now
from shared.reports.feeds import ACTIONS_FEED, HEARTBEAT_TALLY
from shared.store import schema
from shared.store.retries import RetryPolicy

MINUTE = timedelta(minutes=1)
POLICY = RetryPolicy(max_retries=0, base_ms=1)
LEASE_FOR = 5 * MINUTE


def test_a_worker_that_checkpoints_keeps_its_lease_past_its_first_term_and_the_lease_says_how_it_was_read(
    mock_db: Any,
) -> None:
    partition = Partition(ACTIONS_FEED, 0, 2)
    now = utc_now()
    ensure_leases(mock_db, [(partition, None)], now=now, policy=POLICY)
    held = claim(mock_db, partition, "worker-a", now=now, lease_for=LEASE_FOR, policy=POLICY)
    assert held is not None
    saved_at = now + LEASE_FOR - MINUTE
    position = Lease(checkpoint_time=now, owner="worker-a", version=held.version)

    assert checkpoint(mock_db, partition, position, source="polling", now=saved_at, lease_for=LEASE_FOR, policy=POLICY)

    later = now + LEASE_FOR + MINUTE  # the first term is over; the checkpoint renewed it
    assert leases_to_dispatch(mock_db, [partition], now=later, hold_for=MINUTE, policy=POLICY) == []
    assert claim(mock_db, partition, "worker-b", now=later, lease_for=LEASE_FOR, policy=POLICY) is None
    lease = mock_db[schema.LEASES].find_one({"_id": partition.lease_id})
    assert (lease["source"], lease["updated_at"], lease["expires_at"]) == ("polling", saved_at, saved_at + LEASE_FOR)


@pytest.mark.parametrize(
    "partition",
    [
        Partition(ACTIONS_FEED, 2, 3, cosmos=True, feed_range=("2AAA", "FF")),
        Partition(ACTIONS_FEED, 1, 4),
        Partition(HEARTBEAT_TALLY, 3, 4),
    ],
)
def test_a_work_message_names_the_partition_it_was_made_for(partition: Partition) -> None:
    assert partition_of(partition.message()) == partition


@pytest.mark.parametrize(
    ("message", "why"),
    [
        ({"partition": 0, "of": "2", "cosmos": False}, "not a report partition's work message"),
        ({"partition": "0", "of": 2, "cosmos": False}, "not a report partition's work message"),
        ({"partition": 0, "of": 2, "cosmos": "false"}, "not a report partition's work message"),
        ({"partition": 2, "of": 2, "cosmos": False}, "partition 2 of 2 does not exist"),
        ({"partition": 2, "of": 2, "cosmos": True, "range": ["", "FF"]}, "partition 2 of 2 does not exist"),
    ],
)
def test_a_malformed_work_message_is_refused_saying_what_is_wrong(message: dict[str, Any], why: str) -> None:
    with pytest.raises(ValueError, match=why):
        partition_of({"feed": ACTIONS_FEED.key, **message})


@pytest.mark.parametrize(
    ("message", "dropped"),
    [
        ({"feed": ACTIONS_FEED.key, "partition": 0, "of": 3, "cosmos": True}, True),
        ({"feed": schema.BOTTLE_HEARTBEATS, "partition": 0, "of": 3, "cosmos": False}, True),
        (Partition(ACTIONS_FEED, 2, 3, cosmos=True, feed_range=("2AAA", "FF")).message(), False),
        (Partition(ACTIONS_FEED, 1, 4).message(), False),
    ],
    ids=["cosmos before feed ranges", "retired feed", "cosmos by feed range", "buckets"],
)
def test_the_worker_drops_the_work_messages_of_earlier_layouts_and_only_those(
    message: dict[str, Any], dropped: bool
) -> None:
    """A Cosmos DB partition named by its place in the token list (the code before feed ranges), or a feed of an
    earlier layout, queued before an upgrade: the worker drops it (functions/reports.py) rather than fail it into
    the poison queue. A partition named by its feed range, or a bucket range, is run."""
    assert retired(message) is dropped


def test_a_partition_is_cosmos_exactly_when_it_has_a_feed_range() -> None:
    why = "^a Cosmos DB partition is named by its feed range, and only it has one$"
    with pytest.raises(ValueError, match=why):
        Partition(ACTIONS_FEED, 0, 2, cosmos=True)
    with pytest.raises(ValueError, match=why):
        Partition(ACTIONS_FEED, 0, 2, feed_range=("", "FF"))
