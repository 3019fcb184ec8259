"""The leases' bookkeeping that the dispatcher and its lag metric rely on (shared/feeds/leases.py, layouts.py): a
feed's lag counts its current partitions only, from when a lease was made until its first checkpoint; a tally pass under
way counts as on time only within its pacing; the tally is sent only when it is behind; a replaced partition retires
wherever it comes in the layout; and a lease that comes back keeps counting its versions, so a run of its earlier life
is fenced even when the same worker holds it again."""

import json
from datetime import timedelta
from typing import Any

import pytest

from shared.consumers.plugged import dispatch, partition_of, process_partition
from shared.feeds.layouts import ensure_leases
from shared.feeds.leases import Lease, checkpoint, claim, feed_lags, leases_to_dispatch
from shared.feeds.partitions import Partition
from shared.instants import utc_now
from shared.reports.feeds import ACTIONS_FEED, HEARTBEAT_TALLY
from shared.settings import get_settings
from shared.store import schema
from shared.store.retries import RetryPolicy
from tests.cosmos_fakes import CosmosTokens, QuietStream
from tests.reports.feeds import actions_leases
from tests.tally_fleet import CLOCK

# The tests play their instants from a fixed day: the clock runs from a week after it (tests/tally_fleet.py).
pytestmark = pytest.mark.own_clock(CLOCK)

MINUTE = timedelta(minutes=1)
HOUR = timedelta(hours=1)
POLICY = RetryPolicy(max_retries=0, base_ms=1)


def test_a_feeds_lag_counts_its_current_partitions_from_when_their_leases_were_made(mock_db: Any) -> None:
    now = utc_now()
    old, new = Partition(ACTIONS_FEED, 0, 1), Partition(ACTIONS_FEED, 0, 2)
    ensure_leases(mock_db, [(old, None)], now=now - HOUR, policy=POLICY)  # an earlier layout's, not current
    ensure_leases(mock_db, [(new, None)], now=now, policy=POLICY)

    assert feed_lags(mock_db, [new], now=now + 5 * MINUTE, policy=POLICY) == {ACTIONS_FEED.key: 300.0}


def test_a_paced_tally_pass_counts_as_on_time_only_within_its_pacing(mock_db: Any) -> None:
    now = utc_now()
    tally = Partition(HEARTBEAT_TALLY, 0, 1)
    ensure_leases(mock_db, [(tally, None)], now=now - 3 * HOUR, policy=POLICY)
    counted, due, pacing = now - 2 * HOUR, now - MINUTE, 20 * MINUTE

    def lag_of_a_pass_begun(ago: timedelta) -> float:
        token = {"start": counted, "end": counted + HOUR, "began": now - ago}
        mock_db[schema.LEASES].update_one(
            {"_id": tally.lease_id}, {"$set": {"checkpoint_time": counted, "token": token}}
        )
        lags = feed_lags(mock_db, [tally], now=now, policy=POLICY, hours_due=due, pacing=pacing)
        return lags[HEARTBEAT_TALLY.key]

    assert lag_of_a_pass_begun(pacing - MINUTE) == (due - counted - HOUR).total_seconds()  # its hour as counted
    assert lag_of_a_pass_begun(pacing) == (due - counted).total_seconds()  # late: its hour not counted yet


def test_only_the_tally_partitions_behind_the_hours_due_are_sent(mock_db: Any) -> None:
    now = utc_now()
    behind, caught_up = Partition(HEARTBEAT_TALLY, 0, 2), Partition(HEARTBEAT_TALLY, 1, 2)
    ensure_leases(mock_db, [(behind, None), (caught_up, None)], now=now - HOUR, policy=POLICY)
    due = now - MINUTE
    for partition, counted in ((behind, due - HOUR), (caught_up, due)):
        mock_db[schema.LEASES].update_one({"_id": partition.lease_id}, {"$set": {"checkpoint_time": counted}})

    sent = leases_to_dispatch(mock_db, [behind, caught_up], now=now, hold_for=MINUTE, policy=POLICY, behind=due)

    assert sent == [behind]


def test_a_split_of_the_last_partition_retires_it_once_its_children_ran(mock_db: Any) -> None:
    cosmos = CosmosTokens(mock_db, partitions=2)
    now = utc_now()
    settings = get_settings().model_copy(update={"change_source": "change_stream"})
    dispatch(cosmos, now=now, settings=settings, send=lambda _: None, on_cosmos=True)
    low, high = sorted(actions_leases(mock_db))
    cosmos.split(1)

    sent: list[str] = []
    dispatch(cosmos, now=now + MINUTE, settings=settings, send=sent.extend, on_cosmos=True)
    for partition in (partition_of(json.loads(m)) for m in sent):
        if partition.feed == ACTIONS_FEED:
            process_partition(cosmos, partition, now=now + MINUTE, settings=settings, watch=QuietStream)
    dispatch(cosmos, now=now + 2 * MINUTE, settings=settings, send=lambda _: None, on_cosmos=True)

    live = set(actions_leases(mock_db))
    assert low in live
    assert high not in live
    assert len(live) == 3


def test_a_run_of_a_leases_earlier_life_is_fenced_though_its_worker_holds_the_lease_again(mock_db: Any) -> None:
    """REPORTS_PARTITIONS 1 -> 2 -> 1: a run of the first layout, stalled past the change and back, must not save
    its position over the revived lease's, even when the same worker (one owner per worker) claimed it again."""
    now = utc_now()
    whole, halves = Partition(ACTIONS_FEED, 0, 1), [Partition(ACTIONS_FEED, i, 2) for i in range(2)]
    ensure_leases(mock_db, [(whole, None)], now=now, policy=POLICY)
    stalled = claim(mock_db, whole, "worker-a", now=now, lease_for=MINUTE, policy=POLICY)
    assert stalled is not None
    ensure_leases(mock_db, [(p, None) for p in halves], now=now + HOUR, policy=POLICY)
    mock_db[schema.LEASES].update_many({"of": 2}, {"$set": {"updated_at": now + HOUR}})  # the halves ran
    ensure_leases(mock_db, [(p, None) for p in halves], now=now + HOUR, policy=POLICY)  # the whole retires
    ensure_leases(mock_db, [(whole, None)], now=now + 2 * HOUR, policy=POLICY)  # and comes back
    again = claim(mock_db, whole, "worker-a", now=now + 2 * HOUR, lease_for=MINUTE, policy=POLICY)
    assert again is not None

    stale = Lease(token={"_data": "stale"}, checkpoint_time=now, owner="worker-a", version=stalled.version)
    saved = checkpoint(mock_db, whole, stale, source="polling", now=now + 2 * HOUR, lease_for=MINUTE, policy=POLICY)

    assert not saved
    assert again.version > stalled.version
