"""A paced late-dose sweep (six late bottles, a bottle a batch) on a store that takes time to
write a batch (tests/notifications/test_check_pacing.py's store answers at once): the pace counts batches, not bottles;
a sweep behind its pace never waits; a wait of under a second is still kept; and only the waits, not the work,
are left out of the run's time budget."""

from collections.abc import Iterator
from typing import Any

import pytest

from shared.notifications import documents
from tests.checking import World
from tests.notifications.test_check_pacing import BOTTLES, START, late, run
from tests.report_client import set_setting
from tests.reports.test_partitioned_feeds import FakeTime


@pytest.fixture
def world(mock_db: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
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


def test_the_pace_counts_batches_not_bottles(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """Six late bottles, two a batch: three batches, fewer than the spread has minutes, so the sweep runs at once."""
    set_setting(monkeypatch, "CHECK_BATCH_SIZE", "2")
    late(world, BOTTLES)
    time_, sent_at = FakeTime(), list[float]()

    done = run(world, "late_dose", time_, sent_at)

    assert (done.paced, time_.slept, done.examined, done.queued) == (False, [], 6, 6)
    assert sent_at == [0.0] * 6


def test_a_sweep_slower_than_its_pace_never_waits(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """A spread of a minute, and each batch takes 70 s, longer than the whole spread: no batch is ever early, so
    nothing waits and the run's log line says it was not paced."""
    set_setting(monkeypatch, "CHECK_LATE_DOSES_SPREAD_MINUTES", "1")
    set_setting(monkeypatch, "CHECKS_TIME_BUDGET_SECONDS", "540")
    late(world, BOTTLES)
    time_ = FakeTime()
    slow_store(monkeypatch, time_, 70)

    done = run(world, "late_dose", time_, [])

    assert (done.paced, time_.slept) == (False, [])
    assert (done.complete, done.examined, done.notified, done.queued) == (True, 6, 6, 6)


def test_a_batch_due_in_under_a_second_is_waited_for(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """A spread of a minute, and the first batch takes 57.5 s of it: the second is due 0.5 s later (the 2.5 s left
    spread over the five batches left), and waits that half second; after it the spread is over and none waits."""
    set_setting(monkeypatch, "CHECK_LATE_DOSES_SPREAD_MINUTES", "1")
    set_setting(monkeypatch, "CHECKS_TIME_BUDGET_SECONDS", "540")
    late(world, BOTTLES)
    time_ = FakeTime()
    slow_store(monkeypatch, time_, 57.5)

    done = run(world, "late_dose", time_, [])

    assert time_.slept == pytest.approx([0.5])
    assert (done.paced, done.complete, done.queued) == (True, True, 6)


def test_a_paced_sweep_s_budget_leaves_out_its_waits_but_not_its_work(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each batch takes 10 s against a budget of 45 s: the run waits between batches (its waits are not work),
    and stops after the fifth batch, once its work passed 45 s; the next run carries on."""
    set_setting(monkeypatch, "CHECKS_TIME_BUDGET_SECONDS", "45")
    late(world, BOTTLES)
    time_ = FakeTime()
    slow_store(monkeypatch, time_, 10)

    done = run(world, "late_dose", time_, [])

    assert len(time_.slept) == 4
    assert time_.now - sum(time_.slept) == pytest.approx(50)  # the work: five batches of 10 s
    assert (done.paced, done.complete, done.examined, done.notified) == (True, False, 5, 5)


def test_a_sweep_that_used_its_budget_up_still_sends_what_it_recorded(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unpaced, and the first batch takes 50 s of a 45 s budget: the run stops there, and still has a request
    deadline's time to send that batch's notification."""
    set_setting(monkeypatch, "CHECK_LATE_DOSES_SPREAD_MINUTES", "0")
    set_setting(monkeypatch, "CHECKS_TIME_BUDGET_SECONDS", "45")
    late(world, BOTTLES)
    time_ = FakeTime()
    slow_store(monkeypatch, time_, 50)

    done = run(world, "late_dose", time_, [])

    assert (done.complete, done.examined, done.notified) == (False, 1, 1)
    assert (done.queued, done.send_out_of_time) == (1, False)
