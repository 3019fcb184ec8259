"""Requests for one bottle at once, on a real server (SecantusDB): a request with a dose computes its one status
write from the bottle as read and writes it guarded by that state (shared/ingestion/storing.py), so when another
request, or the late-dose check, changed the bottle in between, it reads again and computes again. Neither
request's effect is lost, a dose never counts twice, and the status never moves backwards.

Each test makes the requests' first reads of the bottle meet (a barrier), so both read the same state before
either writes: the race is forced, not hoped for."""

import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared.doses.due_tracking import plan_of, review_update
from shared.ingestion import authentication, storing
from shared.store import schema
from tests.api import Response, closed, opened, post_events
from tests.checking import FakeQueue, World, sweep_all
from tests.threads import at_once
from tools.host.worker import current_invocation_id

pytestmark = pytest.mark.integration

# In May, Europe/Rome is UTC+2: the default schedule's 08:00 and 20:00 are 06:00 and 18:00 UTC.
DAY = datetime(2026, 5, 4, tzinfo=UTC)
MORNING, EVENING = DAY + timedelta(hours=6), DAY + timedelta(hours=18)
NEXT_MORNING = MORNING + timedelta(days=1)
GRACE = timedelta(hours=1)


@pytest.fixture
def world(real_db) -> Iterator[World]:
    bench = World(real_db, DAY + timedelta(hours=5))
    yield bench
    bench.stop()


class Reads:
    """Counts the reads of bottles that ingestion makes, and makes each request's first read wait until
    `parties` requests have read (then they all go on, each with the state it read); `after_first` runs inside the
    first request's first read (the request it makes itself reads through here too, as a request of its own)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, parties: int, after_first: Callable[[], None] | None = None):
        self.count = 0
        self._barrier = threading.Barrier(parties, timeout=30) if parties > 1 else None
        self._first_done: set[str | None] = set()  # the invocations (requests) that have read once
        self._after_first = after_first
        self._lock = threading.Lock()
        real = authentication.read_bottle  # type: ignore[attr-defined]

        def reading(*args: Any) -> Any:
            found = real(*args)
            invocation = current_invocation_id()  # a request runs on the runtime's pool: per request, not thread
            with self._lock:
                self.count += 1
                first = invocation not in self._first_done
                very_first = not self._first_done
                self._first_done.add(invocation)
            if first and self._barrier is not None:
                self._barrier.wait()
            if very_first and self._after_first is not None:  # the other request runs whole inside this one's read
                self._after_first()
            return found

        monkeypatch.setattr(authentication, "read_bottle", reading)  # the registry read (authentication)
        monkeypatch.setattr(storing, "read_bottle", reading)  # a read again after a conflict


def bottle(world: World) -> dict[str, Any]:
    return dict(world.db[schema.BOTTLES].find_one({"_id": "bottle-1"}) or {})


def send(world: World, *events: dict[str, Any]) -> Callable[[], Response]:
    return lambda: post_events("bottle-1", world.keys["bottle-1"], {"events": list(events)})


def test_two_doses_at_once_both_count_whichever_writes_first(world, monkeypatch):
    world.provision()
    before = bottle(world)
    assert before["dose_due"] == MORNING
    world.at(EVENING + timedelta(minutes=30))
    reads = Reads(monkeypatch, parties=2)

    responses = at_once(
        send(world, closed(MORNING + timedelta(minutes=5), event_id="morning")),  # buffered, uploaded now
        send(world, closed(EVENING + timedelta(minutes=5), event_id="evening")),
    )

    assert [r.status for r in responses] == [202, 202]
    assert reads.count == 3  # each request read once, and the one that wrote second read again
    after = bottle(world)
    assert after["doses"] == [MORNING + timedelta(minutes=5), EVENING + timedelta(minutes=5)]
    # Both slots satisfied, in either order of the writes: the next morning is due.
    assert (after["dose_due"], after["dose_late_at"]) == (NEXT_MORNING, NEXT_MORNING + GRACE)
    assert (after["last_action"], after["last_action_time"]) == ("closed", EVENING + timedelta(minutes=5))
    assert after["last_dose_time"] == EVENING + timedelta(minutes=5)
    assert after["dose_seq"] == (before.get("dose_seq") or 0) + 2  # two writes, one each


def test_a_dose_retried_while_its_first_request_is_in_flight_counts_once(world, monkeypatch):
    world.provision()
    before = bottle(world)
    world.at(MORNING + timedelta(minutes=10))
    reads = Reads(monkeypatch, parties=2)
    dose = closed(MORNING + timedelta(minutes=5), event_id="c-1")

    responses = at_once(send(world, dose), send(world, dose))

    assert sorted(r.body["stored"] for r in responses) == [0, 1]
    assert reads.count == 3
    after = bottle(world)
    assert after["doses"] == [MORNING + timedelta(minutes=5)]
    assert after["dose_due"] == EVENING  # moved on once, not twice
    assert after["dose_seq"] == (before.get("dose_seq") or 0) + 1  # the loser found nothing left to write
    assert world.db[schema.BOTTLE_ACTIONS].count_documents({}) == 1


@pytest.mark.parametrize("first", ["morning", "evening"])
def test_a_dose_written_between_another_doses_read_and_write_counts_too(world, monkeypatch, first):
    """The interleaving forced in each order: one request reads, the other runs whole, then the first writes."""
    world.provision()
    world.at(EVENING + timedelta(minutes=30))
    doses = {"morning": MORNING + timedelta(minutes=5), "evening": EVENING + timedelta(minutes=5)}
    other = "evening" if first == "morning" else "morning"
    reads = Reads(monkeypatch, parties=1, after_first=lambda: world.post("bottle-1", closed(doses[other])))

    world.post("bottle-1", closed(doses[first]))

    assert reads.count == 3  # the first request's read, the other's, the first's read again after the conflict
    after = bottle(world)
    assert after["doses"] == [doses["morning"], doses["evening"]]
    assert (after["dose_due"], after["last_action_time"]) == (NEXT_MORNING, doses["evening"])


def test_a_newer_open_written_between_a_doses_read_and_write_is_never_undone(world, monkeypatch):
    world.provision()
    world.at(MORNING + timedelta(minutes=20))
    newer = MORNING + timedelta(minutes=15)
    reads = Reads(monkeypatch, parties=1, after_first=lambda: world.post("bottle-1", opened(newer)))

    world.post("bottle-1", closed(MORNING + timedelta(minutes=5)))  # older, and a dose

    assert reads.count == 3  # the dose's read, the open's registry read (a cold worker), the dose's read again
    after = bottle(world)
    assert (after["last_action"], after["last_action_time"], after["open_since"]) == ("opened", newer, newer)
    assert after["doses"] == [MORNING + timedelta(minutes=5)]
    assert (after["last_dose_time"], after["dose_due"]) == (MORNING + timedelta(minutes=5), EVENING)


def test_an_older_dose_and_a_newer_open_at_once_leave_the_bottle_open(world, monkeypatch):
    world.provision()
    world.at(MORNING + timedelta(minutes=20))
    Reads(monkeypatch, parties=2)
    newer = MORNING + timedelta(minutes=15)

    responses = at_once(
        send(world, closed(MORNING + timedelta(minutes=5))),  # a dose: its status write is computed from a read
        send(world, opened(newer)),  # no dose: one guarded write (a cold worker reads its registry entry first)
    )

    assert [r.status for r in responses] == [202, 202]
    after = bottle(world)
    assert (after["last_action"], after["last_action_time"], after["open_since"]) == ("opened", newer, newer)
    assert after["doses"] == [MORNING + timedelta(minutes=5)]
    assert after["dose_due"] == EVENING


@pytest.mark.parametrize("order", ["opened first", "closed first"])
def test_an_open_and_a_close_at_one_instant_at_once_end_closed(world, monkeypatch, order):
    world.provision()
    world.at(MORNING + timedelta(minutes=20))
    Reads(monkeypatch, parties=2)
    moment = MORNING + timedelta(minutes=5)
    requests = [send(world, opened(moment, event_id="o")), send(world, closed(moment, event_id="c"))]

    at_once(*(requests if order == "opened first" else requests[::-1]))

    after = bottle(world)
    assert (after["last_action"], after["last_action_time"], after["open_since"]) == ("closed", moment, None)


def test_four_requests_at_once_lose_nothing(world, monkeypatch):
    world.provision(schedule={"every_hours": 8})
    start = world.now
    before = bottle(world)
    world.at(start + timedelta(hours=20))
    Reads(monkeypatch, parties=4)
    doses = [start + timedelta(hours=h) for h in (3, 7, 11, 15)]

    responses = at_once(*(send(world, opened(d - timedelta(seconds=30)), closed(d)) for d in doses))

    assert [r.body for r in responses] == [{"stored": 2, "duplicates": 0, "expired": 0}] * 4
    after = bottle(world)
    assert after["doses"] == doses
    assert (after["last_action"], after["last_action_time"], after["last_dose_time"]) == (
        "closed",
        doses[-1],
        doses[-1],
    )
    assert after["dose_seq"] == (before.get("dose_seq") or 0) + 4
    # The check, reviewing from the earliest of them, finds no late slot and the next dose due 8 hours after the last.
    world.check("late_dose")
    assert world.notifications() == []
    assert bottle(world)["dose_due"] == doses[-1] + timedelta(hours=8)


def test_the_late_dose_checks_write_between_a_requests_read_and_write_is_kept(world, monkeypatch):
    """The check finds the morning slot late (the bottle was offline) while a request with the evening dose is
    between its read and its write: the request's write, computed from the state before the check's, matches
    nothing; it reads again and moves the due slot on from where the check left it."""
    world.provision()
    world.at(EVENING + timedelta(minutes=10))

    def the_check_runs() -> None:
        sweep_all(world.db, "late_dose", now=world.now, send=FakeQueue())

    reads = Reads(monkeypatch, parties=1, after_first=the_check_runs)

    assert world.post("bottle-1", closed(EVENING + timedelta(minutes=5))) is None

    assert reads.count == 2  # read, the check wrote, read again
    assert world.episodes("late_dose") == [MORNING]
    after = bottle(world)
    assert after["late_episode"] == MORNING
    assert (after["dose_due"], after["doses"]) == (NEXT_MORNING, [EVENING + timedelta(minutes=5)])


def test_a_checks_review_computed_before_a_request_wrote_matches_nothing(world):
    """The other way round: the check's write is guarded by `dose_seq`, which every ingestion write moves on, so a
    review computed from the bottle before a request's write never undoes it (the next run reviews again)."""
    world.provision()
    world.at(MORNING + timedelta(hours=2))
    read_by_the_check = bottle(world)
    plan = plan_of(read_by_the_check)
    review = plan.review(read_by_the_check["dose_due"], [], world.now)
    assert review.late == [MORNING]

    world.post("bottle-1", opened(MORNING + timedelta(hours=1, minutes=50)))  # no dose: still a status write

    write = review_update(read_by_the_check, plan, review)
    assert world.db[schema.BOTTLES].bulk_write([write]).matched_count == 0


def test_a_bottle_that_keeps_changing_gets_503_and_the_device_retry_stores_the_status(world, monkeypatch):
    world.provision()
    world.at(MORNING + timedelta(minutes=10))

    def another_write() -> None:
        world.db[schema.BOTTLES].update_one({"_id": "bottle-1"}, {"$inc": {"dose_seq": 1}})

    real = authentication.read_bottle  # type: ignore[attr-defined]

    def read_then_changed(*args: Any) -> Any:
        found = real(*args)
        another_write()
        return found

    monkeypatch.setattr(authentication, "read_bottle", read_then_changed)
    monkeypatch.setattr(storing, "read_bottle", read_then_changed)
    dose = closed(MORNING + timedelta(minutes=5), event_id="c-1")

    response = send(world, dose)()

    assert response.status == 503
    assert int(response.headers["Retry-After"]) >= 1
    assert bottle(world).get("doses") is None  # the action is stored; the status waits for the retry
    monkeypatch.setattr(authentication, "read_bottle", real)
    monkeypatch.setattr(storing, "read_bottle", real)

    assert send(world, dose)().body == {"stored": 0, "duplicates": 1, "expired": 0}
    after = bottle(world)
    assert (after["doses"], after["dose_due"], after["last_action"]) == (
        [MORNING + timedelta(minutes=5)],
        EVENING,
        "closed",
    )
