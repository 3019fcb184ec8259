"""check_late_doses resolves a late slot's notification by a dose the schedule's own matching counts for that slot
(the late dose, or one uploaded late that was in time) or for a later one, or by a dose taken after the slot's
grace ran out (the next dose: the patient resumed). A dose the matching counts for an earlier slot never resolves
it: on a schedule whose slots are closer than twice the grace, one dose between two slots is the earlier one's
only, and the caregiver must not see the later one resolved."""

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest

from shared.notifications.checks import run as check_run
from tests.api import closed, opened
from tests.checking import World
from tests.notifications.dose_day import DAY

# One hour apart: with the default 60-minute grace, a dose between them is within both slots' grace.
OVERLAPPING = {"times": ["07:00", "08:00"], "timezone": "UTC"}
THREE_OVERLAPPING = {"times": ["07:00", "08:00", "09:00"], "timezone": "UTC"}
SPACED = {"times": ["07:00", "19:00"], "timezone": "UTC"}
S7, S8, S9 = DAY + timedelta(hours=7), DAY + timedelta(hours=8), DAY + timedelta(hours=9)


@pytest.fixture
def world(mock_db: Any) -> Iterator[World]:
    """The late-dose tests' bottle world (tests/notifications/test_late_doses.py), from the same day."""
    bench = World(mock_db, DAY + timedelta(hours=5))
    yield bench
    bench.stop()


def m(minutes: float) -> timedelta:
    return timedelta(minutes=minutes)


def resolutions(world: World) -> dict[datetime, datetime | None]:
    """Each late-dose notification's slot and when it was resolved (None: not resolved)."""
    return {n["episode_start"]: n["resolved_at"] for n in world.notifications("late_dose")}


# --- overlapping slots: a dose counted for the earlier slot ------------------------------------------------------


def test_a_dose_counted_for_the_earlier_of_two_overlapping_slots_does_not_resolve_the_later_ones_notification(world):
    world.provision(schedule=OVERLAPPING)

    # 07:10 is within both slots' grace: it is the 07:00 dose, so 08:00 goes late at 09:00.
    world.live("late_dose", until=S8 + m(90), doses=[S7 + m(10)])

    assert resolutions(world) == {S8: None}


def test_a_buffered_dose_for_the_earlier_slot_resolves_only_that_slot(world):
    world.provision(schedule=OVERLAPPING)
    world.live("late_dose", until=S8 + m(90))  # offline: both slots found late
    assert resolutions(world) == {S7: None, S8: None}

    world.dose(at=S7 + m(10))  # taken in time for 07:00, uploaded at 09:30
    world.after(minutes=5).check("late_dose")

    assert resolutions(world) == {S7: world.now, S8: None}


def test_the_later_slot_is_resolved_by_the_next_dose_after_its_grace(world):
    world.provision(schedule=OVERLAPPING)
    world.live("late_dose", until=S8 + m(90), doses=[S7 + m(10)])

    world.live("late_dose", until=S8 + m(100), doses=[S8 + m(95)])

    assert resolutions(world) == {S8: S8 + m(95)}


# --- the plain late dose, the next dose -------------------------------------------------------------------------


def test_a_plain_late_dose_resolves_its_slot(world):
    world.provision(schedule=SPACED)
    world.live("late_dose", until=S7 + m(90), doses=[S7 + m(80)])
    assert resolutions(world) == {S7: S7 + m(80)}


def test_a_late_dose_within_the_next_slots_grace_resolves_the_missed_slot_and_satisfies_the_next(world):
    world.provision(schedule=OVERLAPPING)
    # 08:20 is past 07:00's grace: it is the 08:00 dose, and the patient has resumed.
    world.live("late_dose", until=S8 + m(90), doses=[S7 + m(80)])
    assert resolutions(world) == {S7: S7 + m(80)}


def test_the_next_dose_resolves_every_earlier_missed_slot(world):
    world.provision(schedule=OVERLAPPING)
    world.live("late_dose", until=S8 + m(90))

    world.live("late_dose", until=S8 + m(100), doses=[S8 + m(95)])

    assert resolutions(world) == {S7: S8 + m(95), S8: S8 + m(95)}


# --- a dose uploaded late that was in time ------------------------------------------------------------------------


def test_a_dose_uploaded_late_that_was_in_time_resolves_its_slot(world):
    world.provision(schedule=SPACED)
    world.live("late_dose", until=S7 + m(90))
    assert resolutions(world) == {S7: None}

    world.dose(at=S7 + m(30))
    world.after(minutes=5).check("late_dose")

    assert resolutions(world) == {S7: world.now}


def test_a_dose_uploaded_late_that_the_matching_gives_to_the_later_overlapping_slot_resolves_it(world):
    world.provision(schedule=OVERLAPPING)
    world.live("late_dose", until=S8 + m(90), doses=[S7 + m(10)])
    assert resolutions(world) == {S8: None}

    world.dose(at=S8 + m(30))  # taken in time for 08:00, uploaded at 09:30
    world.after(minutes=5).check("late_dose")

    assert resolutions(world) == {S8: world.now}


# --- several late slots, one dose -------------------------------------------------------------------------------


def test_one_buffered_dose_resolves_its_own_slot_and_those_whose_grace_ran_out_before_it_not_later_ones(world):
    world.provision(schedule=THREE_OVERLAPPING)
    world.live("late_dose", until=S9 + m(90))
    assert resolutions(world) == {S7: None, S8: None, S9: None}

    # 08:50: after 07:00's grace, within 08:00's and 09:00's; counted for 08:00.
    world.dose(at=S8 + m(50))
    world.after(minutes=5).check("late_dose")

    assert resolutions(world) == {S7: world.now, S8: world.now, S9: None}


def test_one_buffered_dose_for_the_first_of_several_overlapping_late_slots_resolves_only_that_one(world):
    world.provision(schedule=THREE_OVERLAPPING)
    world.live("late_dose", until=S9 + m(90))

    world.dose(at=S7 + m(10))
    world.after(minutes=5).check("late_dose")

    assert resolutions(world) == {S7: world.now, S8: None, S9: None}


def test_one_dose_after_several_late_slots_resolves_them_all(world):
    world.provision(schedule=THREE_OVERLAPPING)
    world.live("late_dose", until=S9 + m(90))

    world.live("late_dose", until=S9 + m(100), doses=[S9 + m(95)])

    at = S9 + m(95)
    assert resolutions(world) == {S7: at, S8: at, S9: at}


def test_a_dose_uploaded_after_a_later_one_can_still_resolve_a_later_slot(world):
    world.provision(schedule=THREE_OVERLAPPING)
    world.live("late_dose", until=S9 + m(90))
    world.dose(at=S8 + m(50))
    first = world.after(minutes=5).now
    world.check("late_dose")
    assert resolutions(world) == {S7: first, S8: first, S9: None}

    # Older than the last dose, so the last dose time stays; with it, 08:40 is the 08:00 dose and 08:50 the 09:00 one.
    world.after(minutes=5).dose(at=S8 + m(40))
    world.after(minutes=5).check("late_dose")

    assert resolutions(world) == {S7: first, S8: first, S9: world.now}


def test_a_dose_that_arrives_while_the_check_resolves_is_not_lost(world, monkeypatch):
    world.provision(schedule=THREE_OVERLAPPING)
    world.live("late_dose", until=S9 + m(90))
    world.dose(at=S8 + m(50))  # counted for 08:00 alone: 09:00 stays unresolved
    apply = check_run._apply

    def a_dose_lands_between_the_read_and_the_write(*args: Any, **kwargs: Any) -> None:
        if args[2].resolutions and not arrived:
            arrived.append(True)
            # Older than the last dose: with 08:40 the 08:00 dose, 08:50 is the 09:00 one.
            world.dose(at=S8 + m(40))
        apply(*args, **kwargs)

    arrived: list[bool] = []
    monkeypatch.setattr(check_run, "_apply", a_dose_lands_between_the_read_and_the_write)
    raced = world.after(minutes=5).now
    world.check("late_dose")
    assert arrived
    assert resolutions(world) == {S7: raced, S8: raced, S9: None}  # this run read the bottle before 08:40

    world.after(minutes=5).check("late_dose")

    assert resolutions(world) == {S7: raced, S8: raced, S9: world.now}


# --- every_hours ------------------------------------------------------------------------------------------------

EVERY_2H = {"every_hours": 2}
GRACE_90 = 90


def test_every_hours_a_buffered_dose_for_the_earlier_late_slot_does_not_resolve_the_later_one(world):
    start = world.now
    world.provision(schedule=EVERY_2H, grace_minutes=GRACE_90)
    first, second = start + m(120), start + m(240)
    world.live("late_dose", until=second + m(100))  # offline: both found late
    assert resolutions(world) == {first: None, second: None}

    # Taken in time for the first slot (within its 90-minute grace): the count restarts from it.
    world.dose(at=first + m(84))
    world.after(minutes=5).check("late_dose")

    assert resolutions(world) == {first: world.now, second: None}


def test_every_hours_a_buffered_dose_the_restarted_count_gives_to_a_slot_after_the_notified_one_resolves_it(world):
    start = world.now
    world.provision(schedule=EVERY_2H, grace_minutes=GRACE_90)
    first, second = start + m(120), start + m(240)
    world.live("late_dose", until=second + m(100))

    # 08:24 for the first slot; then the next is due at 10:24, and 10:10 (before 09:00's grace ran out at 10:30)
    # is that dose, taken early.
    world.post("bottle-1", *_dose_events(first + m(84)), *_dose_events(first + m(190)))
    world.after(minutes=5).check("late_dose")

    assert resolutions(world) == {first: world.now, second: world.now}


def _dose_events(at: datetime) -> list[dict[str, Any]]:
    return [opened(at - timedelta(seconds=30)), closed(at, taken=1)]


def test_every_hours_a_dose_from_before_a_schedule_restart_resolves_no_slot_of_the_new_schedule(world):
    """A dose taken just before a PUT restarts the schedule starts the new count (its next slot is due `every`
    after it) but is counted for no slot of it: the first slot, missed, stays unresolved, though it lies within
    the grace after that dose (every hour, a 60-minute grace)."""
    start = world.now
    world.provision(schedule=EVERY_2H)
    taken = start + m(30)
    world.live("late_dose", until=start + m(35), doses=[taken])
    world.provision(schedule={"every_hours": 1})
    first = taken + m(60)

    world.live("late_dose", until=first + m(70))

    assert world.status()["last_dose_time"] is not None
    assert resolutions(world) == {first: None}
