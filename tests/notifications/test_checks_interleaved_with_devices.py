"""However a device request interleaves with a check run, a notification whose episode has ended is resolved by the
next check run or by the same one, and each episode is notified once (docs/checks.md: "A device request during a
run").

Each check records its notification, then marks the bottle's episode with a write guarded by the state its sweep
read. Here the request lands between that read and that write: before the notification is recorded, or between the
notification and the marker. It closes the bottle, is heard from again, or uploads a dose taken in time, and so
takes the bottle out of the sweep that found it; the marker write misses. On mongomock and on SecantusDB (the `db`
fixture), and in a paced late-dose sweep, whose waits come between reading a batch and writing it."""

import json
import logging
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pymongo.database import Database

from shared.notifications import documents
from shared.notifications.checks.partitions import CheckPartition
from shared.notifications.checks.run import run_check
from shared.notifications.documents import Episode, Kind
from shared.settings import get_settings
from shared.store import schema
from shared.store.partitioning import BucketRange
from shared.store.retries import RetryPolicy
from tests.api import closed, opened
from tests.checking import World, work
from tests.cosmos_fakes import ThrottlingDatabase
from tests.fake_time import FakeTime
from tests.report_client import set_setting

START = datetime(2026, 5, 4, 5, 0, tzinfo=UTC)
# In May, Europe/Rome is UTC+2: the default schedule's 08:00 is 06:00 UTC, late at 07:00 with its 60-minute grace.
MORNING = datetime(2026, 5, 4, 6, 0, tzinfo=UTC)
BEFORE_THE_NOTIFICATION, BEFORE_THE_MARKER = "before the notification", "before the marker"
PLACES = [BEFORE_THE_NOTIFICATION, BEFORE_THE_MARKER]


@pytest.fixture
def world(db: Database[Any]) -> Iterator[World]:
    bench = World(db, START)
    bench.provision()
    yield bench
    bench.stop()


def during_the_next_run(
    monkeypatch: pytest.MonkeyPatch, kind: Kind, place: str, request: Callable[[], None]
) -> list[int]:
    """Land `request` in the next run that records a `kind` episode, after its sweep read the bottle: just before it
    records the notification, or just after (before the bottle's marker is written). What landed: [1] once it
    has."""
    record = documents.record
    landed: list[int] = []

    def recording(db: Database[Any], episodes: Iterable[Episode], now: datetime, policy: RetryPolicy) -> list[Episode]:
        episodes = list(episodes)
        racing = not landed and any(e.kind == kind for e in episodes)
        if racing and place == BEFORE_THE_NOTIFICATION:
            landed.append(1)
            request()
        new = record(db, episodes, now, policy)
        if racing and place == BEFORE_THE_MARKER:
            landed.append(1)
            request()
        return new

    monkeypatch.setattr(documents, "record", recording)
    return landed


def resolutions(world: World, kind: Kind) -> dict[datetime, datetime | None]:
    """Each notification of `kind` by its episode's start: when it was resolved (None: it was not)."""
    return {n["episode_start"]: n["resolved_at"] for n in world.notifications(kind)}


def sent_once(world: World) -> bool:
    """Every notification the checks sent went out once (what the queue accepted)."""
    return set(Counter(json.loads(m)["notification_id"] for m in world.queue.messages).values()) == {1}


# --- left open --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("place", PLACES)
def test_a_bottle_closed_while_the_check_marks_it_left_open_is_resolved(world, monkeypatch, place):
    opened_at = world.now
    world.open()
    landed = during_the_next_run(monkeypatch, "left_open", place, world.close)

    raced = world.after(minutes=6).now
    [message] = world.check("left_open")
    world.after(minutes=1).check("left_open")

    assert landed
    assert message["episode_start"] == "2026-05-04T05:00:00.000Z"
    assert resolutions(world, "left_open") == {opened_at: raced}  # seen ended by the run that raced it
    assert world.status()["last_action"] == "closed"
    assert sent_once(world)


@pytest.mark.parametrize("place", PLACES)
def test_a_bottle_closed_and_opened_again_while_the_check_marks_it_resolves_the_first_episode_only(
    world, monkeypatch, place
):
    first = world.now
    world.open()

    def closed_and_opened_again() -> None:
        world.post("bottle-1", closed(world.now - timedelta(seconds=20)), opened(world.now - timedelta(seconds=10)))

    during_the_next_run(monkeypatch, "left_open", place, closed_and_opened_again)
    raced = world.after(minutes=6).now
    world.check("left_open")
    second = raced - timedelta(seconds=10)
    world.after(minutes=1).check("left_open")
    assert resolutions(world, "left_open") == {first: raced}

    world.at(second + timedelta(minutes=6)).check("left_open")  # the second opening, open too long: its own episode
    world.after(minutes=1).check("left_open")

    assert resolutions(world, "left_open") == {first: raced, second: None}
    assert [m["episode_start"] for m in world.sent] == ["2026-05-04T05:00:00.000Z", "2026-05-04T05:05:50.000Z"]


def test_a_race_settled_in_a_batch_of_two_bottles_is_counted_in_the_run_s_log_line(world, monkeypatch, caplog):
    """Bottle 1, notified once, was closed and opened again (a new episode), bottle 2 left open: one batch finds
    both. Bottle 1 is closed again between the notifications and the markers, so the run resolves its first
    episode and settles its second one as resolved; bottle 2 stays notified. The operator's line of the run says
    2 resolved, and the run does not fail on a batch with two episodes to settle."""
    set_setting(monkeypatch, "CHECK_PARTITIONS", "1")
    world.provision("bottle-2")
    first = world.now
    world.open()
    world.after(minutes=6).check("left_open")
    second = world.after(minutes=1).now - timedelta(seconds=10)
    world.post("bottle-1", closed(second - timedelta(seconds=10)), opened(second))
    world.open("bottle-2")
    other = world.now
    landed = during_the_next_run(monkeypatch, "left_open", BEFORE_THE_MARKER, world.close)

    raced = world.after(minutes=6).now
    caplog.clear()
    with caplog.at_level(logging.INFO):
        work(CheckPartition("left_open", BucketRange(0, 1)).message())
    [line] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("invocation run_check")]
    logged = json.loads(line.split(" ", 2)[2])

    assert landed
    assert (logged["notified"], logged["resolved"]) == (2, 2)
    stored = {(n["bottle_id"], n["episode_start"]): n["resolved_at"] for n in world.notifications("left_open")}
    assert stored == {("bottle-1", first): raced, ("bottle-1", second): raced, ("bottle-2", other): None}


class MeetingTwice:
    """The store, but the left-open detect query meets the bottle twice: after the cursor yields it, `request`
    lands and the cursor yields it again as it is now, as MongoDB's may ("intervening write operations on a
    document may result in a cursor that returns a document more than once if that document has changed": Read
    Isolation, Consistency, and Recency, https://www.mongodb.com/docs/v3.2/core/read-isolation-consistency-recency/)."""

    def __init__(self, db: Database[Any], request: Callable[[], None]) -> None:
        self.db, self.request = db, request

    def __getitem__(self, name: str) -> Any:
        return _MeetingTwiceCollection(self, self.db[name]) if name == schema.BOTTLES else self.db[name]


class _MeetingTwiceCollection:
    def __init__(self, owner: MeetingTwice, collection: Any) -> None:
        self._owner, self._collection = owner, collection

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self._collection, attribute)

    def find(self, selector: dict[str, Any], projection: Any = None, **kwargs: Any) -> Any:
        found = self._collection.find(selector, projection, **kwargs)
        if "open_since" not in selector:
            return found
        return _TwiceCursor(self._owner, self._collection, list(found), projection)


class _TwiceCursor:
    def __init__(self, owner: MeetingTwice, collection: Any, documents: list[Any], projection: Any) -> None:
        self._documents = iter(self._twice(owner, collection, documents, projection))

    @staticmethod
    def _twice(owner: MeetingTwice, collection: Any, documents: list[Any], projection: Any) -> Iterator[Any]:
        for document in documents:
            yield document
            owner.request()
            yield collection.find_one({"_id": document["_id"]}, projection)

    def __iter__(self) -> "_TwiceCursor":
        return self

    def __next__(self) -> Any:
        return next(self._documents)

    def close(self) -> None:
        pass


def test_a_bottle_the_sweep_meets_twice_reopened_in_between_has_its_first_episode_resolved(world):
    """One batch of the detect sweep meets the bottle open since 05:00, then (closed and opened again at 05:15)
    open since 05:15, both longer than the limit: both episodes are notified, and the first, over, is resolved by
    the run; the second goes on."""
    first = world.now
    world.open()
    now = world.after(minutes=30).now
    second = first + timedelta(minutes=15)

    def closed_and_opened_again() -> None:
        world.post("bottle-1", closed(second - timedelta(minutes=1)), opened(second))

    store = MeetingTwice(world.db, closed_and_opened_again)
    run_check(store, "left_open", partition=BucketRange(0, 1), now=now, settings=get_settings(), send=world.queue)

    assert resolutions(world, "left_open") == {first: now, second: None}


# --- silent -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("place", PLACES)
def test_a_bottle_heard_from_while_the_check_marks_it_silent_is_resolved(world, monkeypatch, place):
    world.heartbeat()
    landed = during_the_next_run(monkeypatch, "silent", place, world.heartbeat)

    raced = world.after(minutes=61).now
    [message] = world.check("silent")
    world.after(minutes=5).check("silent")

    assert landed
    assert message["episode_start"] == "2026-05-04T05:00:00.000Z"
    assert resolutions(world, "silent") == {START: raced}
    assert sent_once(world)


@pytest.mark.parametrize("place", PLACES)
def test_a_bottle_heard_from_while_the_check_marks_it_silent_is_a_new_episode_when_silent_again(
    world, monkeypatch, place
):
    world.heartbeat()
    during_the_next_run(monkeypatch, "silent", place, world.heartbeat)
    back = world.after(minutes=61).now
    world.check("silent")

    world.every("silent", until=back + timedelta(minutes=75))

    assert resolutions(world, "silent") == {START: back, back: None}
    assert [m["episode_start"] for m in world.sent] == ["2026-05-04T05:00:00.000Z", "2026-05-04T06:01:00.000Z"]


def test_an_older_heartbeat_after_a_notified_silence_records_nothing_again(world):
    """A heartbeat older than the last one (buffered) arrives after the silence was notified: the bottle is still
    silent since its last heartbeat, so the next run re-marks it and writes no notification, not even a
    duplicate of the one it has."""
    world.heartbeat()
    last = world.after(minutes=10).now
    world.heartbeat()
    world.after(minutes=61).check("silent")
    world.after(minutes=1).heartbeat(at=last - timedelta(minutes=5))
    world.after(minutes=4)

    counting = ThrottlingDatabase(world.db, {})  # throttles nothing, records every call
    run = run_check(
        counting, "silent", partition=BucketRange(0, 1), now=world.now, settings=get_settings(), send=world.queue
    )

    assert (run.examined, run.notified) == (1, 0)
    assert f"{schema.NOTIFICATIONS}.bulk_write" not in counting.calls
    assert resolutions(world, "silent") == {last: None}
    assert world.db[schema.BOTTLE_HEARTBEATS].find_one({"_id": "bottle-1"})["silent_pending"] is False


# --- late doses -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("place", PLACES)
def test_a_dose_taken_in_time_and_uploaded_while_the_check_marks_the_slot_late_resolves_it(world, monkeypatch, place):
    landed = during_the_next_run(
        monkeypatch, "late_dose", place, lambda: world.dose(at=MORNING + timedelta(minutes=10))
    )

    raced = world.at(MORNING + timedelta(minutes=65)).now  # the bottle offline since provisioning
    [message] = world.check("late_dose")
    world.every("late_dose", until=MORNING + timedelta(hours=3))

    assert landed
    assert message["episode_start"] == "2026-05-04T06:00:00.000Z"
    assert resolutions(world, "late_dose") == {MORNING: raced}  # the dose was counted for 08:00 (06:00 UTC)
    assert world.status()["next_dose_due"] == "2026-05-04T18:00:00.000Z"
    assert sent_once(world)


@pytest.mark.parametrize("place", PLACES)
def test_a_bottle_opened_while_the_check_marks_the_slot_late_is_resolved_by_its_late_dose(world, monkeypatch, place):
    """An open without a dose makes the marker write miss too, but the slot is still late: the late dose, when it
    comes, resolves it."""
    during_the_next_run(monkeypatch, "late_dose", place, world.open)
    world.at(MORNING + timedelta(minutes=65)).check("late_dose")
    world.after(minutes=5).check("late_dose")
    assert resolutions(world, "late_dose") == {MORNING: None}

    taken = world.after(minutes=5).now
    world.close(taken=1)
    world.every("late_dose", until=taken + timedelta(minutes=10))

    assert resolutions(world, "late_dose") == {MORNING: taken}
    assert sent_once(world)


def test_a_late_dose_uploaded_while_the_run_settles_the_late_slot_resolves_it(world, monkeypatch):
    """The bottle is opened between the run's notification and its marker (the marker write misses, the slot is
    still late), and its late dose is uploaded while the run settles that (between reading the bottle again and
    marking it): the mark must not undo what the dose asked for (`dose_pending`), so the dose resolves the slot
    in that same run."""
    during_the_next_run(monkeypatch, "late_dose", BEFORE_THE_MARKER, world.open)
    apply_resolutions = documents.apply_resolutions
    calls: list[int] = []

    def dose_while_settling(db: Database[Any], ops: list[Any], policy: RetryPolicy) -> int:
        calls.append(1)
        if len(calls) == 2:  # the batch's resolutions, then the settle's, after it read the bottle again
            world.close(taken=1)
        return apply_resolutions(db, ops, policy)

    monkeypatch.setattr(documents, "apply_resolutions", dose_while_settling)
    raced = world.at(MORNING + timedelta(minutes=65)).now
    [message] = world.check("late_dose")

    assert message["episode_start"] == "2026-05-04T06:00:00.000Z"
    assert resolutions(world, "late_dose") == {MORNING: raced}
    assert sent_once(world)


def outer_run_logged(caplog: pytest.LogCaptureFixture) -> dict[str, Any]:
    """What the last check run logged (the operator's `invocation run_check_partition` line), as a dict."""
    [*_, line] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("invocation run_check")]
    return dict(json.loads(line.split(" ", 2)[2]))


def test_a_run_that_finds_the_late_slot_marked_by_another_leaves_the_bottle_out_of_its_resolve_sweep(
    world, monkeypatch, caplog
):
    """Another run marks the slot between this run's read and its write: the settle finds the marker covering the
    slot and writes nothing, so the bottle, with no dose to look at, is not read again by this run's resolve sweep
    (its log line: 1 examined)."""
    set_setting(monkeypatch, "CHECK_PARTITIONS", "1")
    landed = during_the_next_run(monkeypatch, "late_dose", BEFORE_THE_MARKER, lambda: world.check("late_dose"))

    with caplog.at_level(logging.INFO):
        world.at(MORNING + timedelta(minutes=65)).check("late_dose")

    assert landed
    assert outer_run_logged(caplog)["examined"] == 1
    assert resolutions(world, "late_dose") == {MORNING: None}


def test_a_dose_in_time_uploaded_while_the_check_marks_the_slot_late_is_settled_without_a_marker(
    world, monkeypatch, caplog
):
    """The dose reaches exactly the slot it resolves: the settle resolves it and leaves no marker, so the run's
    resolve sweep does not read the bottle again (its log line: 1 examined)."""
    set_setting(monkeypatch, "CHECK_PARTITIONS", "1")
    during_the_next_run(
        monkeypatch, "late_dose", BEFORE_THE_MARKER, lambda: world.dose(at=MORNING + timedelta(minutes=10))
    )

    with caplog.at_level(logging.INFO):
        raced = world.at(MORNING + timedelta(minutes=65)).now
        world.check("late_dose")

    assert outer_run_logged(caplog)["examined"] == 1
    assert resolutions(world, "late_dose") == {MORNING: raced}
    assert "late_episode" not in world.db[schema.BOTTLES].find_one({"_id": "bottle-1"})


def bottle_reads_of_a_run(world: World, kind: Kind) -> int:
    """Run `kind`'s check on every bottle at the world's instant; how many queries it made of `bottles`."""
    counting = ThrottlingDatabase(world.db, {})  # throttles nothing, records every call
    run_check(counting, kind, partition=BucketRange(0, 1), now=world.now, settings=get_settings(), send=world.queue)
    return counting.calls.count(f"{schema.BOTTLES}.find")


def test_a_run_without_a_race_reads_each_sweep_s_range_once_and_nothing_more(world):
    """docs/checks.md, what the settle costs: nothing in a run without races; the bottle notified and marked is
    not read again."""
    world.open()
    world.after(minutes=6)

    assert bottle_reads_of_a_run(world, "left_open") == 2  # the detect sweep, the resolve sweep
    assert len(world.notifications("left_open")) == 1


def test_a_race_is_settled_with_one_read_of_the_raced_bottles(world, monkeypatch):
    """docs/checks.md, what the settle costs: after a miss, one query for the batch's bottles with an episode; the
    late-dose marker it writes (`$max`, by the bottle's key) lands, so it reads them no more."""
    during_the_next_run(monkeypatch, "late_dose", BEFORE_THE_MARKER, world.open)
    world.at(MORNING + timedelta(minutes=65))

    assert bottle_reads_of_a_run(world, "late_dose") == 3  # the detect sweep, the settle, the resolve sweep
    assert world.db[schema.BOTTLES].find_one({"_id": "bottle-1"})["late_episode"] == MORNING


# --- a paced late-dose sweep ------------------------------------------------------------------------------------

HOURLY = {"schedule": {"every_hours": 1}, "grace_minutes": 1}  # due an hour after provisioning, late a minute later
BOTTLES = [f"bottle-{i}" for i in range(6)]


def test_doses_uploaded_while_a_paced_sweep_waits_resolve_every_slot_it_notified(db, monkeypatch):
    """The paced sweep reads a batch, waits for it to be due, then writes it: the doses taken in time and uploaded
    during its first wait come between the read and the write of at least the batch it waits for (of every batch
    read before them: on both engines here, all but the first)."""
    set_setting(monkeypatch, "CHECK_PARTITIONS", "1")
    set_setting(monkeypatch, "CHECK_BATCH_SIZE", "1")  # one bottle a batch: six batches, five waits
    world = World(db, START)
    try:
        for bottle_id in BOTTLES:
            world.provision(bottle_id, **HOURLY)
        due = START + timedelta(hours=1)
        world.at(START + timedelta(minutes=90))
        fake = FakeTime()

        def uploading_while_waiting(seconds: float) -> None:
            if not fake.slept:
                for bottle_id in BOTTLES:  # each dose taken on time, uploaded now
                    world.dose(bottle_id, at=due)
            fake.sleep(seconds)

        paced = run_check(
            db,
            "late_dose",
            partition=BucketRange(0, 1),
            now=world.now,
            settings=get_settings(),
            send=world.queue,
            clock=fake,
            sleep=uploading_while_waiting,
        )
        raced = world.now
        world.every("late_dose", until=raced + timedelta(minutes=20))

        notified = world.notifications("late_dose")
        assert paced.paced
        assert len(notified) >= 2  # the first batch, written before the doses came, and the one read before them
        assert [(n["episode_start"], n["resolved_at"]) for n in notified] == [(due, raced)] * len(notified)
        assert sent_once(world)
    finally:
        world.stop()


# --- another check run between the read and the write -----------------------------------------------------------

ENDINGS: dict[Kind, Callable[[World], None]] = {
    "left_open": lambda world: world.close(),
    "silent": lambda world: world.heartbeat(),
    "late_dose": lambda world: world.dose(),
}


@pytest.mark.parametrize("kind", ["left_open", "silent", "late_dose"])
def test_a_run_inside_another_s_read_and_write_notifies_once_and_the_episode_goes_on_until_it_ends(
    world, monkeypatch, kind
):
    """The other run marks the episode first, so this run's marker write misses with the episode still going on:
    it is not resolved (nor notified again) until it ends."""
    if kind == "left_open":
        world.open()
    landed = during_the_next_run(monkeypatch, kind, BEFORE_THE_MARKER, lambda: world.check(kind))

    world.at(MORNING + timedelta(minutes=65)).check(kind)
    world.after(minutes=5).check(kind)
    [notification] = world.notifications(kind)
    assert landed
    assert notification["resolved_at"] is None

    ENDINGS[kind](world.after(minutes=1))
    world.after(minutes=4).check(kind)

    assert resolutions(world, kind) == {notification["episode_start"]: world.now}
    assert sent_once(world)


# --- a run whose time budget ends with the batch the request raced ----------------------------------------------

RACED_AT: dict[Kind, Callable[[World], datetime]] = {
    "left_open": lambda world: world.after(minutes=6).now,
    "silent": lambda world: world.after(minutes=61).now,
    "late_dose": lambda world: world.at(MORNING + timedelta(minutes=65)).now,
}
ENDED_IN_TIME: dict[Kind, Callable[[World], None]] = {
    "left_open": lambda world: world.close(),
    "silent": lambda world: world.heartbeat(),
    "late_dose": lambda world: world.dose(at=MORNING + timedelta(minutes=10)),  # taken in time, uploaded late
}


@pytest.mark.parametrize("kind", ["left_open", "silent", "late_dose"])
def test_an_episode_ended_by_a_racing_request_is_resolved_by_that_run_though_its_budget_ends_there(
    world, monkeypatch, kind
):
    """The run settles the raced episode as ended at once (docs/checks.md, A device request during a run), not by
    marking it for a resolve sweep: here the run's time budget runs out with that batch, so it never reaches its
    resolve sweep, and the notification is still resolved at the run's instant, not a run later."""
    set_setting(monkeypatch, "CHECKS_TIME_BUDGET_SECONDS", "1")
    if kind == "left_open":
        world.open()
    else:
        world.heartbeat()
    landed = during_the_next_run(monkeypatch, kind, BEFORE_THE_MARKER, lambda: ENDED_IN_TIME[kind](world))
    raced = RACED_AT[kind](world)
    ticks = iter(range(0, 1000, 2))  # every reading of the clock two "seconds" on: the budget ends with the batch

    run = run_check(
        world.db,
        kind,
        partition=BucketRange(0, 1),
        now=raced,
        settings=get_settings(),
        send=world.queue,
        clock=lambda: float(next(ticks)),
    )

    assert landed
    assert (run.complete, run.notified, run.resolved) == (False, 1, 1)
    assert list(resolutions(world, kind).values()) == [raced]
