"""A status write with a dose is computed from the bottle as read and guarded by what it was computed from:
`dose_seq` (other requests) and the dose tracking the late-dose check and provisioning also write (`schedule_from`,
`dose_due`, `dose_late_at`; shared/ingestion/storing.py: store_status, computed_status_write). When another
ingestion write, the check or a PUT that changes the schedule lands between a request's read of the bottle and its
write, the write matches nothing, and the bottle is read again and the write computed again: the bottle ends as if
the other had come first, and the dose is still recorded; a bottle that keeps changing is a 503 the device
retries."""

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared.ingestion import storing
from shared.instants import format_instant
from shared.store import schema
from shared.store.retries import THROTTLED_SPREAD_S
from tests.api import ago, closed, get_bottle, post_events, provisioned
from tests.checking import World


def test_a_dose_whose_status_write_loses_a_race_is_written_from_the_bottle_read_again(
    mock_db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = provisioned()
    real_applied = storing._applied
    raced: list[bool] = []

    def another_write_first(collection: Any, write: Any, policy: Any) -> bool:
        if not raced:  # another request's status write lands between this one's read and its write
            raced.append(True)
            mock_db[schema.BOTTLES].update_one({"_id": "bottle-1"}, {"$inc": {"dose_seq": 1}})
        return real_applied(collection, write, policy)

    monkeypatch.setattr(storing, "_applied", another_write_first)
    moment = ago(minutes=5)

    assert post_events("bottle-1", key, closed(moment, taken=1, event_id="c")).status == 202

    assert raced
    status = get_bottle("bottle-1").body["status"]
    assert (status["last_action"], status["last_dose_time"] is not None) == ("closed", True)


def test_a_dose_whose_status_write_loses_every_race_is_a_503_to_retry(
    mock_db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = provisioned()
    real_applied = storing._applied

    def another_write_always_first(collection: Any, write: Any, policy: Any) -> bool:
        mock_db[schema.BOTTLES].update_one({"_id": "bottle-1"}, {"$inc": {"dose_seq": 1}})
        return real_applied(collection, write, policy)

    monkeypatch.setattr(storing, "_applied", another_write_always_first)

    response = post_events("bottle-1", key, closed(ago(minutes=5), taken=1, event_id="c"))

    assert response.status == 503
    # A conflict's Retry-After is jittered (shared/store/retries.py): a second, plus up to the spread.
    assert 1 <= int(response.headers["Retry-After"]) <= 1 + THROTTLED_SPREAD_S
    assert response.body == {"error": "the database is busy or unavailable; retry later", "details": []}


DAY = datetime(2026, 5, 4, tzinfo=UTC)
MORNING = DAY + timedelta(hours=6)


def h(hours: float) -> timedelta:
    return timedelta(hours=hours)


@pytest.fixture
def world(mock_db: Any) -> Iterator[World]:
    bench = World(mock_db, DAY + h(5))
    yield bench
    bench.stop()


def before_the_status_write(monkeypatch: pytest.MonkeyPatch, other_writer: Callable[[], None]) -> list[bool]:
    """Run `other_writer` once, after the next request has computed its status write and before it sends it."""
    real_applied = storing._applied
    ran: list[bool] = []

    def other_write_first(collection: Any, write: Any, policy: Any) -> bool:
        if not ran:
            ran.append(True)
            other_writer()
        return real_applied(collection, write, policy)

    monkeypatch.setattr(storing, "_applied", other_write_first)
    return ran


def test_a_schedule_changed_between_a_doses_read_and_write_moves_the_due_slot_by_the_new_schedule(world, monkeypatch):
    """08:00 and 20:00 become 08:00 and 14:00 at 07:40 (Rome) while the 07:40 dose is in flight: the 08:00 slot is
    due under both, with the same grace, so only `schedule_from` tells the PUT came in between. The dose satisfies
    08:00; next is 14:00, which is missed and notified, not 20:00."""
    world.provision()
    world.at(MORNING - h(1 / 3))
    afternoon = DAY + h(12)  # 14:00 in Rome
    ran = before_the_status_write(
        monkeypatch, lambda: world.provision(schedule={"times": ["08:00", "14:00"], "timezone": "Europe/Rome"})
    )

    world.dose()

    assert ran
    assert world.status()["next_dose_due"] == format_instant(afternoon)
    messages = world.live("late_dose", until=afternoon + h(1.5))
    assert [m["episode_start"] for m in messages] == [format_instant(afternoon)]


def test_the_late_dose_checks_review_between_a_doses_read_and_write_is_built_on(world, monkeypatch):
    """Every 8 hours: the doses at 08:30 and (sent later) 08:10 leave 16:30 due, to be looked at again at 17:10
    (the 08:10 dose's next slot's grace). At 17:20 the check reviews the bottle (16:30 is due until 17:30: it
    changes only `dose_late_at`) while the 17:20 dose is in flight. Taken before 16:30 went late, that dose makes
    the next slot due 8 hours after it, at 01:20."""
    start = world.now
    world.provision(schedule={"every_hours": 8})
    world.at(start + h(3.5)).dose()
    world.at(start + h(4)).dose(at=start + h(3 + 1 / 6))
    slot = start + h(11.5)
    assert world.status()["next_dose_due"] == format_instant(slot)
    world.at(start + h(12 + 1 / 3))
    ran = before_the_status_write(monkeypatch, lambda: world.check("late_dose"))

    world.dose()

    assert ran
    assert world.status()["next_dose_due"] == format_instant(world.now + h(8))
    assert world.live("late_dose", until=world.now + h(8)) == []  # 01:20 is not late yet
    assert world.notifications("late_dose") == []
