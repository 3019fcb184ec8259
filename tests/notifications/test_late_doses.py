"""check_late_doses: a slot with no dose within its grace is notified once (episode = the slot's due time), on
`times` schedules (DST-correct, several times a day) and `every_hours` ones; slots before provisioning are never
late; a slot found more than a day after it went late is recorded but not sent."""

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from shared.instants import format_instant
from shared.store import schema
from tests.checking import World

# In May, Europe/Rome is UTC+2: the default schedule's 08:00 and 20:00 are 06:00 and 18:00 UTC.
DAY = datetime(2026, 5, 4, tzinfo=UTC)
MORNING, EVENING = DAY + timedelta(hours=6), DAY + timedelta(hours=18)
NEXT_MORNING = MORNING + timedelta(days=1)


@pytest.fixture
def world(mock_db) -> Iterator[World]:
    bench = World(mock_db, DAY + timedelta(hours=5))
    yield bench
    bench.stop()


def h(hours: float) -> timedelta:
    return timedelta(hours=hours)


def test_doses_on_time_or_within_grace_either_side_are_never_late(world):
    world.provision()
    doses = [MORNING + h(0.15), EVENING - h(0.75), NEXT_MORNING + h(55 / 60), EVENING + h(24)]

    assert world.live("late_dose", until=DAY + h(48), doses=doses) == []

    assert world.notifications() == []
    assert world.status()["next_dose_due"] == format_instant(MORNING + h(48))


def test_a_missed_slot_is_notified_once_when_its_grace_has_run_out(world):
    world.provision()
    world.live("late_dose", until=EVENING + h(1) - timedelta(minutes=5), doses=[MORNING])
    assert world.sent == []

    [message] = world.live("late_dose", until=EVENING + h(4))

    assert message == {
        "notification_id": f"bottle-1|late_dose|{format_instant(EVENING)}",
        "user_id": "willcross1024",
        "bottle_id": "bottle-1",
        "medication": "Cordrazine",
        "kind": "late_dose",
        "episode_start": format_instant(EVENING),
        "created_at": format_instant(EVENING + h(1)),
    }
    assert world.episodes("late_dose") == [EVENING]
    assert world.status()["next_dose_due"] == format_instant(NEXT_MORNING)


def test_the_next_dose_resolves_the_missed_slot_and_the_next_miss_is_a_new_episode(world):
    world.provision()
    world.live("late_dose", until=NEXT_MORNING, doses=[MORNING])
    world.live("late_dose", until=EVENING + h(26), doses=[NEXT_MORNING + h(0.1)])

    missed, missed_again = world.notifications("late_dose")
    # The dose at 06:06; the next check, at 06:10, resolves.
    assert (missed["episode_start"], missed["resolved_at"]) == (EVENING, NEXT_MORNING + timedelta(minutes=10))
    assert (missed_again["episode_start"], missed_again["resolved_at"]) == (EVENING + h(24), None)
    assert len(world.sent) == 2


def test_a_dose_after_the_grace_does_not_satisfy_the_slot_but_resolves_its_notification(world):
    world.provision()
    messages = world.live("late_dose", until=MORNING + h(2), doses=[MORNING + h(1.3)])

    assert [m["episode_start"] for m in messages] == [format_instant(MORNING)]
    [notification] = world.notifications("late_dose")
    assert notification["resolved_at"] == MORNING + timedelta(minutes=80)  # the first check after the dose
    assert world.status()["next_dose_due"] == format_instant(EVENING)


def test_a_late_dose_taken_before_any_check_ran_still_makes_the_slot_late(world):
    world.provision()
    world.at(MORNING + h(1.3)).dose()
    world.after(minutes=10).check("late_dose")

    [notification] = world.notifications("late_dose")
    assert notification["episode_start"] == MORNING
    assert notification["resolved_at"] == world.now  # found late and resolved by the same run


def test_a_dose_earlier_than_the_grace_does_not_satisfy_the_slot(world):
    world.provision()
    world.live("late_dose", until=MORNING + h(1.5), doses=[MORNING - h(70 / 60)])
    assert world.episodes("late_dose") == [MORNING]


def test_several_times_a_day_each_slot_stands_alone(world):
    world.provision(schedule={"times": ["07:30", "13:00", "19:30"], "timezone": "Europe/Rome"})
    slots = [DAY + h(5.5), DAY + h(11), DAY + h(17.5)]

    world.live("late_dose", until=DAY + h(24), doses=[slots[0] + h(0.2), slots[2] - h(0.4)])

    assert world.episodes("late_dose") == [slots[1]]
    assert world.status()["next_dose_due"] == format_instant(slots[0] + h(24))


def test_a_bottle_provisioned_mid_day_is_not_late_for_that_mornings_slot(world):
    world.at(DAY + h(12)).provision()
    assert world.status()["next_dose_due"] == format_instant(EVENING)

    world.live("late_dose", until=DAY + h(22))

    assert world.episodes("late_dose") == [EVENING]


def test_spring_forward_a_local_time_that_does_not_exist_is_due_at_the_end_of_the_gap(world):
    # Europe/Rome, 29 March 2026: 02:00 CET jumps to 03:00 CEST, so 02:30 does not exist that day.
    world.at(datetime(2026, 3, 28, 12, 0, tzinfo=UTC)).provision(
        schedule={"times": ["02:30", "08:00"], "timezone": "Europe/Rome"}
    )
    world.live("late_dose", until=datetime(2026, 3, 30, 8, 0, tzinfo=UTC), step=timedelta(minutes=15))

    assert world.episodes("late_dose") == [
        datetime(2026, 3, 29, 1, 0, tzinfo=UTC),  # 03:00 CEST, the end of the gap
        datetime(2026, 3, 29, 6, 0, tzinfo=UTC),  # 08:00 CEST
        datetime(2026, 3, 30, 0, 30, tzinfo=UTC),  # 02:30 CEST
        datetime(2026, 3, 30, 6, 0, tzinfo=UTC),
    ]


def test_fall_back_a_repeated_local_time_is_one_slot_at_its_first_occurrence(world):
    # Europe/Rome, 25 October 2026: 03:00 CEST falls back to 02:00 CET, so 02:30 happens twice.
    world.at(datetime(2026, 10, 24, 12, 0, tzinfo=UTC)).provision(
        schedule={"times": ["02:30"], "timezone": "Europe/Rome"}
    )
    world.live("late_dose", until=datetime(2026, 10, 26, 4, 0, tzinfo=UTC), step=timedelta(minutes=15))

    assert world.episodes("late_dose") == [
        datetime(2026, 10, 25, 0, 30, tzinfo=UTC),  # 02:30 CEST, the first of the two
        datetime(2026, 10, 26, 1, 30, tzinfo=UTC),  # 02:30 CET
    ]


def test_every_hours_notifies_once_per_missed_slot_not_once_per_check(world):
    start = world.now
    world.provision(schedule={"every_hours": 8})

    messages = world.live("late_dose", until=start + h(25))

    assert sorted(m["episode_start"] for m in messages) == [format_instant(start + h(n)) for n in (8, 16, 24)]
    assert world.status()["next_dose_due"] == format_instant(start + h(32))

    world.dose()
    world.after(minutes=5).check("late_dose")
    assert [n["resolved_at"] for n in world.notifications("late_dose")] == [world.now] * 3
    assert world.status()["next_dose_due"] == format_instant(start + h(33))


def test_every_hours_counts_from_the_last_dose_even_an_early_one(world):
    start = world.now
    world.provision(schedule={"every_hours": 8})
    doses = [start + h(7.5), start + h(15), start + h(23.9)]

    assert world.live("late_dose", until=start + h(30), doses=doses) == []
    assert world.status()["next_dose_due"] == format_instant(start + h(31.9))


def test_checks_down_for_two_days_record_every_missed_slot_but_send_only_the_last_days(world):
    world.provision()
    for day in range(3):  # mornings taken, evenings missed
        world.at(MORNING + h(24 * day)).dose()

    messages = world.at(EVENING + h(48 + 1.5)).check("late_dose")

    assert world.episodes("late_dose") == [EVENING, EVENING + h(24), EVENING + h(48)]
    # Late at 19:00 two days ago and yesterday: more than 24 hours before this check saw them.
    assert [n["delivery"] for n in world.notifications("late_dose")] == ["withheld", "withheld", "queued"]
    assert [m["episode_start"] for m in messages] == [format_instant(EVENING + h(48))]
    assert world.after(minutes=5).check("late_dose") == []


def test_every_hours_checks_down_replay_doses_taken_meanwhile(world):
    start = world.now
    world.provision(schedule={"every_hours": 12})
    world.at(start + h(30)).dose()  # after missing the slots at +12 h and +24 h

    messages = world.at(start + h(50)).check("late_dose")

    # +12 h missed; +24 h missed (the dose at +30 h is after its grace); then due 12 h after that dose.
    assert world.episodes("late_dose") == [start + h(12), start + h(24), start + h(42)]
    assert [m["episode_start"] for m in messages] == [format_instant(start + h(42))]
    assert world.status()["next_dose_due"] == format_instant(start + h(54))


def test_a_buffered_dose_counts_for_the_slot_it_was_taken_for(world):
    start = world.now
    world.provision(schedule={"every_hours": 8})
    slot = start + h(8)
    world.live("late_dose", until=slot + h(1.5))  # the bottle is offline: the slot is found late
    assert world.episodes("late_dose") == [slot]

    world.dose(at=slot + h(0.5))  # taken in time, uploaded late
    world.live("late_dose", until=slot + h(9.2), doses=[slot + h(9.1)])

    # Due 8 hours after the buffered dose (+16.5 h), not after the slot (+16 h): the dose at +17.1 h is in time.
    assert world.episodes("late_dose") == [slot]
    assert world.notifications("late_dose")[0]["resolved_at"] is not None


def test_a_buffered_dose_restarts_the_every_hours_count_from_itself(world):
    start = world.now
    world.provision(schedule={"every_hours": 8})
    world.live("late_dose", until=start + h(20), doses=[start + h(7.5)], step=timedelta(minutes=30))
    assert world.episodes("late_dose") == [start + h(15.5)]  # offline: no dose seen for it

    world.dose(at=start + h(15))  # it had been taken on time: uploaded now
    world.live("late_dose", until=start + h(26), step=timedelta(minutes=30))

    # Counted from that dose, the next slot was +23 h (not +23.5 h, the missed slot plus 8 hours).
    assert world.episodes("late_dose") == [start + h(15.5), start + h(23)]
    assert world.status()["next_dose_due"] == format_instant(start + h(31))


def test_a_due_slot_left_behind_by_a_lost_status_write_is_moved_on_without_a_notification(world):
    world.provision()
    world.at(MORNING).dose()
    # As if the status part of that request had failed after the dose was stored.
    world.db[schema.BOTTLES].update_one(
        {"_id": "bottle-1"}, {"$set": {"dose_due": MORNING, "dose_late_at": MORNING + h(1)}}
    )

    world.live("late_dose", until=MORNING + h(3))

    assert world.notifications() == []
    assert world.status()["next_dose_due"] == format_instant(EVENING)


def test_a_schedule_change_takes_effect_from_the_change(world):
    world.provision()
    world.at(MORNING + h(4)).provision(schedule={"times": ["09:00"], "timezone": "Europe/Rome"})

    world.live("late_dose", until=MORNING + h(6))

    assert world.notifications() == []  # neither this morning's 08:00 nor its 09:00 (before the change)
    assert world.status()["next_dose_due"] == format_instant(NEXT_MORNING + h(1))


def test_a_grace_change_restarts_the_schedule_too(world):
    world.provision()
    world.at(EVENING + h(0.5)).provision(grace_minutes=15)
    world.live("late_dose", until=EVENING + h(2))
    assert world.notifications() == []
    assert world.status()["next_dose_due"] == format_instant(NEXT_MORNING)
