"""The report feeds' partitioned processor: the dispatcher and its leases, workers claiming, checkpointing and
releasing under a fencing version, and Cosmos DB's change-stream semantics, each with a fake that behaves as
Cosmos DB's documentation describes (a resume token per server batch, empty pages when throttled, no
`operationType`, one token per physical partition from `GetChangeStreamTokens`, splits)."""

import json
import threading
import time
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import pytest
from pymongo.errors import AutoReconnect, OperationFailure

from shared import instants
from shared.consumers.plugged import dispatch, partition_of, process_partition
from shared.feeds import worker as partition_worker
from shared.feeds.changes import THROTTLED_RETRIES
from shared.feeds.leases import Lease, checkpoint, claim, release
from shared.feeds.partitions import Partition
from shared.feeds.sources import ChangeStreamSource
from shared.instants import utc_now
from shared.reports import aggregation
from shared.reports import consumers as report_consumers
from shared.reports.feeds import ACTIONS_FEED, HEARTBEAT_TALLY, REPORT_FEEDS
from shared.settings import get_settings
from shared.store import schema
from shared.store.cosmos import feed_range
from shared.store.partitioning import BUCKETS, BucketRange, bucket_of
from shared.store.retries import RetryPolicy, StoreUnavailable
from tests.api import ago, heartbeat, opened, post_events, provisioned
from tests.cosmos_fakes import CosmosTokens, throttled
from tests.fake_time import FakeTime
from tests.report_client import aggregate, clear_reports, run_round, set_setting, stored_reports
from tests.reports.feeds import (
    MINUTE,
    CosmosStream,
    ResumedStream,
    a_run_out_of_budget_after_a_full_page,
    actions_partition_with_token,
    change,
    run_on_stream,
    sent_by_dispatch,
    stored,
)

POLICY = RetryPolicy(max_retries=0, base_ms=1)
SECOND = timedelta(seconds=1)


# --- buckets -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("count", [1, 3, 4, 7, 1024])
def test_the_partitions_of_a_feed_cover_every_bucket_exactly_once(count):
    owners = [sum(BucketRange(i, count).holds(bucket) for i in range(count)) for bucket in range(BUCKETS)]
    assert owners == [1] * BUCKETS


def test_a_bucket_is_stable_and_spread():
    assert bucket_of("bottle-1") == bucket_of("bottle-1")
    spread = {BucketRange(0, 4).holds(bucket_of(f"bottle-{i}")) for i in range(40)}
    assert spread == {True, False}


def test_a_partition_outside_its_count_is_refused():
    with pytest.raises(ValueError, match="partition 4 of 4"):
        BucketRange(4, 4)
    with pytest.raises(ValueError, match="not a report partition"):
        partition_of({"feed": "bottles", "partition": 0, "of": 4, "cosmos": False})
    with pytest.raises(ValueError, match="does not exist"):
        partition_of({"feed": schema.BOTTLE_ACTIONS, "partition": 5, "of": 4, "cosmos": False})


# --- the dispatcher -----------------------------------------------------------------------------------------------


def test_the_dispatcher_makes_a_lease_per_partition_and_sends_each_unheld_one_once(mock_db):
    first = sent_by_dispatch(mock_db)
    again = sent_by_dispatch(mock_db)

    partitions = get_settings().reports_partitions
    assert len(first) == len(REPORT_FEEDS) * partitions
    assert {(m["feed"], m["partition"], m["of"]) for m in first} == {
        (feed.key, i, partitions) for feed in REPORT_FEEDS for i in range(partitions)
    }
    assert mock_db[schema.LEASES].count_documents({}) == len(first)
    assert again == []  # sent lately, not yet taken: no pile of duplicate messages


def test_a_partition_is_sent_again_once_its_worker_released_it_or_its_lease_expired(mock_db):
    now = utc_now()
    [message, *_] = sent_by_dispatch(mock_db, now=now)
    partition = partition_of(message)
    lease_for = timedelta(seconds=get_settings().reports_lease_seconds)
    held = claim(mock_db, partition, "worker-a", now=now, lease_for=lease_for, policy=POLICY)
    assert held is not None

    assert partition.lease_id not in {partition_of(m).lease_id for m in sent_by_dispatch(mock_db, now=now)}
    after_expiry = sent_by_dispatch(mock_db, now=now + lease_for + MINUTE)  # the worker died
    assert partition.lease_id in {partition_of(m).lease_id for m in after_expiry}


def test_a_new_partition_count_starts_each_partition_from_the_old_partitions_it_overlaps(mock_db, monkeypatch):
    """REPORTS_PARTITIONS 4 -> 8 -> 3: a new partition starts from the oldest checkpoint time of the live
    partitions whose bucket ranges overlap its own, not from the oldest of the whole feed."""
    now = utc_now()
    sent_by_dispatch(mock_db, now=now)
    for i in range(4):  # old partition i checkpointed i + 1 minutes ago
        mock_db[schema.LEASES].update_one(
            {"_id": Partition(ACTIONS_FEED, i, 4).lease_id}, {"$set": {"checkpoint_time": now - (i + 1) * MINUTE}}
        )
    set_setting(monkeypatch, "REPORTS_PARTITIONS", "8")

    sent = sent_by_dispatch(mock_db, now=now)

    assert {m["of"] for m in sent if m["feed"] == ACTIONS_FEED.key} == {8}
    starts = {i: lease_of(mock_db, Partition(ACTIONS_FEED, i, 8))["checkpoint_time"] for i in range(8)}
    assert starts == {i: now - (i // 2 + 1) * MINUTE for i in range(8)}  # each half of an old partition

    set_setting(monkeypatch, "REPORTS_PARTITIONS", "3")
    sent_by_dispatch(mock_db, now=now)

    # The old layouts are live still (none of their successors has run): a third overlaps 3 of the 4 and 3 of the 8.
    starts = {i: lease_of(mock_db, Partition(ACTIONS_FEED, i, 3))["checkpoint_time"] for i in range(3)}
    assert starts == {0: now - 2 * MINUTE, 1: now - 3 * MINUTE, 2: now - 4 * MINUTE}


def lease_of(db: Any, partition: Partition) -> dict[str, Any]:
    lease: dict[str, Any] = db[schema.LEASES].find_one({"_id": partition.lease_id})
    return lease


def test_a_new_partition_count_rebuilds_a_range_whose_old_partition_never_checkpointed(mock_db, monkeypatch):
    """The new layout's leases start from the feed's oldest checkpoint time. A partition that never saved one
    (its first build failing, or not run yet) has aggregated nothing: its range must be built from the start,
    not from its siblings' checkpoints, or what it received before them is never aggregated."""
    set_setting(monkeypatch, "CHANGE_SOURCE", "polling")
    set_setting(monkeypatch, "REPORTS_PARTITIONS", "2")
    now = utc_now()
    long_ago = now - timedelta(hours=2)
    assert BucketRange(1, 2).holds(bucket_of("bottle-1"))
    assert BucketRange(0, 2).holds(bucket_of("bottle-20"))
    clock = [long_ago]
    instants.set_clock(lambda: clock[0])
    try:
        late_key = provisioned("bottle-1")
        assert post_events("bottle-1", late_key, opened(long_ago)).status == 202
        clock[0] = now - MINUTE
        key = provisioned("bottle-20")
        assert post_events("bottle-20", key, opened(now - MINUTE)).status == 202
    finally:
        instants.set_clock(None)
    sent = sent_by_dispatch(mock_db, now=now)
    done = Partition(ACTIONS_FEED, 0, 2)
    assert done.message() in sent
    assert process_partition(mock_db, done, now=now, settings=get_settings()).caught_up  # partition 1 never runs
    set_setting(monkeypatch, "REPORTS_PARTITIONS", "4")

    run_round(mock_db)
    run_round(mock_db)

    hour = mock_db[schema.USER_HOURLY_REPORTS].find_one({"hour": long_ago.replace(minute=0, second=0, microsecond=0)})
    assert hour is not None
    assert hour["opened"] == 1


def test_on_cosmos_a_feed_has_a_partition_per_physical_partition_starting_at_its_token(mock_db):
    cosmos = CosmosTokens(mock_db, partitions=3)

    sent = sent_by_dispatch(cosmos, on_cosmos=True)

    feed_messages = [m for m in sent if m["feed"] == ACTIONS_FEED.key]
    assert len(feed_messages) == 3
    assert all(m["cosmos"] and m["of"] == 3 for m in feed_messages)
    lease = mock_db[schema.LEASES].find_one({"feed": ACTIONS_FEED.key, "partition": 2})
    assert feed_range(lease["start_token"]) == tuple(lease["range"]) == ("2AAA", "FF")  # the last third
    # The tally is a query, not a change stream: bucket ranges on Cosmos DB too.
    tally = [m for m in sent if m["feed"] == HEARTBEAT_TALLY.key]
    assert len(tally) == get_settings().reports_partitions
    assert not any(m["cosmos"] for m in tally)


class ThrottledOnce(CosmosTokens):
    """Cosmos DB throttling its custom command once (16500), as it may any request."""

    throttled = False

    def command(self, command: Mapping[str, Any]) -> dict[str, Any]:
        if not self.throttled:
            self.throttled = True
            raise throttled()
        return super().command(command)


def test_a_throttled_get_change_stream_tokens_is_retried_not_taken_for_a_store_without_partitions(mock_db):
    cosmos = ThrottledOnce(mock_db, partitions=2)

    sent = sent_by_dispatch(cosmos, on_cosmos=True)

    assert cosmos.throttled
    assert {(m["cosmos"], m["of"]) for m in sent if m["feed"] == ACTIONS_FEED.key} == {(True, 2)}
    assert mock_db[schema.LEASES].count_documents({"feed": ACTIONS_FEED.key, "_id": {"$regex": ":buckets:"}}) == 0


# --- claiming, checkpoints and the fencing version ------------------------------------------------------------------


def test_a_work_message_delivered_twice_is_processed_by_one_worker(mock_db):
    now = utc_now()
    [message, *_] = sent_by_dispatch(mock_db, now=now)
    partition = partition_of(message)
    lease_for = timedelta(minutes=2)

    first = claim(mock_db, partition, "worker-a", now=now, lease_for=lease_for, policy=POLICY)
    second = claim(mock_db, partition, "worker-b", now=now + MINUTE, lease_for=lease_for, policy=POLICY)

    assert first is not None
    assert second is None


class LostReply:
    """A database whose first `method` call on `leases` is applied, but its reply lost (a dropped connection):
    the caller retries an operation that already took effect."""

    def __init__(self, db: Any, method: str) -> None:
        self._db, self._method, self.lost = db, method, False

    def __getitem__(self, name: str) -> Any:
        collection = self._db[name]
        if name != schema.LEASES:
            return collection
        owner = self

        class Leases:
            def __getattr__(self, attribute: str) -> Any:
                real = getattr(collection, attribute)
                if attribute != owner._method or owner.lost:
                    return real

                def applied_then_lost(*args: Any, **kwargs: Any) -> Any:
                    real(*args, **kwargs)
                    owner.lost = True
                    raise AutoReconnect("connection closed before the reply")

                return applied_then_lost

        return Leases()


def test_a_claim_whose_reply_was_lost_is_still_the_workers_claim(mock_db, monkeypatch):
    set_setting(monkeypatch, "CHANGE_SOURCE", "polling")
    now = utc_now()
    [message, *_] = sent_by_dispatch(mock_db, now=now)
    partition = partition_of(message)
    flaky = LostReply(mock_db, "find_one_and_update")

    run = process_partition(flaky, partition, now=now, settings=get_settings())

    assert flaky.lost
    assert run.claimed  # not refused by its own claim, leaving the lease held by no one until it expires
    assert mock_db[schema.LEASES].find_one({"_id": partition.lease_id})["owner"] is None  # released


def test_a_dispatch_mark_whose_reply_was_lost_still_sends_the_partition(mock_db):
    flaky = LostReply(mock_db, "update_one")

    sent = sent_by_dispatch(flaky)

    assert flaky.lost
    assert len(sent) == len(REPORT_FEEDS) * get_settings().reports_partitions


def test_a_worker_whose_lease_was_taken_over_cannot_checkpoint(mock_db):
    now = utc_now()
    [message, *_] = sent_by_dispatch(mock_db, now=now)
    partition = partition_of(message)
    lease_for = timedelta(minutes=2)
    slow = claim(mock_db, partition, "worker-a", now=now, lease_for=lease_for, policy=POLICY)
    taker = claim(mock_db, partition, "worker-b", now=now + 3 * MINUTE, lease_for=lease_for, policy=POLICY)
    assert slow is not None
    assert taker is not None
    assert taker.version == slow.version + 1

    late = Lease(token={"_data": "slow"}, checkpoint_time=now, owner="worker-a", version=slow.version)
    assert not checkpoint(mock_db, partition, late, source="x", now=now, lease_for=lease_for, policy=POLICY)
    assert not release(mock_db, partition, late, now=now, policy=POLICY)
    fresh = Lease(token={"_data": "taker"}, checkpoint_time=now, owner="worker-b", version=taker.version)
    assert checkpoint(mock_db, partition, fresh, source="x", now=now, lease_for=lease_for, policy=POLICY)
    assert mock_db[schema.LEASES].find_one({"_id": partition.lease_id})["token"] == {"_data": "taker"}


def test_a_worker_that_loses_its_lease_mid_run_stops_without_saving(mock_db, monkeypatch):
    set_setting(monkeypatch, "CHANGE_SOURCE", "polling")
    set_setting(monkeypatch, "REPORTS_PAGE_SIZE", "1")
    key = provisioned()
    received = [utc_now()]
    try:
        instants.set_clock(lambda: received[0])
        for minutes in (9, 8, 7):  # three requests: three receive times (a millisecond apart at least), three pages
            received[0] += timedelta(milliseconds=5)
            assert post_events("bottle-1", key, opened(ago(minutes=minutes))).status == 202
    finally:
        instants.set_clock(None)
    now = utc_now()
    partition = next(
        partition_of(m)
        for m in sent_by_dispatch(mock_db, now=now)
        if m["feed"] == ACTIONS_FEED.collection and BucketRange(m["partition"], m["of"]).holds(bucket_of("bottle-1"))
    )
    real_checkpoint = checkpoint

    def taken_over_after_the_first_page(db: Any, part: Partition, lease: Lease, **kwargs: Any) -> bool:
        saved = real_checkpoint(db, part, lease, **kwargs)
        claim(db, part, "worker-b", now=now + timedelta(hours=1), lease_for=MINUTE, policy=POLICY)  # it expired
        return saved

    monkeypatch.setattr(partition_worker, "checkpoint", taken_over_after_the_first_page)
    run = process_partition(mock_db, partition, now=now, settings=get_settings())

    assert run.claimed
    assert run.lost_lease
    assert run.pages == 2  # the second page's checkpoint found the lease gone, and the run stopped
    assert mock_db[schema.LEASES].find_one({"_id": partition.lease_id})["owner"] == "worker-b"


def test_a_worker_whose_page_ran_past_its_deadline_still_releases_its_lease(mock_db, monkeypatch):
    """A database error fails the invocation after releasing the lease, so the host's retry can claim it at once.
    When the error is the run's own deadline (a throttled page at the end of the budget), the release must not
    be refused by that same spent deadline, or the retry finds the lease held, returns, and the partition waits
    for its lease to expire."""
    set_setting(monkeypatch, "CHANGE_SOURCE", "polling")
    key = provisioned()
    assert post_events("bottle-1", key, opened(ago(minutes=5))).status == 202
    now = utc_now()
    partition = next(
        partition_of(m)
        for m in sent_by_dispatch(mock_db, now=now)
        if m["feed"] == ACTIONS_FEED.collection and BucketRange(m["partition"], m["of"]).holds(bucket_of("bottle-1"))
    )
    # The short deadlines only for the run under test: a loaded machine may take longer to provision and dispatch.
    set_setting(monkeypatch, "REPORTS_TIME_BUDGET_SECONDS", "0.2")
    set_setting(monkeypatch, "REQUEST_DEADLINE_SECONDS", "0.1")
    real_refresh = aggregation.refresh_hourly

    def throttled_until_the_deadline(*args: Any, **kwargs: Any) -> Any:
        time.sleep(0.35)  # past the budget and the request deadline after it
        return real_refresh(*args, **kwargs)

    monkeypatch.setattr(report_consumers, "refresh_hourly", throttled_until_the_deadline)
    with pytest.raises(StoreUnavailable):
        process_partition(mock_db, partition, now=now, settings=get_settings())

    lease = mock_db[schema.LEASES].find_one({"_id": partition.lease_id})
    assert lease["owner"] is None
    monkeypatch.setattr(report_consumers, "refresh_hourly", real_refresh)
    retry = process_partition(mock_db, partition, now=now, settings=get_settings())
    assert retry.claimed
    assert retry.caught_up


# --- Cosmos DB's change streams, by a fake that behaves as its documentation says -------------------------------------


def test_a_page_ends_only_where_a_server_batch_ends():
    batches: list[list[dict[str, Any]] | None] = [[change(f"b{i}", 5) for i in range(3)], [change("b3", 4)]]
    source = ChangeStreamSource(CosmosStream(batches), ACTIONS_FEED, page_size=2)

    first = source.next_page()
    second = source.next_page()

    assert first is not None
    assert second is not None
    # A page of 2 would have checkpointed the batch's token with b2 unread: skipped for good.
    assert [c.key for c in first.changes] == ["b0", "b1", "b2"]
    assert first.token == {"_data": "after-batch-1"}
    assert [c.key for c in second.changes] == ["b3"]
    assert second.token == {"_data": "after-batch-2"}
    assert source.next_page() is None


def test_a_throttled_stream_neither_ends_a_page_early_nor_moves_the_checkpoint_time():
    read = change("b0", received_minutes_ago=30)
    source = ChangeStreamSource(CosmosStream([[read], None, None]), ACTIONS_FEED, page_size=10)

    page = source.next_page()

    assert page is not None
    assert [c.key for c in page.changes] == ["b0"]
    assert page.checkpoint_time == read["fullDocument"][ACTIONS_FEED.time_field]  # from the data read, not the clock
    assert source.next_page() is None  # throttled: an empty page, the position unchanged


def test_a_worker_on_a_throttled_cosmos_stream_checkpoints_no_later_than_what_it_read(mock_db, monkeypatch):
    set_setting(monkeypatch, "CHANGE_SOURCE", "change_stream")
    now = utc_now()
    partition = next(
        partition_of(m) for m in sent_by_dispatch(mock_db, now=now) if m["feed"] == ACTIONS_FEED.collection
    )
    mock_db[schema.LEASES].update_one({"_id": partition.lease_id}, {"$set": {"token": {"_data": "saved"}}})
    read = change("b0", received_minutes_ago=20)

    run = process_partition(
        mock_db, partition, now=now, settings=get_settings(), watch=lambda p, token: CosmosStream([[read], None])
    )

    assert run.caught_up
    saved = mock_db[schema.LEASES].find_one({"_id": partition.lease_id})
    assert saved["checkpoint_time"] == read["fullDocument"][ACTIONS_FEED.time_field]
    assert saved["checkpoint_time"] < now - 19 * MINUTE
    assert saved["token"] == {"_data": "after-batch-1"}


def test_a_throttled_stream_after_a_full_page_is_asked_again_with_back_off_until_it_answers(mock_db, monkeypatch):
    """Cosmos DB's change stream answers empty batches while the partition is throttled (tests/cosmos_fakes.py's
    throttling, and the empty batches of CosmosStream above): an empty page right after a full one is no proof
    of being caught up. Ending there left the rest of the backlog to the next dispatch, a page a dispatch."""
    set_setting(monkeypatch, "CHANGE_SOURCE", "change_stream")
    set_setting(monkeypatch, "REPORTS_PAGE_SIZE", "2")
    partition = actions_partition_with_token(mock_db, utc_now())
    full = [change("b0", 30), change("b1", 29)]
    time_ = FakeTime()

    run = run_on_stream(mock_db, partition, [full, None, None, None, [change("b2", 28)]], time_)

    assert run.changes == 3
    assert run.caught_up
    assert run.empty_retries == 3
    assert time_.slept == [0.1, 0.2, 0.4]  # doubling
    saved = mock_db[schema.LEASES].find_one({"_id": partition.lease_id})
    assert saved["token"] == {"_data": "after-batch-2"}  # the position after the page read once it answered


def test_an_idle_partition_a_short_page_then_empty_ends_its_run_at_once(mock_db, monkeypatch):
    set_setting(monkeypatch, "CHANGE_SOURCE", "change_stream")
    set_setting(monkeypatch, "REPORTS_PAGE_SIZE", "2")
    partition = actions_partition_with_token(mock_db, utc_now())
    time_ = FakeTime()

    # The short page ends at the first empty batch; the next page is the second: empty, so the run ends.
    run = run_on_stream(mock_db, partition, [[change("b0", 30)], None, None, [change("b1", 29)]], time_)

    assert (run.changes, run.caught_up, run.empty_retries, time_.slept) == (1, True, 0, [])


def a_backlog_after_a_run_out_of_budget_after_a_full_page(mock_db, monkeypatch) -> tuple[Partition, list[Any]]:
    """A streamed partition (pages of 2) whose last run spent its budget with a full page read; the two changes
    written since, its backlog."""
    set_setting(monkeypatch, "CHANGE_SOURCE", "change_stream")
    set_setting(monkeypatch, "REPORTS_PAGE_SIZE", "2")
    partition = actions_partition_with_token(mock_db, utc_now())
    a_run_out_of_budget_after_a_full_page(
        mock_db, partition, stored(mock_db, partition, [change("b0", 30), change("b1", 29)])
    )
    backlog = stored(mock_db, partition, [change("b2", 28), change("b3", 27)])
    return partition, backlog


def test_a_run_whose_first_page_is_throttled_after_a_run_that_ran_out_mid_backlog_asks_again(mock_db, monkeypatch):
    """The last run spent its budget with a full page read (more waiting); this one's first page is throttled
    (empty). It ended there, caught up, its backlog left for the next run's first page, throttled again: the
    lease now remembers the full page, and a document written after its checkpoint shows more may be waiting."""
    partition, backlog = a_backlog_after_a_run_out_of_budget_after_a_full_page(mock_db, monkeypatch)
    time_ = FakeTime()

    run = run_on_stream(mock_db, partition, [None, None, backlog, backlog[:1], None], time_)

    assert (run.changes, run.caught_up, run.empty_retries) == (3, True, 2)
    assert time_.slept == [0.1, 0.2]
    assert mock_db[schema.LEASES].find_one({"_id": partition.lease_id})["behind"] is False  # a short page last


def test_a_resumed_stream_whose_first_page_is_throttled_after_a_full_page_asks_again(mock_db, monkeypatch):
    """The same with the stream as pymongo gives it, its resume token the lease's until a batch moves it: the
    throttled first page leaves the position where it was saved, so it is no answer that the partition is idle;
    the run asks again and reads the backlog, rather than ending caught up with it unread."""
    partition, backlog = a_backlog_after_a_run_out_of_budget_after_a_full_page(mock_db, monkeypatch)
    time_ = FakeTime()
    opened_at: list[Any] = []

    def watch(p, token):
        opened_at.append(token)
        return ResumedStream([None, backlog, backlog[:1], None], token)

    run = process_partition(
        mock_db, partition, now=utc_now(), settings=get_settings(), clock=time_, sleep=time_.sleep, watch=watch
    )

    assert opened_at == [{"_data": "after-batch-1"}]
    assert (run.changes, run.caught_up, run.empty_retries, time_.slept) == (3, True, 1, [0.1])


def test_a_run_after_a_full_page_with_nothing_written_since_ends_at_an_empty_first_page(mock_db, monkeypatch):
    set_setting(monkeypatch, "CHANGE_SOURCE", "change_stream")
    set_setting(monkeypatch, "REPORTS_PAGE_SIZE", "2")
    partition = actions_partition_with_token(mock_db, utc_now())
    a_run_out_of_budget_after_a_full_page(
        mock_db, partition, stored(mock_db, partition, [change("b0", 30), change("b1", 29)])
    )
    time_ = FakeTime()

    run = run_on_stream(mock_db, partition, [None, None, [change("b2", 28)]], time_)

    assert (run.changes, run.caught_up, run.empty_retries, time_.slept) == (0, True, 0, [])
    assert mock_db[schema.LEASES].find_one({"_id": partition.lease_id})["behind"] is False


def test_a_stream_throttled_for_longer_than_its_retries_ends_the_run_before_the_budget(mock_db, monkeypatch, caplog):
    set_setting(monkeypatch, "CHANGE_SOURCE", "change_stream")
    set_setting(monkeypatch, "REPORTS_PAGE_SIZE", "2")
    partition = actions_partition_with_token(mock_db, utc_now())
    time_ = FakeTime()

    run = run_on_stream(mock_db, partition, [[change("b0", 30), change("b1", 29)], *[None] * 1000], time_)

    budget = get_settings().reports_time_budget_seconds
    assert run.changes == 2
    assert not run.caught_up
    assert run.empty_retries == THROTTLED_RETRIES
    assert time_.now < budget / 4  # about 9 s of waits, not the whole budget
    assert max(time_.slept) == 2.0
    assert "empty pages in a row after a full one" in caplog.text
    saved = mock_db[schema.LEASES].find_one({"_id": partition.lease_id})
    assert saved["token"] == {"_data": "after-batch-1"}
    assert saved["owner"] is None  # released: the next dispatch sends it again


def test_a_split_partition_leaves_its_old_lease_to_the_new_layout(mock_db, monkeypatch, caplog):
    set_setting(monkeypatch, "CHANGE_SOURCE", "change_stream")
    cosmos = CosmosTokens(mock_db, partitions=2)
    now = utc_now()
    message = sent_by_dispatch(cosmos, now=now, on_cosmos=True)[0]
    partition = partition_of(message)
    mock_db[schema.LEASES].update_many({"feed": partition.feed.collection}, {"$set": {"checkpoint_time": now}})
    mock_db[schema.LEASES].update_one(
        {"_id": partition.lease_id}, {"$set": {"token": {"_data": "expired"}, "checkpoint_time": now - MINUTE}}
    )
    cosmos.partitions = 3  # Cosmos DB split a physical partition

    def rejecting(p: Partition, token: Any) -> Any:
        raise OperationFailure("resume token is no longer valid", code=280)

    run = process_partition(cosmos, partition, now=now, settings=get_settings(), watch=rejecting)
    relaid = sent_by_dispatch(cosmos, now=now, on_cosmos=True)

    assert run.layout_changed
    assert mock_db[schema.LEASES].find_one({"_id": partition.lease_id})["owner"] is None
    assert {m["of"] for m in relaid} == {3}  # the new layout, from the feed's oldest checkpoint
    new = mock_db[schema.LEASES].find_one({"feed": partition.feed.collection, "of": 3, "partition": 0})
    assert new["checkpoint_time"] == now - MINUTE


def test_a_cosmos_recovery_cut_short_by_its_budget_carries_on_from_a_fresh_token(mock_db, monkeypatch):
    """A token rejected (expired): the worker polls from its checkpoint time, and a run out of budget before it
    caught up saves its polling position without a token. The next run must not open its stream at the lease's
    `start_token`, the token of the day the lease was made: older than the one just rejected, it is rejected
    too, and the partition would fail on every run for good."""
    set_setting(monkeypatch, "CHANGE_SOURCE", "change_stream")
    set_setting(monkeypatch, "REPORTS_PAGE_SIZE", "1")
    cosmos = CosmosTokens(mock_db, partitions=1)  # each call gives the tokens of the present
    now = utc_now()
    partition = next(
        partition_of(m)
        for m in sent_by_dispatch(cosmos, now=now, on_cosmos=True)
        if m["feed"] == ACTIONS_FEED.collection
    )
    made_with = mock_db[schema.LEASES].find_one({"_id": partition.lease_id})["start_token"]
    received = [now - 30 * MINUTE]
    instants.set_clock(lambda: received[0])
    try:
        for i in range(3):  # three actions received a minute apart: three pages of one
            key = provisioned(f"bottle-{i}")
            received[0] += MINUTE
            assert post_events(f"bottle-{i}", key, opened(received[0])).status == 202
    finally:
        instants.set_clock(None)
    expired = {"_data": "expired"}
    mock_db[schema.LEASES].update_one(
        {"_id": partition.lease_id}, {"$set": {"token": expired, "checkpoint_time": now - 40 * MINUTE}}
    )

    def watch(p: Partition, token: Any) -> Any:
        if token in (expired, made_with):  # the lease's first token is older than the expired one
            raise OperationFailure("resume token is no longer valid", code=280)
        return CosmosStream([])

    ticks = iter(range(0, 10_000, 30))  # 30 s a call against a 45 s budget: one page, then out of time
    cut_short = process_partition(
        cosmos, partition, now=now, settings=get_settings(), clock=lambda: next(ticks), watch=watch
    )
    assert cut_short.recovered
    assert not cut_short.caught_up

    carried_on = process_partition(cosmos, partition, now=now, settings=get_settings(), watch=watch)

    assert carried_on.recovered
    assert carried_on.caught_up
    assert carried_on.changes >= 2  # the rest of the polling
    assert mock_db[schema.USER_HOURLY_REPORTS].count_documents({}) > 0


# --- workers side by side ----------------------------------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.parametrize("source", ["change_stream", "polling"])
@pytest.mark.usefixtures("mid_hour")
def test_workers_side_by_side_with_every_message_twice_give_a_rebuilds_reports(real_db, monkeypatch, source):
    set_setting(monkeypatch, "CHANGE_SOURCE", source)
    set_setting(monkeypatch, "DAILY_ROLLUP_HOURS", "1")  # every pass rolls its hours' days up
    keys = {f"bottle-{i}": provisioned(f"bottle-{i}") for i in range(6)}
    for bottle_id, key in keys.items():
        events = [heartbeat(ago(minutes=50)), opened(ago(minutes=40)), heartbeat(ago(minutes=20))]
        assert post_events(bottle_id, key, {"events": events}).status == 202
    aggregate()  # positions the streams, and counts the hours closed so far
    for bottle_id, key in keys.items():
        assert (
            post_events(bottle_id, key, {"events": [heartbeat(ago(minutes=10)), opened(ago(minutes=5))]}).status == 202
        )

    # Two hours on, every hour of these events has closed: the actions' partitions and the tally's, each
    # message delivered twice to workers side by side; then the next hour's pass, which rolls the day up again
    # with what the actions' workers wrote after the first pass rolled it up.
    for hours_later in (2, 2, 3):
        now = utc_now() + timedelta(hours=hours_later)
        messages: list[str] = []
        dispatch(real_db, now=now, settings=get_settings(), send=messages.extend)
        workers = [threading.Thread(target=_work, args=(real_db, message, now)) for message in messages + messages]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()

    by_workers = stored_reports(real_db)
    clear_reports(real_db)
    set_setting(monkeypatch, "CHANGE_SOURCE", "polling")
    run_round(real_db, hours_later=3)
    assert by_workers == stored_reports(real_db)
    assert sum(doc["opened"] for doc in real_db[schema.USER_DAILY_REPORTS].find()) == 12
    assert sum(doc["heartbeats"] for doc in real_db[schema.USER_DAILY_REPORTS].find()) == 18


def _work(db: Any, message: str, now: Any) -> None:
    process_partition(db, partition_of(json.loads(message)), now=now, settings=get_settings())


# --- every getMore through the retry loop -------------------------------------------------------------------------


class PyMongoLikeStream:
    """A pymongo ChangeStream over server batches (`server.batches[i]` read after token `after-<i-1>`): a getMore
    the server answers 16500 closes the stream, as pymongo's `try_next` does with an error it does not resume."""

    def __init__(self, server: "ThrottledServer", token: dict[str, Any] | None) -> None:
        self._server = server
        self._next = 0 if token in (None, {"_data": "saved"}) else int(token["_data"].split("-")[1]) + 1
        self._batch: list[dict[str, Any]] = []
        self.resume_token = token
        self.alive = True
        self._cursor = None  # every batch is served whole by try_next: each change ends a batch

    def try_next(self) -> dict[str, Any] | None:
        if not self.alive:
            raise AssertionError("try_next on a closed change stream (pymongo: InvalidOperation)")
        if not self._batch:
            if self._next in self._server.throttled_batches:
                self._server.throttled_batches.remove(self._next)
                self.alive = False
                raise throttled()
            if self._next >= len(self._server.batches):
                return None
            self._batch = list(self._server.batches[self._next])
            self._next += 1
        self.resume_token = {"_data": f"after-{self._next - 1}"}
        return self._batch.pop(0)

    def close(self) -> None:
        self.alive = False


class ThrottledServer:
    """A database whose `bottle_actions.watch` opens PyMongoLikeStreams whose getMore of each batch index in
    `throttled_batches` is answered 16500 once (every other call goes to `db`)."""

    def __init__(self, db: Any, batches: list[list[dict[str, Any]]], throttled_batches: set[int]) -> None:
        self._db, self.batches, self.throttled_batches, self.opened = db, batches, throttled_batches, 0

    def __getitem__(self, name: str) -> Any:
        return Watchable(self, self._db[name]) if name == schema.BOTTLE_ACTIONS else self._db[name]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)


class Watchable:
    def __init__(self, server: ThrottledServer, collection: Any) -> None:
        self._server, self._collection = server, collection

    def watch(self, pipeline: Any, resume_after: Any = None, **options: Any) -> PyMongoLikeStream:
        self._server.opened += 1
        return PyMongoLikeStream(self._server, resume_after)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._collection, name)


def test_a_throttled_get_more_of_a_change_stream_is_retried_from_the_token_reached(mock_db, monkeypatch):
    """The stream's getMore ran outside the one retry loop: a 16500 on it failed the run (a poison message after
    five) instead of waiting and asking again. The retry opens the stream again from the last whole batch."""
    set_setting(monkeypatch, "CHANGE_SOURCE", "change_stream")
    set_setting(monkeypatch, "STORE_RETRY_BASE_MS", "1")
    partition = actions_partition_with_token(mock_db, utc_now())
    batches = [[change("b0", 30), change("b1", 29)], [change("b2", 28)]]
    server = ThrottledServer(mock_db, batches, throttled_batches={1})

    run = process_partition(server, partition, now=utc_now(), settings=get_settings())

    assert (run.changes, run.caught_up) == (3, True)
    assert server.opened == 2  # opened again after the throttled getMore, from the token after the first batch
    assert mock_db[schema.LEASES].find_one({"_id": partition.lease_id})["token"] == {"_data": "after-1"}
