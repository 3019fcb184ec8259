"""Report writes that race: a guarded write of a user-hour must never bring back what another writer removed, and a
worker whose lease was taken over must never leave a report behind its source, whatever the clocks say."""

import json
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest

from shared.consumers.plugged import dispatch, partition_of, process_partition
from shared.feeds.partitions import Partition
from shared.feeds.sources import Change
from shared.instants import hour_of, utc_now
from shared.reports import aggregation, tally
from shared.reports.aggregation import refresh_hourly
from shared.reports.documents import ActionPart, HeartbeatPart, hourly_document, hourly_id, merged_entry
from shared.reports.feeds import ACTIONS_FEED, HEARTBEAT_TALLY
from shared.settings import get_settings
from shared.store import schema
from shared.store.partitioning import BucketRange, bucket_of
from shared.store.retries import RetryPolicy
from shared.store.retries import find_all as real_find_all
from tests.api import SPEC, ago, heartbeat, opened, post_events, provisioned
from tests.report_client import set_setting
from tests.reports.documents import stale_entry
from tools.local_host import invoking_thread_name
from tools.report_truth import reported_totals, source_totals

USER = SPEC["user_id"]
POLICY = RetryPolicy(max_retries=0, base_ms=1)


def test_a_user_hour_deleted_after_it_was_read_is_not_brought_back_by_the_guarded_write(db, monkeypatch):
    """A merge reads the user-hour (holding another bottle's entry), then another writer empties and deletes it
    (say the other bottle's heartbeats moved to its new owner): the merge's write must not insert what it read."""
    key = provisioned("bottle-1")
    at = ago(hours=2)
    assert post_events("bottle-1", key, opened(at, event_id="e1")).status == 202
    hour = hour_of(at)
    reports = db[schema.USER_HOURLY_REPORTS]
    reports.insert_one(hourly_document(USER, hour, [stale_entry("bottle-2", 3)], utc_now() - timedelta(minutes=1)))
    real_load = aggregation._load_by_id
    deleted: list[int] = []

    def deleted_after_the_read(collection: Any, ids: Any, policy: Any) -> Any:
        found = real_load(collection, ids, policy)
        if not deleted:
            deleted.append(reports.delete_one({"_id": hourly_id(USER, hour), "user_id": USER}).deleted_count)
        return found

    monkeypatch.setattr(aggregation, "_load_by_id", deleted_after_the_read)
    action = db[schema.BOTTLE_ACTIONS].find_one({"bottle_id": "bottle-1"})
    refresh_hourly(db, [Change(schema.BOTTLE_ACTIONS, action["_id"], action)], stamp=utc_now(), policy=POLICY)

    assert deleted == [1]
    stored = reports.find_one({"_id": hourly_id(USER, hour)})
    assert [e["bottle_id"] for e in stored["bottles"]] == ["bottle-1"]
    assert (stored.get("opened", 0), stored.get("heartbeats", 0)) == (1, 0)


class Paused:
    """Makes the worker run on the thread named `name` stop after it recomputed a page's buckets from source and
    before it reads and writes the reports, until `resume` is set."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
        self.name, self.reached, self.resume = name, threading.Event(), threading.Event()
        real = aggregation.recomputed_parts

        def recomputed(*args: Any, **kwargs: Any) -> Any:
            parts = real(*args, **kwargs)
            if invoking_thread_name() == self.name and parts and not self.reached.is_set():
                self.reached.set()
                assert self.resume.wait(timeout=30)
            return parts

        monkeypatch.setattr(aggregation, "recomputed_parts", recomputed)


def actions_partition(db: Any, now: Any) -> Partition:
    """The actions feed's partition that holds bottle-1 (the dispatcher makes the leases)."""
    messages: list[str] = []
    dispatch(db, now=now, settings=get_settings(), send=messages.extend)
    partitions = [partition_of(json.loads(m)) for m in messages]
    return next(
        p
        for p in partitions
        if p.feed == ACTIONS_FEED and p.buckets is not None and p.buckets.holds(bucket_of("bottle-1"))
    )


def in_thread(name: str, run: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    done: list[Any] = []
    thread = threading.Thread(target=lambda: done.append(run()), name=name)
    thread.start()
    return thread, done


@pytest.mark.parametrize("skew_s", [121, 300])
def test_a_worker_whose_lease_was_taken_over_cannot_put_its_older_counts_over_newer_ones(db, monkeypatch, skew_s):
    """Worker A reads three opened events and stalls; two more arrive; worker B, its clock `skew_s` ahead, takes
    the lease A's clock still thinks is A's and writes five; then A wakes and writes. The report ends as the source
    says: five."""
    set_setting(monkeypatch, "CHANGE_SOURCE", "polling")  # one source on both stores: the interleaving is exact
    key = provisioned("bottle-1")
    hour = hour_of(ago(hours=2))
    for i in range(3):
        assert post_events("bottle-1", key, opened(hour + timedelta(minutes=i), event_id=f"e{i}")).status == 202
    now = utc_now()
    partition = actions_partition(db, now)
    paused = Paused(monkeypatch, "A")
    settings = get_settings()

    a, a_run = in_thread("A", lambda: process_partition(db, partition, now=now, settings=settings))
    assert paused.reached.wait(timeout=30)
    for i in range(3, 5):
        assert post_events("bottle-1", key, opened(hour + timedelta(minutes=i), event_id=f"e{i}")).status == 202
    ahead = now + timedelta(seconds=skew_s)
    b_run = process_partition(db, partition, now=ahead, settings=settings)
    paused.resume.set()
    a.join(timeout=30)

    assert_the_overtaken_worker_left_the_newer_count(db, a_run, b_run, hour, counted="opened", expected=5)


@pytest.mark.parametrize("skew_s", [121, 300])
def test_a_tally_worker_whose_lease_was_taken_over_cannot_put_its_older_heartbeat_counts_back(db, monkeypatch, skew_s):
    """The same for the heartbeat tally: worker A counts an hour's three heartbeats and stalls before it writes;
    two late heartbeats of that hour arrive; worker B, its clock ahead, takes the lease and counts five; A wakes."""
    key = provisioned("bottle-1")
    hour = hour_of(ago(hours=3))
    beats = [heartbeat(hour + timedelta(minutes=m)) for m in (1, 11, 21)]
    assert post_events("bottle-1", key, {"events": beats}).status == 202
    now = utc_now()
    settings = get_settings()
    dispatch(db, now=now, settings=settings, send=lambda _messages: None)  # makes the leases
    partition = next(
        Partition(HEARTBEAT_TALLY, i, settings.reports_partitions)
        for i in range(settings.reports_partitions)
        if BucketRange(i, settings.reports_partitions).holds(bucket_of(USER))
    )
    reached, resume = threading.Event(), threading.Event()
    real_write = aggregation.write_hourly  # what the tally calls (it imports it by name)

    def stalling(*args: Any) -> Any:
        if invoking_thread_name() == "A" and not reached.is_set():
            reached.set()
            assert resume.wait(timeout=30)
        return real_write(*args)

    monkeypatch.setattr(tally, "write_hourly", stalling)

    a, a_run = in_thread("A", lambda: process_partition(db, partition, now=now, settings=settings))
    assert reached.wait(timeout=30)
    late = [heartbeat(hour + timedelta(minutes=m)) for m in (31, 41)]
    assert post_events("bottle-1", key, {"events": late}).status == 202
    b_run = process_partition(db, partition, now=now + timedelta(seconds=skew_s), settings=settings)
    resume.set()
    a.join(timeout=30)

    assert_the_overtaken_worker_left_the_newer_count(db, a_run, b_run, hour, counted="heartbeats", expected=5)


def assert_the_overtaken_worker_left_the_newer_count(
    db: Any, a_run: list[Any], b_run: Any, hour: datetime, *, counted: str, expected: int
) -> None:
    """B took A's lease (the interleaving the test means), A found its lease lost, and the user-hour keeps B's
    newer count: every report still equals its source."""
    assert b_run.claimed
    assert a_run
    assert a_run[0].lost_lease
    stored = db[schema.USER_HOURLY_REPORTS].find_one({"_id": hourly_id(USER, hour)})
    assert stored[counted] == expected
    assert reported_totals(db) == source_totals(db)


def test_guarded_writes_in_one_bulk_tell_which_landed(db):
    """One bulk of guarded updates: the one whose document is as read lands; the one another writer changed, and
    the one another writer deleted, do not (conflicts); nothing is inserted in place of the deleted one."""
    reports = db[schema.USER_HOURLY_REPORTS]
    hours = [hour_of(ago(hours=h)) for h in (3, 4, 5)]
    read = utc_now() - timedelta(minutes=5)
    olds = [hourly_document(USER, hour, [stale_entry("bottle-1", 1)], read) for hour in hours]
    reports.insert_many([dict(old) for old in olds])
    reports.update_one({"_id": olds[1]["_id"]}, {"$set": {"updated_at": read + timedelta(minutes=1)}})
    reports.delete_one({"_id": olds[2]["_id"], "user_id": USER})
    later = read + timedelta(minutes=2)
    writes = [
        aggregation.GuardedWrite(old, hourly_document(USER, hour, [stale_entry("bottle-1", 2)], later))
        for old, hour in zip(olds, hours, strict=True)
    ]

    assert aggregation.write_guarded(reports, writes, POLICY) == [True, False, False]
    assert sorted(doc["heartbeats"] for doc in reports.find()) == [1, 2]


def action_part(opened_: int, closed_: int, pills_taken: int) -> ActionPart:
    doses = 1 if pills_taken else 0
    return ActionPart("Cordrazine", opened_, closed_, doses, pills_taken, 29, 14.5)


@pytest.mark.parametrize(
    ("stored", "part", "kept"),
    [
        ((2, 1, 0), (1, 1, 2), True),  # fewer events: read before some arrived
        ((1, 1, 0), (1, 1, 2), False),  # as many: the same events, counted anew (a rebuild for a changed rule)
        ((1, 0, 0), (2, 1, 1), False),  # more: newer
    ],
    ids=["fewer", "as many", "more"],
)
def test_an_action_part_replaces_the_stored_one_unless_it_counts_fewer_events(stored, part, kept):
    opened_, closed_, taken = stored
    entry = stale_entry("bottle-1", 0) | {"opened": opened_, "closed": closed_, "pills_taken": taken}
    merged = merged_entry("bottle-1", entry, action_part(*part), None)
    assert merged is not None
    assert (merged["opened"], merged["closed"], merged["pills_taken"]) == (stored if kept else part)


@pytest.mark.parametrize(
    ("sole_owner", "heartbeats"), [(True, 5), (False, 3)], ids=["one owner: kept", "reassigned in the hour: moved"]
)
def test_a_smaller_heartbeat_count_is_merged_only_where_the_hour_changed_owner(sole_owner, heartbeats):
    merged = merged_entry("bottle-1", stale_entry("bottle-1", 5), None, HeartbeatPart(3, "Cordrazine", sole_owner))
    assert merged is not None
    assert merged["heartbeats"] == heartbeats


def test_report_documents_are_read_one_user_a_query_never_an_in_of_users(db, monkeypatch):
    """The merges read the reports they write by `_id`, each query naming one user (the shard key), so on Cosmos
    DB none fans out over the report collections' partitions; every document is still found."""
    hour = hour_of(ago(hours=2))
    reports = db[schema.USER_HOURLY_REPORTS]
    users = ["user-a", "user-b", "user-c"]
    for user_id in users:
        for hours_back in (0, 1):
            at = hour - timedelta(hours=hours_back)
            reports.insert_one(hourly_document(user_id, at, [stale_entry("bottle-9", 1)], utc_now()))
    queries: list[dict[str, Any]] = []

    def recorded(collection: Any, query: Any, policy: Any, projection: Any = None) -> Any:
        queries.append(query)
        return real_find_all(collection, query, policy, projection)

    monkeypatch.setattr(aggregation, "find_all", recorded)
    wanted = [hourly_id(u, hour - timedelta(hours=h)) for u in [*users, "user-d"] for h in (0, 1)]

    found = aggregation._load_by_id(reports, wanted, POLICY)

    assert sorted(found) == sorted(wanted[:6])  # user-d has none
    assert sorted(q["user_id"] for q in queries) == ["user-a", "user-b", "user-c", "user-d"]
    assert all(
        sorted(q["_id"]["$in"]) == [hourly_id(q["user_id"], hour - timedelta(hours=h)) for h in (1, 0)] for q in queries
    )
