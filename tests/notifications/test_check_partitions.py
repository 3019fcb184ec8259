"""The checks' sweeps split into partitions: each timer run dispatches one work message per bucket range, the
worker `run_check_partition` sweeps one range and sends only that range's notifications, a malformed message
fails (so the host retries it, then poisons it), each partition keeps its own time budget, and partitions swept
side by side, or one partition swept twice at once (a message delivered twice, or to two workers), still record
one notification per episode."""

import json
import threading
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import pytest

from shared.notifications.checks.partitions import CheckPartition, partitions
from shared.notifications.checks.run import CheckRun, run_check
from shared.notifications.documents import KINDS, Kind
from shared.settings import get_settings
from shared.store import schema
from shared.store.partitioning import BUCKETS, BucketRange, bucket_of
from tests.checking import World, dispatched, sweep_all, work
from tests.report_client import set_setting
from tests.threads import at_once
from tools.host.worker import InvocationFailed
from tools.local_host import LocalHost

START = datetime(2026, 5, 4, 9, 0, tzinfo=UTC)
# Due every hour with a minute's grace: 90 minutes after provisioning, with the bottle opened and never heard
# from, a bottle is late, left open and silent at once.
HOURLY = {"schedule": {"every_hours": 1}, "grace_minutes": 1}
TROUBLE_AT = START + timedelta(minutes=90)


@pytest.fixture
def world(mock_db: Any) -> Iterator[World]:
    bench = World(mock_db, START)
    yield bench
    bench.stop()


def in_trouble(world: World, *bottle_ids: str) -> None:
    """Bottles late, left open and silent at TROUBLE_AT (the world's clock is left there)."""
    for bottle_id in bottle_ids:
        world.at(START).provision(bottle_id, **HOURLY)
        world.open(bottle_id)
    world.at(TROUBLE_AT)


def partition_of(bottle_id: str, count: int = 4) -> BucketRange:
    [found] = [p.buckets for p in partitions("left_open", get_settings()) if p.buckets.holds(bucket_of(bottle_id))]
    assert found.count == count
    return found


def message_for(kind: Kind, partition: BucketRange) -> str:
    return CheckPartition(kind, partition).message()


# --- dispatch ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("count", [1, 4, 7])
def test_each_timer_run_dispatches_one_message_per_partition_covering_every_bucket_once(
    monkeypatch: pytest.MonkeyPatch, count: int
) -> None:
    set_setting(monkeypatch, "CHECK_PARTITIONS", str(count))

    for kind in KINDS:
        messages = [json.loads(m) for m in dispatched(kind)]

        assert messages == [{"kind": kind, "partition": i, "of": count} for i in range(count)]
        ranges = [BucketRange(m["partition"], m["of"]) for m in messages]
        covered = Counter(bucket for r in ranges for bucket in range(r.low, r.high))
        assert covered == Counter(range(BUCKETS))  # every bucket, once


# --- malformed work messages -------------------------------------------------------------------------------------


MALFORMED = [
    "not json",
    "[1, 2]",
    '{"kind": "left_open", "partition": 0}',  # no "of"
    '{"kind": "left_open", "partition": 4, "of": 4}',  # no such partition
    '{"kind": "left_open", "partition": -1, "of": 4}',
    '{"kind": "left_open", "partition": 0, "of": 2048}',  # more partitions than buckets
    '{"kind": "left_open", "partition": true, "of": 4}',
    '{"kind": "left_open", "partition": "1", "of": 4}',
    '{"kind": "lost_cap", "partition": 0, "of": 4}',
    '{"kind": "left_open", "partition": 0, "of": 4, "extra": 1}',
]


@pytest.mark.parametrize("body", MALFORMED)
def test_a_malformed_work_message_fails_the_invocation_and_sweeps_nothing(world: World, body: str) -> None:
    in_trouble(world, "bottle-1")

    with pytest.raises(InvocationFailed, match=r"ValueError: .*(work message|partition)"):
        work(body)

    assert world.notifications() == []
    assert world.queue.messages == []


def test_the_host_retries_a_malformed_work_message_then_moves_it_to_the_poison_queue(
    registered_functions: dict[str, Any], world: World
) -> None:
    host = LocalHost.load()
    checks_queue = get_settings().checks_queue
    host.service.send(checks_queue, '{"kind": "left_open", "partition": 9, "of": 4}', now=START)

    outcomes = []
    for attempt in range(6):  # a retry is visible again after host.json's visibilityTimeout, 30 s
        report = host.deliver(now=START + attempt * timedelta(seconds=30))
        outcomes += [d.outcome for d in report.deliveries]

    assert outcomes == ["retry"] * 4 + ["poisoned"]
    assert host.queues[f"{checks_queue}-poison"] == ['{"kind": "left_open", "partition": 9, "of": 4}']


# --- a partition keeps to its own ----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_a_partition_sweeps_and_sends_only_its_own_bottles_notifications(world: World, kind: Kind) -> None:
    mine, theirs = partition_of("bottle-1"), partition_of("bottle-2")
    assert mine != theirs
    in_trouble(world, "bottle-1", "bottle-2")
    theirs_before = world.db[schema.BOTTLES].find_one({"_id": "bottle-2"})
    beats_before = world.db[schema.BOTTLE_HEARTBEATS].find_one({"_id": "bottle-2"})

    work(message_for(kind, mine))

    assert [n["bottle_id"] for n in world.notifications(kind)] == ["bottle-1"]
    assert [json.loads(m)["bottle_id"] for m in world.queue.messages] == ["bottle-1"]
    assert world.db[schema.BOTTLES].find_one({"_id": "bottle-2"}) == theirs_before  # not even marked
    assert world.db[schema.BOTTLE_HEARTBEATS].find_one({"_id": "bottle-2"}) == beats_before

    world.queue.accepting = 0  # their run finds bottle-2 in trouble, but the queue is down
    work(message_for(kind, theirs))
    world.queue.accepting = None
    work(message_for(kind, mine))  # my next run: nothing of mine pending, and theirs is not mine to send

    assert [(n["bottle_id"], n["delivery"]) for n in world.notifications(kind)] == [
        ("bottle-1", "queued"),
        ("bottle-2", "pending"),
    ]
    work(message_for(kind, theirs))  # their next run sends it
    assert [json.loads(m)["bottle_id"] for m in world.queue.messages] == ["bottle-1", "bottle-2"]
    assert {n["delivery"] for n in world.notifications(kind)} == {"queued"}


def test_bottles_and_their_notifications_carry_the_bucket_their_partition_selects(world: World) -> None:
    in_trouble(world, "bottle-1")
    world.check("left_open")

    bottle = world.db[schema.BOTTLES].find_one({"_id": "bottle-1"})
    [notification] = world.notifications("left_open")
    assert bottle["bucket"] == notification["bucket"] == bucket_of("bottle-1")

    # A bottle stored before the sweeps selected by bucket gets it with its next PUT, and is swept again.
    world.db[schema.BOTTLES].update_one({"_id": "bottle-1"}, {"$unset": {"bucket": ""}})
    world.close("bottle-1")
    world.after(minutes=1).check("left_open")
    assert world.notifications("left_open")[0]["resolved_at"] is None  # unseen: outside every partition
    world.provision("bottle-1", **HOURLY)
    world.after(minutes=1).check("left_open")
    assert world.notifications("left_open")[0]["resolved_at"] == world.now


def test_each_partition_has_its_own_time_budget(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    set_setting(monkeypatch, "CHECK_BATCH_SIZE", "1")
    set_setting(monkeypatch, "CHECKS_TIME_BUDGET_SECONDS", "1")
    slow, quick = partition_of("bottle-0"), partition_of("bottle-2")
    in_trouble(world, "bottle-0", "bottle-1", "bottle-4", "bottle-2", "bottle-3")  # three in slow, two in quick
    ticks = iter(range(0, 1000, 2))  # every batch of the slow partition takes two "seconds"

    def run(partition: BucketRange, **options: Any) -> CheckRun:
        settings = get_settings()
        return run_check(
            world.db, "left_open", partition=partition, now=world.now, settings=settings, send=world.queue, **options
        )

    stopped = run(slow, clock=lambda: float(next(ticks)))
    finished = run(quick)

    assert (stopped.complete, stopped.examined, stopped.notified) == (False, 1, 1)
    assert (finished.complete, finished.notified, finished.queued) == (True, 2, 2)
    carried_on = run(slow)
    assert (carried_on.complete, carried_on.notified) == (True, 2)
    assert len(world.notifications("left_open")) == 5


# --- side by side, and twice at once, on a real server -------------------------------------------------------------


def episodes_by_kind(db: Any) -> Counter[tuple[str, str]]:
    return Counter((n["kind"], n["bottle_id"]) for n in db[schema.NOTIFICATIONS].find())


@pytest.mark.integration
def test_partitions_side_by_side_each_swept_twice_at_once_notify_each_episode_once(real_db: Any) -> None:
    world = World(real_db, START)
    bottles = [f"bottle-{i}" for i in range(16)]
    try:
        in_trouble(world, *bottles)
        sent: list[str] = []
        lock = threading.Lock()

        def send(message: str) -> None:
            with lock:
                sent.append(message)

        settings, now = get_settings(), world.now
        for kind in KINDS:
            # Every partition's work message delivered twice, all eight runs at once on their own threads.
            at_once(
                *[
                    partial(run_check, real_db, kind, partition=p.buckets, now=now, settings=settings, send=send)
                    for p in partitions(kind, settings) * 2
                ]
            )

        # One notification per (kind, bottle); every one sent, at least once, and marked queued.
        assert episodes_by_kind(real_db) == Counter({(k, b): 1 for k in KINDS for b in bottles})
        assert {json.loads(m)["notification_id"] for m in sent} == {
            n["_id"] for n in real_db[schema.NOTIFICATIONS].find()
        }
        assert {n["delivery"] for n in real_db[schema.NOTIFICATIONS].find()} == {"queued"}
        # And the bottles were marked: the next sweeps find nothing new.
        for kind in KINDS:
            again = sweep_all(real_db, kind, now=world.now + timedelta(minutes=1), send=send)
            assert (again.notified, again.queued) == (0, 0), kind
    finally:
        world.stop()


@pytest.mark.integration
def test_a_timer_run_twice_with_its_messages_delivered_to_four_workers_notifies_each_episode_once(
    real_db: Any, registered_functions: dict[str, Any]
) -> None:
    host = LocalHost.load()
    world = World(real_db, START)
    bottles = [f"bottle-{i}" for i in range(8)]
    try:
        in_trouble(world, *bottles)
        for timer in ("check_open_bottles", "check_silent_bottles", "check_late_doses"):
            host.run_timer(timer, now=TROUBLE_AT)
            host.run_timer(timer, past_due=True, now=TROUBLE_AT)  # an overlapping run: every message twice
        report = host.deliver(now=TROUBLE_AT, workers=4)
    finally:
        world.stop()

    assert (report.delivered, report.failed) == (2 * 3 * 4, 0)
    assert episodes_by_kind(real_db) == Counter({(k, b): 1 for k in KINDS for b in bottles})
    sent = Counter(json.loads(m)["notification_id"] for m in host.queues[get_settings().notifications_queue])
    assert set(sent) == {n["_id"] for n in real_db[schema.NOTIFICATIONS].find()}
