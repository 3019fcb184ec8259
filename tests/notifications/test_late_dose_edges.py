"""Edges of the late-dose check the other tests leave open: the day's limit on sending a late slot, a dose that
arrives after its slot was found late, the bottle leaving the resolve sweep once its notifications are resolved
(so later runs do not read it again), and the counts a partition's run logs."""

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from shared.notifications.checks.partitions import CheckPartition
from shared.store import schema
from shared.store.partitioning import BucketRange
from tests.checking import World, sweep_all, work
from tests.notifications.test_late_doses import DAY, EVENING, MORNING, h
from tests.report_client import set_setting


@pytest.fixture
def world(mock_db: Any) -> Iterator[World]:
    bench = World(mock_db, DAY + h(5))
    bench.provision()
    yield bench
    bench.stop()


def bottle(world: World) -> dict[str, Any]:
    found = world.db[schema.BOTTLES].find_one({"_id": "bottle-1"})
    assert found is not None
    return dict(found)


def leaves_the_resolve_sweep(world: World) -> None:
    """The bottle is out of the resolve sweep's range (no dose pending, or no late slot marked): the next run
    reads nothing."""
    stored = bottle(world)
    assert stored["dose_pending"] is False
    later = sweep_all(world.db, "late_dose", now=world.after(minutes=5).now, send=world.queue)
    assert (later.examined, later.resolved) == (0, 0)


def test_a_slot_that_went_late_exactly_a_day_before_the_check_is_still_sent(world: World) -> None:
    world.at(MORNING).dose()

    messages = world.at(EVENING + h(1) + h(24)).check("late_dose")  # the checks were down for a day

    sent = ["2026-05-04T18:00:00.000Z", "2026-05-05T06:00:00.000Z", "2026-05-05T18:00:00.000Z"]
    assert sorted(m["episode_start"] for m in messages) == sent  # sent side by side: in any order
    assert [n["delivery"] for n in world.notifications("late_dose")] == ["queued"] * 3


def test_a_dose_taken_in_time_but_arriving_after_its_slot_was_found_late_resolves_it_at_once(world: World) -> None:
    world.at(MORNING).dose()
    world.at(EVENING + h(1.1)).check("late_dose")  # the bottle was offline: the evening slot is found late
    assert world.episodes("late_dose") == [EVENING]

    world.dose(at=EVENING + h(1 / 6))  # taken at 18:10, in time, uploaded now
    world.after(minutes=5).check("late_dose")

    [notification] = world.notifications("late_dose")
    assert notification["resolved_at"] == world.now
    assert "late_episode" not in bottle(world)
    leaves_the_resolve_sweep(world)


def test_a_dose_resolving_an_older_late_slot_leaves_the_later_one_notified(world: World) -> None:
    world.at(MORNING).dose()
    world.at(MORNING + h(24)).dose()
    # The checks were down for a day: both evenings are found late, and the second morning's dose resolves the
    # first evening's notification only.
    world.at(EVENING + h(25)).check("late_dose")

    assert world.episodes("late_dose") == [EVENING, EVENING + h(24)]
    first, second = world.notifications("late_dose")
    assert (first["resolved_at"], second["resolved_at"]) == (world.now, None)
    assert bottle(world)["late_episode"] == EVENING + h(24)
    leaves_the_resolve_sweep(world)


def test_a_bottle_marked_late_but_without_a_dose_leaves_the_resolve_sweep_untouched(world: World) -> None:
    """A bottle stored with a late slot and a dose pending but no last dose (as an older version may have left
    it): the run clears the pending dose, resolves nothing, and no later run reads it again."""
    world.at(EVENING + h(1.1)).check("late_dose")
    world.db[schema.BOTTLES].update_one(
        {"_id": "bottle-1"}, {"$set": {"dose_pending": True, "late_episode": EVENING}, "$unset": {"last_dose_time": ""}}
    )

    done = sweep_all(world.db, "late_dose", now=world.after(minutes=5).now, send=world.queue)

    assert (done.examined, done.resolved) == (1, 0)
    assert [n["resolved_at"] for n in world.notifications("late_dose")] == [None, None]
    leaves_the_resolve_sweep(world)


def test_a_partition_s_log_line_counts_every_batch(
    world: World, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Two bottles, a bottle a batch, the checks down for two days: the run's log line sums what both batches
    notified, withheld (late more than a day before) and, after both doses, resolved."""
    set_setting(monkeypatch, "CHECK_BATCH_SIZE", "1")
    set_setting(monkeypatch, "CHECK_LATE_DOSES_SPREAD_MINUTES", "0")
    world.at(DAY + h(5)).provision("bottle-2")
    message = CheckPartition("late_dose", BucketRange(0, 1)).message()

    def logged() -> dict[str, Any]:
        caplog.clear()
        with caplog.at_level(logging.INFO):
            work(message)
        [line] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("invocation run_check")]
        return dict(json.loads(line.split(" ", 2)[2]))

    world.at(EVENING + h(49.5))
    down = logged()
    for bottle_id in ("bottle-1", "bottle-2"):
        world.dose(bottle_id)
    world.after(minutes=5)
    back = logged()

    stored = world.notifications("late_dose")
    withheld = [n for n in stored if n["delivery"] == "withheld"]
    assert (len(stored), len(withheld)) == (12, 8)  # six slots each, four of them late more than a day ago
    assert (down["examined"], down["notified"], down["withheld"], down["resolved"]) == (2, 12, 8, 0)
    assert back["resolved"] == 12
