"""A late-dose sweep with a spread (CHECK_LATE_DOSES_SPREAD_MINUTES) spreads its batches evenly over it, and sends
each batch's notifications before it waits for the next, so the morning peak's writes and sends land over the
check's interval instead of in its first minute (autoscale bills each hour at its peak), every notification once,
none later than its batch; small sweeps, the other checks and runs without a `sleep` run as before."""

import json
import logging
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared.notifications.checks.partitions import CheckPartition
from shared.notifications.checks.run import CheckRun, run_check
from shared.notifications.documents import Kind
from shared.settings import get_settings
from shared.store import schema
from shared.store.partitioning import BucketRange
from tests.checking import World, work
from tests.report_client import set_setting
from tests.reports.test_partitioned_feeds import FakeTime

START = datetime(2026, 5, 4, 9, 0, tzinfo=UTC)
HOURLY = {"schedule": {"every_hours": 1}, "grace_minutes": 1}  # late 61 minutes after provisioning
WHOLE = BucketRange(0, 1)
BOTTLES = [f"bottle-{i}" for i in range(6)]


@pytest.fixture
def world(mock_db: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    set_setting(monkeypatch, "CHECK_PARTITIONS", "1")
    set_setting(monkeypatch, "CHECK_BATCH_SIZE", "1")  # one bottle a batch: six late bottles, six batches
    bench = World(mock_db, START)
    yield bench
    bench.stop()


def late(world: World, bottle_ids: list[str]) -> None:
    """Bottles late and left open at once (the world's clock is left there)."""
    for bottle_id in bottle_ids:
        world.at(START).provision(bottle_id, **HOURLY)
        world.open(bottle_id)
    world.at(START + timedelta(minutes=90))


def run(world: World, kind: Kind, fake: FakeTime, sent_at: list[float]) -> CheckRun:
    def send(message: str) -> None:
        world.queue(message)
        sent_at.append(fake())

    return run_check(
        world.db, kind, partition=WHOLE, now=world.now, settings=get_settings(), send=send, clock=fake, sleep=fake.sleep
    )


def sent_ids(world: World) -> Counter[str]:
    return Counter(json.loads(m)["notification_id"] for m in world.queue.messages)


def test_a_late_dose_sweep_spreads_its_batches_and_sends_each_batch_before_it_waits(world: World) -> None:
    late(world, BOTTLES)
    fake, sent_at = FakeTime(), list[float]()

    done = run(world, "late_dose", fake, sent_at)

    # Six batches over 4 minutes: the first at once, then one every 240 / 5 = 48 seconds; each batch's
    # notification goes out when the run waits for the next one, the last at the end of the spread.
    assert sent_at == pytest.approx([0, 48, 96, 144, 192, 240])
    assert sum(fake.slept) == pytest.approx(240)
    assert (done.paced, done.complete, done.notified, done.queued) == (True, True, 6, 6)  # the waits are no work
    assert sorted(sent_ids(world).values()) == [1] * 6  # each notification once
    delivery = [n["delivery"] for n in world.db[schema.NOTIFICATIONS].find({"kind": "late_dose"})]
    assert delivery == ["queued"] * 6


def test_a_paced_sweep_keeps_the_run_s_cap_on_sends_and_the_next_run_sends_the_rest(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    set_setting(monkeypatch, "QUEUE_MESSAGES_PER_PARTITION", "4")
    late(world, BOTTLES)

    first = run(world, "late_dose", FakeTime(), [])
    pending = world.db[schema.NOTIFICATIONS].count_documents({"delivery": "pending"})
    second = run(world, "late_dose", FakeTime(), [])

    assert (first.notified, first.queued, pending) == (6, 4, 2)
    assert (second.notified, second.queued) == (0, 2)
    assert sorted(sent_ids(world).values()) == [1] * 6  # each notification once


@pytest.mark.parametrize(
    ("spread", "bottles"),
    [("0", BOTTLES), ("4", BOTTLES[:3])],  # pacing off; fewer batches (3) than the spread has minutes (4)
)
def test_a_sweep_without_a_spread_or_too_small_to_spread_runs_at_once(
    world: World, monkeypatch: pytest.MonkeyPatch, spread: str, bottles: list[str]
) -> None:
    set_setting(monkeypatch, "CHECK_LATE_DOSES_SPREAD_MINUTES", spread)
    late(world, bottles)
    fake, sent_at = FakeTime(), list[float]()

    done = run(world, "late_dose", fake, sent_at)

    assert (done.paced, fake.slept, done.queued) == (False, [], len(bottles))
    assert set(sent_at) == {0.0}


def test_only_the_late_dose_check_is_paced(world: World) -> None:
    late(world, BOTTLES)  # six bottles left open too
    fake = FakeTime()

    done = run(world, "left_open", fake, [])

    assert (done.paced, fake.slept, done.notified) == (False, [], 6)


def test_without_a_sleep_a_run_is_unpaced_and_counts_nothing(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    late(world, BOTTLES)
    counted: list[Any] = []
    monkeypatch.setattr(type(world.db[schema.BOTTLES]), "count_documents", lambda *a, **k: counted.append(a))

    done = run_check(world.db, "late_dose", partition=WHOLE, now=world.now, settings=get_settings(), send=world.queue)

    assert (done.paced, done.queued, counted) == (False, 6, [])


def test_the_partition_worker_paces_a_late_dose_sweep_and_logs_it(
    world: World, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    late(world, BOTTLES)
    slept: list[float] = []
    # The trigger's own sleep only: patching time.sleep would also catch the driver's monitor threads, which
    # then spin.
    monkeypatch.setattr("functions.checks.sleep", slept.append)

    with caplog.at_level(logging.INFO):
        work(CheckPartition("late_dose", WHOLE).message())

    [line] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("invocation run_check_partition")]
    assert json.loads(line.split(" ", 2)[2])["paced"] is True
    assert len(slept) == 5  # before each batch after the first
    assert len(sent_ids(world)) == 6
