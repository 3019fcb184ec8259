"""How a check run records and sends: at-least-once queue delivery across crashes and failed sends, one
notification however many runs overlap or repeat, batches, the per-partition message cap, the time budget, and
throttling; what a run reports when its queue or its store fails (the notifications a failed send left pending are
counted for the metric; a store down through the whole sweep fails the run with StoreUnavailable, so the host
retries the message). (tests/notifications/test_queue_delivery.py sends to a real queue, on Azurite;
tests/notifications/test_check_partitions.py covers what partitions do to one another.)"""

import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import mongomock
import pytest
from pymongo.errors import AutoReconnect, OperationFailure

from shared.notifications import delivery
from shared.notifications import documents as notifications
from shared.notifications.checks.partitions import partitions
from shared.notifications.checks.run import CheckRun, run_check
from shared.notifications.documents import Episode
from shared.settings import get_settings
from shared.store import schema
from shared.store.partitioning import BucketRange, bucket_of
from shared.store.retries import RetryPolicy, StoreUnavailable
from shared.telemetry import metrics
from tests.checking import Sweep, World, sweep_all
from tests.cosmos_fakes import ThrottlingDatabase
from tests.report_client import set_setting

START = datetime(2026, 5, 4, 9, 0, tzinfo=UTC)
REAL_MARK = delivery._mark_queued


@pytest.fixture
def world(mock_db) -> Iterator[World]:
    bench = World(mock_db, START)
    yield bench
    bench.stop()


def left_open(world: World, *bottle_ids: str) -> None:
    for bottle_id in bottle_ids:
        world.provision(bottle_id)
        world.open(bottle_id)
    world.after(minutes=10)


def run(world: World, db=None, **kwargs) -> tuple[Sweep, list[str]]:
    """The left-open check on every partition (dispatch, then each partition's run); what it sent."""
    sent: list[str] = []
    result = sweep_all(db if db is not None else world.db, "left_open", now=world.now, send=sent.append, **kwargs)
    return result, sent


def partition_of(bottle_id: str) -> int:
    [found] = [
        p.buckets.index for p in partitions("left_open", get_settings()) if p.buckets.holds(bucket_of(bottle_id))
    ]
    return found


def test_a_send_that_fails_leaves_it_and_the_rest_pending_and_the_next_run_sends_them(world, caplog):
    left_open(world, "bottle-1", "bottle-2", "bottle-3")
    assert partition_of("bottle-1") < partition_of("bottle-2") == partition_of("bottle-3")  # bottle-1's goes first
    world.queue.accepting = 1  # the queue goes away after the first message

    first = world.check("left_open")

    assert [m["bottle_id"] for m in first] == ["bottle-1"]
    assert [(n["bottle_id"], n["delivery"]) for n in world.notifications("left_open")] == [
        ("bottle-1", "queued"),
        ("bottle-2", "pending"),
        ("bottle-3", "pending"),
    ]
    assert "2 left_open notifications stay pending for the next run" in caplog.text
    [failed] = [r.getMessage() for r in caplog.records if "sends failed" in r.getMessage()]
    assert failed.endswith(": queue unreachable"), failed  # the operator's line names the queue's error

    world.queue.accepting = None  # back
    second = world.after(minutes=1).check("left_open")

    # One batch, sent side by side: the queue's order within a batch is not the run's to keep.
    assert sorted(m["bottle_id"] for m in second) == ["bottle-2", "bottle-3"]
    assert {n["delivery"] for n in world.notifications("left_open")} == {"queued"}
    assert world.after(minutes=1).check("left_open") == []


def test_a_run_that_dies_between_a_send_and_its_mark_sends_it_again(world, monkeypatch):
    left_open(world, "bottle-1")
    monkeypatch.setattr(delivery, "_mark_queued", crash)

    with pytest.raises(RuntimeError):
        world.check("left_open")  # the queue has the message; the notification was never marked
    monkeypatch.setattr(delivery, "_mark_queued", REAL_MARK)
    [notification] = world.notifications("left_open")
    assert notification["delivery"] == "pending"

    world.after(minutes=1).check("left_open")

    ids = [json.loads(m)["notification_id"] for m in world.queue.messages]
    assert ids == [notification["_id"]] * 2  # at least once: a duplicate, which the consumer drops by its id
    assert world.notifications("left_open")[0]["delivery"] == "queued"
    assert world.after(minutes=1).check("left_open") == []


def test_sent_notifications_are_marked_in_batches_so_a_crash_resends_at_most_a_batch(world, monkeypatch):
    monkeypatch.setattr(delivery, "MARK_BATCH", 2)
    left_open(world, *(f"bottle-{i}" for i in range(5)))
    world.queue.accepting = 3  # the run dies on its fourth send (not a queue error: the worker is gone)

    def dying(message: str) -> None:
        if world.queue.accepting == 0:
            raise RuntimeError("worker recycled")
        world.queue(message)

    everything = BucketRange(0, 1)  # one partition holding every bottle (CHECK_PARTITIONS=1)
    with pytest.raises(RuntimeError):
        run_check(world.db, "left_open", partition=everything, now=world.now, settings=get_settings(), send=dying)

    assert sorted(n["delivery"] for n in world.notifications("left_open")) == ["pending"] * 3 + ["queued"] * 2


def crash(*args, **kwargs):
    raise RuntimeError("worker recycled")


def test_a_run_that_dies_between_the_insert_and_the_send_leaves_it_pending_for_the_next_run(world, monkeypatch):
    left_open(world, "bottle-1")
    monkeypatch.setattr(delivery, "send_pending", crash)
    with pytest.raises(RuntimeError):
        world.check("left_open")
    monkeypatch.undo()

    assert len(world.after(minutes=1).check("left_open")) == 1
    assert len(world.notifications("left_open")) == 1


def test_repeated_and_overlapping_runs_record_one_notification(world):
    left_open(world, "bottle-1", "bottle-2")

    first, first_sent = run(world)
    second, second_sent = run(world)  # same instant: an overlapping or retried run

    assert (first.notified, second.notified) == (2, 0)
    assert len(world.notifications("left_open")) == 2
    assert sorted(json.loads(m)["bottle_id"] for m in first_sent + second_sent) == ["bottle-1", "bottle-2"]


def test_bottles_are_swept_in_batches(world, monkeypatch):
    monkeypatch.setenv("CHECK_BATCH_SIZE", "2")
    get_settings.cache_clear()
    left_open(world, *(f"bottle-{i}" for i in range(5)))

    result, sent = run(world)

    assert (result.examined, result.notified, result.queued, len(sent)) == (5, 5, 5, 5)


def test_messages_beyond_a_partition_s_cap_are_sent_by_its_following_runs(world, monkeypatch):
    monkeypatch.setenv("QUEUE_MESSAGES_PER_PARTITION", "2")
    get_settings.cache_clear()
    bottles = [f"bottle-{i}" for i in range(5)]
    left_open(world, *bottles)
    per_partition = Counter(partition_of(b) for b in bottles)
    assert sorted(per_partition.values()) == [2, 3]  # two partitions: one over the cap, one at it

    runs = [world.after(minutes=1).check("left_open") for _ in range(3)]

    # Each partition sends at most 2 a run, whatever the others send: no fleet-wide cap.
    assert [len(messages) for messages in runs] == [4, 1, 0]
    assert all(count <= 2 for m in runs for count in Counter(partition_of(x["bottle_id"]) for x in m).values())
    assert sorted(m["bottle_id"] for m in world.sent) == bottles
    assert {n["delivery"] for n in world.notifications()} == {"queued"}


def test_a_run_stops_at_its_time_budget_and_the_next_one_carries_on(world, monkeypatch):
    monkeypatch.setenv("CHECK_BATCH_SIZE", "2")
    monkeypatch.setenv("CHECKS_TIME_BUDGET_SECONDS", "1")
    get_settings.cache_clear()
    left_open(world, *(f"bottle-{i}" for i in range(5)))
    everything = BucketRange(0, 1)  # one partition holding every bottle (CHECK_PARTITIONS=1)
    ticks = iter(range(0, 1000, 2))  # every batch takes two "seconds"

    def run_everything(**kwargs):
        settings = get_settings()
        return run_check(
            world.db, "left_open", partition=everything, now=world.now, settings=settings, send=world.queue, **kwargs
        )

    first = run_everything(clock=lambda: float(next(ticks)))
    second = run_everything()

    assert (first.complete, first.examined, first.notified) == (False, 2, 2)
    assert (second.complete, second.notified) == (True, 3)
    assert len(world.notifications("left_open")) == 5


def test_throttled_writes_are_retried_and_record_one_notification(world):
    left_open(world, "bottle-1", "bottle-2")
    throttling = ThrottlingDatabase(world.db, {"notifications.bulk_write": 2, "bottles.bulk_write": 1}, partial=True)

    result, sent = run(world, db=throttling)

    assert (result.notified, len(sent)) == (2, 2)
    assert len(world.notifications("left_open")) == 2
    assert world.db[schema.BOTTLES].count_documents({"open_pending": False}) == 2


def test_a_throttled_get_more_of_the_sweep_is_retried_and_the_run_completes(world, monkeypatch):
    set_setting(monkeypatch, "CHECK_BATCH_SIZE", "2")
    set_setting(monkeypatch, "CHECK_PARTITIONS", "1")
    left_open(world, *(f"bottle-{i}" for i in range(7)))
    throttling = ThrottlingDatabase(world.db, {"bottles.getMore": 2})

    result, sent = run(world, db=throttling)

    assert throttling.calls.count("bottles.getMore") == 2  # both throttled getMores happened, and were retried
    assert result.complete
    assert (result.notified, len(sent)) == (7, 7)
    assert len(world.notifications("left_open")) == 7
    assert world.db[schema.BOTTLES].count_documents({"open_pending": True}) == 0


def test_a_past_due_run_is_an_ordinary_run(world):
    left_open(world, "bottle-1")
    assert len(world.check("left_open", past_due=True)) == 1
    assert world.after(minutes=1).check("left_open", past_due=True) == []


# --- the morning peak ---------------------------------------------------------------------------------------------


def pending_peak(db, count: int, now: datetime) -> list[str]:
    """`count` pending left-open notifications, recorded as a check records them; their ids."""
    episodes = [
        Episode(f"bottle-{i}", f"user-{i}", "aspirin", "left_open", now - timedelta(minutes=20)) for i in range(count)
    ]
    notifications.record(db, episodes, now, RetryPolicy())
    return [e.notification_id for e in episodes]


class SlowQueue:
    """A queue that takes `seconds` a send, on a clock of its own (FakeTime) or the real one; keeps what it got."""

    def __init__(self, seconds: float, time_: "FakeTime | None" = None) -> None:
        self.seconds, self.time = seconds, time_
        self.messages: list[str] = []
        self._lock = threading.Lock()

    def __call__(self, message: str) -> None:
        if self.time is None:
            time.sleep(self.seconds)
        with self._lock:
            if self.time is not None:
                self.time.now += self.seconds
            self.messages.append(json.loads(message)["notification_id"])


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def peak_run(world: World, send, **kwargs) -> CheckRun:
    everything = BucketRange(0, 1)  # one partition holding every notification
    return run_check(
        world.db, "left_open", partition=everything, now=world.now, settings=get_settings(), send=send, **kwargs
    )


def test_a_peak_longer_than_the_run_s_deadline_sends_none_twice_and_marks_every_one(world, monkeypatch):
    """The morning peak scaled down: 300 notifications at 30 ms a send (9 s one after another) against a run of
    1 s plus a request deadline of 1 s. With one deadline for the whole run, the first mark came after it: the run
    failed with 100 sent and 0 marked, and its retry sent them again."""
    set_setting(monkeypatch, "CHECKS_TIME_BUDGET_SECONDS", "1")
    set_setting(monkeypatch, "REQUEST_DEADLINE_SECONDS", "1")
    ids = pending_peak(world.db, 300, world.now)
    queue = SlowQueue(0.03)

    runs = [peak_run(world, queue) for _ in range(10) if len(queue.messages) < len(ids)]

    assert sorted(queue.messages) == sorted(ids)  # each once
    assert {n["delivery"] for n in world.notifications("left_open")} == {"queued"}
    assert sum(r.queued for r in runs) == 300
    assert not runs[-1].send_out_of_time


def test_a_run_counts_as_queued_only_the_notifications_it_marked(world):
    """An overlapping run of the partition marks them queued while this one sends them: both sent (at least once;
    the consumer deduplicates), and this run marked none, so it counts none."""
    pending_peak(world.db, 3, world.now)

    def send_while_another_run_marks(message: str) -> None:
        world.db[schema.NOTIFICATIONS].update_many({}, {"$set": {"delivery": "queued"}})

    assert peak_run(world, send_while_another_run_marks).queued == 0
    assert peak_run(world, send_while_another_run_marks).queued == 0  # and nothing is left pending to send
    assert {n["delivery"] for n in world.notifications("left_open")} == {"queued"}


def recorded_pending(monkeypatch) -> list[int | None]:
    """What each check run records as left pending (metrics.check_run's `pending`)."""
    seen: list[int | None] = []

    def check_run(kind, *, partition, budget_exhausted, pending):
        seen.append(pending)

    monkeypatch.setattr(metrics, "check_run", check_run)
    return seen


def test_a_run_at_its_cap_reports_what_is_left_pending_though_another_run_marked_one(world, monkeypatch):
    """It sent all 3 it could and marked 2: fewer marked than its cap must not read as "sent everything"."""
    set_setting(monkeypatch, "QUEUE_MESSAGES_PER_PARTITION", "3")
    pending_peak(world.db, 5, world.now)
    seen = recorded_pending(monkeypatch)
    first = [True]

    def send_while_another_run_marks_one(message: str) -> None:
        try:
            first.pop()
        except IndexError:
            return
        notification_id = json.loads(message)["notification_id"]
        world.db[schema.NOTIFICATIONS].update_one({"_id": notification_id}, {"$set": {"delivery": "queued"}})

    assert peak_run(world, send_while_another_run_marks_one).queued == 2
    assert seen == [2]


def test_a_fault_counting_what_is_left_pending_does_not_fail_a_run_that_sent(world, monkeypatch, caplog):
    """The sends are done and marked: a query fault (not an outage) in the count that follows leaves the count
    unknown, logged with its trace, and the run stands (failing it would only run it again)."""
    set_setting(monkeypatch, "QUEUE_MESSAGES_PER_PARTITION", "2")
    ids = pending_peak(world.db, 3, world.now)
    seen = recorded_pending(monkeypatch)

    def faulty_count(*args, **kwargs):
        raise OperationFailure("unknown operator: $bad", code=2)

    monkeypatch.setattr(mongomock.Collection, "count_documents", faulty_count)
    queue = SlowQueue(0)

    assert peak_run(world, queue).queued == 2
    assert seen == [None]
    assert len(queue.messages) == 2
    assert set(queue.messages) <= set(ids)
    [fault] = [r for r in caplog.records if "not counted" in r.getMessage()]
    assert fault.getMessage() == "left_open 0/1: pending notifications not counted: a database fault"
    assert fault.exc_info is not None  # its trace


def test_an_outage_counting_what_is_left_pending_is_logged_naming_the_check_partition_and_error(
    world, monkeypatch, caplog
):
    """The store unreachable for the count after the sends: the run stands, the count is unknown, and the
    operator's warning names the check, the partition and what went wrong."""
    set_setting(monkeypatch, "QUEUE_MESSAGES_PER_PARTITION", "2")
    set_setting(monkeypatch, "REQUEST_DEADLINE_SECONDS", "0.2")
    pending_peak(world.db, 3, world.now)
    seen = recorded_pending(monkeypatch)

    def unreachable(*args, **kwargs):
        raise AutoReconnect("connection refused")

    monkeypatch.setattr(mongomock.Collection, "count_documents", unreachable)

    with caplog.at_level(logging.WARNING):
        assert peak_run(world, SlowQueue(0)).queued == 2

    assert seen == [None]
    [warning] = [r.getMessage() for r in caplog.records if "not counted" in r.getMessage()]
    assert warning.startswith("left_open 0/1: pending notifications not counted: database unavailable")


def test_sending_stops_at_the_run_s_send_deadline_and_the_next_runs_send_the_rest(world, monkeypatch, caplog):
    set_setting(monkeypatch, "CHECKS_TIME_BUDGET_SECONDS", "0.5")
    set_setting(monkeypatch, "REQUEST_DEADLINE_SECONDS", "0.2")
    ids = pending_peak(world.db, 250, world.now)
    time_ = FakeTime()
    queue = SlowQueue(0.01, time_)  # 100 sends: 1 s, past the 0.5 s budget

    first = peak_run(world, queue, clock=time_)

    assert (first.queued, first.send_out_of_time, first.send_failed) == (100, True, False)
    assert "150 left_open notifications stay pending for the next run" in caplog.text
    assert Counter(n["delivery"] for n in world.notifications("left_open")) == {"queued": 100, "pending": 150}
    later = [peak_run(world, queue, clock=time_) for _ in range(2)]
    assert [r.queued for r in later] == [100, 50]
    assert sorted(queue.messages) == sorted(ids)
    assert {n["delivery"] for n in world.notifications("left_open")} == {"queued"}


def test_a_failed_send_among_concurrent_ones_leaves_only_it_and_the_batches_after_it_pending(
    world, monkeypatch, caplog
):
    monkeypatch.setattr(delivery, "MARK_BATCH", 10)
    pending_peak(world.db, 30, world.now)
    in_order = [n["_id"] for n in world.db[schema.NOTIFICATIONS].find().sort(delivery.OLDEST_FIRST)]
    refused = in_order[13]  # in the second batch of 10
    got: list[str] = []

    def flaky(message: str) -> None:
        notification_id = json.loads(message)["notification_id"]
        if notification_id == refused:
            raise delivery.SendFailed("refused")
        got.append(notification_id)

    run = peak_run(world, flaky)

    assert (run.queued, run.send_failed) == (19, True)  # the first batch, and the second but the refused one
    queued = {n["_id"] for n in world.notifications("left_open") if n["delivery"] == "queued"}
    assert queued == set(got)
    assert refused not in queued
    assert "1 of 10 sends failed; 11 left_open notifications stay pending for the next run" in caplog.text


def test_queue_send_concurrency_sets_how_many_sends_are_in_flight_at_once(world, monkeypatch):
    """QUEUE_SEND_CONCURRENCY=3: a batch goes out three sends at a time, never more (the pool's own default
    would be min(32, CPUs + 4)), and every notification is sent and marked."""
    set_setting(monkeypatch, "QUEUE_SEND_CONCURRENCY", "3")
    ids = pending_peak(world.db, 30, world.now)
    lock = threading.Lock()
    in_flight, most, sent = 0, 0, []

    def send(message: str) -> None:
        nonlocal in_flight, most
        with lock:
            in_flight += 1
            most = max(most, in_flight)
        time.sleep(0.02)
        with lock:
            in_flight -= 1
            sent.append(json.loads(message)["notification_id"])

    run = peak_run(world, send)

    assert most == 3
    assert (run.queued, sorted(sent)) == (30, sorted(ids))


def test_no_batch_starts_once_the_send_deadline_is_reached(world, monkeypatch):
    """A run of 1 s whose first batch of 64 sends takes exactly 1 s (1/64 s each, on the run's clock): the send
    deadline is reached, not yet passed, and the second batch is left pending for the next run all the same."""
    set_setting(monkeypatch, "CHECKS_TIME_BUDGET_SECONDS", "1")
    set_setting(monkeypatch, "REQUEST_DEADLINE_SECONDS", "0.5")
    monkeypatch.setattr(delivery, "MARK_BATCH", 64)
    pending_peak(world.db, 100, world.now)
    time_ = FakeTime()

    first = peak_run(world, SlowQueue(1 / 64, time_), clock=time_)

    assert (time_.now, first.queued, first.send_out_of_time) == (1.0, 64, True)
    assert Counter(n["delivery"] for n in world.notifications("left_open")) == {"queued": 64, "pending": 36}


@pytest.fixture
def open_bottles_world(mock_db: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    """Three bottles left open for 10 minutes, in one check partition."""
    set_setting(monkeypatch, "CHECK_PARTITIONS", "1")
    bench = World(mock_db, START)
    for bottle_id in ("bottle-1", "bottle-2", "bottle-3"):
        bench.provision(bottle_id)
        bench.open(bottle_id)
    bench.after(minutes=10)
    yield bench
    bench.stop()


def test_the_notifications_a_failed_send_left_pending_are_counted_for_the_metric(
    open_bottles_world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    reported: list[int | None] = []
    monkeypatch.setattr(metrics, "check_run", lambda kind, **labels: reported.append(labels["pending"]))
    open_bottles_world.queue.accepting = 1  # the queue takes one message, then fails

    done = sweep_all(open_bottles_world.db, "left_open", now=open_bottles_world.now, send=open_bottles_world.queue)

    assert (done.notified, done.queued, done.send_failed) == (3, 1, True)
    assert reported == [2]


def test_a_store_down_through_the_sweep_fails_the_run_as_an_outage(
    open_bottles_world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    set_setting(monkeypatch, "STORE_MAX_RETRIES", "1")
    set_setting(monkeypatch, "STORE_RETRY_BASE_MS", "1")
    down = ThrottlingDatabase(open_bottles_world.db, {"bottles.find": float("inf")})

    with pytest.raises(StoreUnavailable):
        sweep_all(down, "left_open", now=open_bottles_world.now, send=open_bottles_world.queue, settings=get_settings())

    assert open_bottles_world.queue.messages == []
