"""A late-dose sweep with a spread (CHECK_LATE_DOSES_SPREAD_MINUTES) spreads its batches evenly over it, and sends
each batch's notifications before it waits for the next, so the morning peak's writes and sends land over the
check's interval instead of in its first minute (autoscale bills each hour at its peak), every notification once,
none later than its batch; small sweeps, the other checks and runs without a `sleep` run as before. On a store
that takes time to write a batch: the pace counts batches, not bottles; a sweep behind its pace never waits; a wait
of under a second is still kept; and only the waits, not the work, are left out of the run's time budget."""

import json
import logging
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared.notifications import documents
from shared.notifications.checks.partitions import CheckPartition
from shared.notifications.checks.run import CheckRun, run_check
from shared.notifications.delivery import SendFailed
from shared.notifications.documents import Kind
from shared.settings import get_settings
from shared.store import schema
from shared.store.partitioning import BucketRange
from tests.checking import World, work
from tests.fake_time import FakeTime
from tests.report_client import set_setting

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


@pytest.fixture
def paced_world(mock_db: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    """The world above with its 4-minute spread stated: the slow store's tests below count on it."""
    set_setting(monkeypatch, "CHECK_PARTITIONS", "1")
    set_setting(monkeypatch, "CHECK_BATCH_SIZE", "1")
    set_setting(monkeypatch, "CHECK_LATE_DOSES_SPREAD_MINUTES", "4")
    bench = World(mock_db, START)
    yield bench
    bench.stop()


def slow_store(monkeypatch: pytest.MonkeyPatch, time_: FakeTime, seconds: float) -> None:
    """Recording a batch's notifications takes `seconds` on the run's clock."""
    record = documents.record

    def slow(*args: Any, **kwargs: Any) -> Any:
        time_.now += seconds
        return record(*args, **kwargs)

    monkeypatch.setattr(documents, "record", slow)


def test_the_pace_counts_batches_not_bottles(paced_world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """Six late bottles, two a batch: three batches, fewer than the spread has minutes, so the sweep runs at once."""
    set_setting(monkeypatch, "CHECK_BATCH_SIZE", "2")
    late(paced_world, BOTTLES)
    time_, sent_at = FakeTime(), list[float]()

    done = run(paced_world, "late_dose", time_, sent_at)

    assert (done.paced, time_.slept, done.examined, done.queued) == (False, [], 6, 6)
    assert sent_at == [0.0] * 6


def test_a_sweep_slower_than_its_pace_never_waits(paced_world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """A spread of a minute, and each batch takes 70 s, longer than the whole spread: no batch is ever early, so
    nothing waits and the run's log line says it was not paced."""
    set_setting(monkeypatch, "CHECK_LATE_DOSES_SPREAD_MINUTES", "1")
    set_setting(monkeypatch, "CHECKS_TIME_BUDGET_SECONDS", "530")  # with the spread, within the function timeout
    late(paced_world, BOTTLES)
    time_ = FakeTime()
    slow_store(monkeypatch, time_, 70)

    done = run(paced_world, "late_dose", time_, [])

    assert (done.paced, time_.slept) == (False, [])
    assert (done.complete, done.examined, done.notified, done.queued) == (True, 6, 6, 6)


def test_a_sweep_behind_its_pace_sends_after_its_last_batch_and_logs_that_it_was_not_paced(
    paced_world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As above, each send taking a second: every batch after the first is due at once (the sweep is behind), so
    none is preceded by a send; the notifications go out after the last batch (420 s of work), and the log line
    says the run was not paced, though sends took time."""
    set_setting(monkeypatch, "CHECK_LATE_DOSES_SPREAD_MINUTES", "1")
    set_setting(monkeypatch, "CHECKS_TIME_BUDGET_SECONDS", "530")  # with the spread, within the function timeout
    late(paced_world, BOTTLES)
    time_ = FakeTime()
    slow_store(monkeypatch, time_, 70)
    sent_at: list[float] = []

    def slow_send(message: str) -> None:
        paced_world.queue(message)
        time_.now += 1
        sent_at.append(time_())

    done = run_check(
        paced_world.db,
        "late_dose",
        partition=WHOLE,
        now=paced_world.now,
        settings=get_settings(),
        send=slow_send,
        clock=time_,
        sleep=time_.sleep,
    )

    assert (done.paced, time_.slept, done.queued) == (False, [], 6)
    assert min(sent_at) > 420


def test_a_paced_sweep_stops_sending_once_a_send_failed(world: World) -> None:
    """The queue takes the first batch's notification at the first wait, then fails: the run tries it no more at
    its later waits nor at its end (the rest stays pending for the next run), though its batches go on."""
    late(world, BOTTLES)
    fake = FakeTime()
    attempts: list[float] = []

    def failing_after_one(message: str) -> None:
        attempts.append(fake())
        if len(attempts) > 1:
            raise SendFailed("queue unreachable")
        world.queue(message)

    done = run_check(
        world.db,
        "late_dose",
        partition=WHOLE,
        now=world.now,
        settings=get_settings(),
        send=failing_after_one,
        clock=fake,
        sleep=fake.sleep,
    )

    assert attempts == pytest.approx([0, 48])  # at the first wait (accepted), at the second (refused), no more
    assert (done.queued, done.send_failed, done.notified) == (1, True, 6)


def test_a_batch_due_in_under_a_second_is_waited_for(paced_world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """A spread of a minute, and the first batch takes 57.5 s of it: the second is due 0.5 s later (the 2.5 s left
    spread over the five batches left), and waits that half second; after it the spread is over and none waits."""
    set_setting(monkeypatch, "CHECK_LATE_DOSES_SPREAD_MINUTES", "1")
    set_setting(monkeypatch, "CHECKS_TIME_BUDGET_SECONDS", "530")  # with the spread, within the function timeout
    late(paced_world, BOTTLES)
    time_ = FakeTime()
    slow_store(monkeypatch, time_, 57.5)

    done = run(paced_world, "late_dose", time_, [])

    assert time_.slept == pytest.approx([0.5])
    assert (done.paced, done.complete, done.queued) == (True, True, 6)


def test_a_paced_sweep_s_budget_leaves_out_its_waits_but_not_its_work(
    paced_world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each batch takes 10 s against a budget of 45 s: the run waits between batches (its waits are not work),
    and stops after the fifth batch, once its work passed 45 s; the next run carries on."""
    set_setting(monkeypatch, "CHECKS_TIME_BUDGET_SECONDS", "45")
    late(paced_world, BOTTLES)
    time_ = FakeTime()
    slow_store(monkeypatch, time_, 10)

    done = run(paced_world, "late_dose", time_, [])

    assert len(time_.slept) == 4
    assert time_.now - sum(time_.slept) == pytest.approx(50)  # the work: five batches of 10 s
    assert (done.paced, done.complete, done.examined, done.notified) == (True, False, 5, 5)


class WaitsThatTakeTime(FakeTime):
    """The run's clock, whose paced waits also take a little real time (the first one), as a real wait takes all of
    its own: enough to outlast a store deadline that counted them."""

    def sleep(self, seconds: float) -> None:
        super().sleep(seconds)
        if len(self.slept) == 1:
            time.sleep(0.2)


def test_a_paced_sweep_s_store_deadline_leaves_out_its_waits(
    paced_world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The waits of a paced sweep (four minutes of them by default) are no work: the run's deadline for the store
    (its budget plus a request deadline, here a tenth of a second) counts only its work, so the batches after the
    first wait are still written. (It counted the waits: every store request after the first wait was refused,
    "database did not answer within the deadline", and the run failed.)"""
    set_setting(monkeypatch, "CHECKS_TIME_BUDGET_SECONDS", "0.05")
    set_setting(monkeypatch, "REQUEST_DEADLINE_SECONDS", "0.05")
    late(paced_world, BOTTLES)
    time_ = WaitsThatTakeTime()

    done = run(paced_world, "late_dose", time_, [])

    assert (done.paced, done.complete, done.notified, done.queued) == (True, True, 6, 6)
    assert sorted(sent_ids(paced_world).values()) == [1] * 6


def test_a_sweep_that_used_its_budget_up_still_sends_what_it_recorded(
    paced_world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unpaced, and the first batch takes 50 s of a 45 s budget: the run stops there, and still has a request
    deadline's time to send that batch's notification."""
    set_setting(monkeypatch, "CHECK_LATE_DOSES_SPREAD_MINUTES", "0")
    set_setting(monkeypatch, "CHECKS_TIME_BUDGET_SECONDS", "45")
    late(paced_world, BOTTLES)
    time_ = FakeTime()
    slow_store(monkeypatch, time_, 50)

    done = run(paced_world, "late_dose", time_, [])

    assert (done.complete, done.examined, done.notified) == (False, 1, 1)
    assert (done.queued, done.send_out_of_time) == (1, False)
