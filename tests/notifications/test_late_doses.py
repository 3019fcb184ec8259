"""check_late_doses: a slot with no dose within its grace is notified once (episode = the slot's due time), on
`times` schedules (DST-correct, several times a day) and `every_hours` ones; slots before provisioning are never
late; a slot found more than a day after it went late is recorded but not sent. At the edges: the day's limit on
sending a late slot, a dose that arrives after its slot was found late, the bottle leaving the resolve sweep once
its notifications are resolved, the counts a partition's run logs, and an every-hours count re-played from the
doses a bottle keeps once its history (DOSE_HISTORY) is full."""

import json
import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared.instants import format_instant
from shared.notifications.checks.partitions import CheckPartition
from shared.store import schema
from shared.store.partitioning import BucketRange
from tests.checking import World, sweep_all, work
from tests.notifications.dose_day import DAY, EVENING, MORNING, NEXT_MORNING, h
from tests.report_client import set_setting


@pytest.fixture
def world(mock_db) -> Iterator[World]:
    bench = World(mock_db, DAY + timedelta(hours=5))
    yield bench
    bench.stop()


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


def test_a_put_that_changes_neither_schedule_nor_grace_leaves_the_due_dose_due(world):
    """A new medication name is no schedule change: the 08:00 dose due half an hour ago stays due, and goes late."""
    world.provision()
    world.at(MORNING + h(0.5)).provision(medication="Cordrazine XR")

    assert world.status()["next_dose_due"] == format_instant(MORNING)
    world.live("late_dose", until=MORNING + h(2))
    assert [n["kind"] for n in world.notifications()] == ["late_dose"]


def test_a_schedule_change_counts_the_doses_already_taken(world):
    """The morning dose taken at 07:50 (within grace of 08:00); at 07:55 the grace changes, which restarts the
    schedule from then: 08:00 is still satisfied by the dose taken, so the evening dose is next (the bottle's GET
    says so at once) and nothing is late."""
    world.provision()
    world.at(MORNING - h(1 / 6)).dose()
    world.at(MORNING - h(1 / 12)).provision(grace_minutes=45)

    assert world.status()["next_dose_due"] == format_instant(EVENING)  # at once, not only once a check has run
    world.live("late_dose", until=MORNING + h(3))

    assert world.notifications() == []
    assert world.status()["next_dose_due"] == format_instant(EVENING)


@pytest.fixture
def two_dose_world(mock_db: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    """A world whose bottles keep only their newest two doses (DOSE_HISTORY=2)."""
    set_setting(monkeypatch, "DOSE_HISTORY", "2")
    bench = World(mock_db, DAY + h(5))
    yield bench
    bench.stop()


def test_a_buffered_dose_older_than_the_history_kept_makes_no_slot_late(two_dose_world: World) -> None:
    """Every slot's dose on time; the first one (+8 h) was buffered and arrives only after two newer ones, when
    the bottle keeps just those two: the check reviews from that dose (the earliest that arrived), finds it
    gone from the history, and counts from the oldest dose kept."""
    start = two_dose_world.now
    two_dose_world.provision(schedule={"every_hours": 8})
    for hours in (16, 24):
        two_dose_world.at(start + h(hours)).dose()
    two_dose_world.at(start + h(25)).dose(at=start + h(8))  # uploaded at +25 h: older than both doses kept

    assert two_dose_world.after(minutes=30).check("late_dose") == []  # the checks were down until now

    assert two_dose_world.notifications("late_dose") == []
    assert two_dose_world.status()["next_dose_due"] == "2026-05-05T13:00:00.000Z"  # 8 hours after the last dose


@pytest.fixture
def provisioned_world(mock_db: Any) -> Iterator[World]:
    """A world with its bottle provisioned before the test begins."""
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


def test_a_slot_that_went_late_exactly_a_day_before_the_check_is_still_sent(provisioned_world: World) -> None:
    provisioned_world.at(MORNING).dose()

    messages = provisioned_world.at(EVENING + h(1) + h(24)).check("late_dose")  # the checks were down for a day

    sent = ["2026-05-04T18:00:00.000Z", "2026-05-05T06:00:00.000Z", "2026-05-05T18:00:00.000Z"]
    assert sorted(m["episode_start"] for m in messages) == sent  # sent side by side: in any order
    assert [n["delivery"] for n in provisioned_world.notifications("late_dose")] == ["queued"] * 3


def test_a_dose_taken_in_time_but_arriving_after_its_slot_was_found_late_resolves_it_at_once(
    provisioned_world: World,
) -> None:
    provisioned_world.at(MORNING).dose()
    provisioned_world.at(EVENING + h(1.1)).check("late_dose")  # the bottle was offline: the evening slot is found late
    assert provisioned_world.episodes("late_dose") == [EVENING]

    provisioned_world.dose(at=EVENING + h(1 / 6))  # taken at 18:10, in time, uploaded now
    provisioned_world.after(minutes=5).check("late_dose")

    [notification] = provisioned_world.notifications("late_dose")
    assert notification["resolved_at"] == provisioned_world.now
    assert "late_episode" not in bottle(provisioned_world)
    leaves_the_resolve_sweep(provisioned_world)


def test_a_dose_resolving_an_older_late_slot_leaves_the_later_one_notified(provisioned_world: World) -> None:
    provisioned_world.at(MORNING).dose()
    provisioned_world.at(MORNING + h(24)).dose()
    # The checks were down for a day: both evenings are found late, and the second morning's dose resolves the
    # first evening's notification only.
    provisioned_world.at(EVENING + h(25)).check("late_dose")

    assert provisioned_world.episodes("late_dose") == [EVENING, EVENING + h(24)]
    first, second = provisioned_world.notifications("late_dose")
    assert (first["resolved_at"], second["resolved_at"]) == (provisioned_world.now, None)
    assert bottle(provisioned_world)["late_episode"] == EVENING + h(24)
    leaves_the_resolve_sweep(provisioned_world)


def test_a_bottle_marked_late_but_without_a_dose_leaves_the_resolve_sweep_untouched(provisioned_world: World) -> None:
    """A bottle stored with a late slot and a dose pending but no last dose (as an older version may have left
    it): the run clears the pending dose, resolves nothing, and no later run reads it again."""
    provisioned_world.at(EVENING + h(1.1)).check("late_dose")
    provisioned_world.db[schema.BOTTLES].update_one(
        {"_id": "bottle-1"}, {"$set": {"dose_pending": True, "late_episode": EVENING}, "$unset": {"last_dose_time": ""}}
    )

    done = sweep_all(
        provisioned_world.db, "late_dose", now=provisioned_world.after(minutes=5).now, send=provisioned_world.queue
    )

    assert (done.examined, done.resolved) == (1, 0)
    assert [n["resolved_at"] for n in provisioned_world.notifications("late_dose")] == [None, None]
    leaves_the_resolve_sweep(provisioned_world)


def test_a_partition_s_log_line_counts_every_batch(
    provisioned_world: World, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Two bottles, a bottle a batch, the checks down for two days: the run's log line sums what both batches
    notified, withheld (late more than a day before) and, after both doses, resolved."""
    set_setting(monkeypatch, "CHECK_BATCH_SIZE", "1")
    set_setting(monkeypatch, "CHECK_LATE_DOSES_SPREAD_MINUTES", "0")
    provisioned_world.at(DAY + h(5)).provision("bottle-2")
    message = CheckPartition("late_dose", BucketRange(0, 1)).message()

    def logged() -> dict[str, Any]:
        caplog.clear()
        with caplog.at_level(logging.INFO):
            work(message)
        [line] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("invocation run_check")]
        return dict(json.loads(line.split(" ", 2)[2]))

    provisioned_world.at(EVENING + h(49.5))
    down = logged()
    for bottle_id in ("bottle-1", "bottle-2"):
        provisioned_world.dose(bottle_id)
    provisioned_world.after(minutes=5)
    back = logged()

    stored = provisioned_world.notifications("late_dose")
    withheld = [n for n in stored if n["delivery"] == "withheld"]
    assert (len(stored), len(withheld)) == (12, 8)  # six slots each, four of them late more than a day ago
    assert (down["examined"], down["notified"], down["withheld"], down["resolved"]) == (2, 12, 8, 0)
    assert back["resolved"] == 12
