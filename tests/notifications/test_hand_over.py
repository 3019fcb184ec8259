"""A bottle handed to another user (provisioned again with a new `user_id`) while one of its episodes is notified:
the notification stays with the user it was sent to, and is resolved when the episode ends, whoever owns the
bottle then (docs/checks.md, "A bottle handed over"). For each of the three checks: a hand-over, two, a hand-over
back, and a hand-over landing inside a check run, between its read of the bottle and its writes."""

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pymongo import UpdateOne
from pymongo.database import Database

from shared.notifications import documents
from shared.notifications.checks import run
from shared.notifications.checks.rules import CHECKS, LEFT_OPEN, SILENT, Writes
from shared.notifications.documents import Episode, Kind
from shared.settings import get_settings
from shared.store.retries import count_matched
from tests.checking import World
from tests.notifications.test_checks_interleaved_with_devices import BEFORE_THE_MARKER, PLACES, during_the_next_run
from tests.report_client import set_setting

START = datetime(2026, 5, 4, 5, 0, tzinfo=UTC)
FIRST, SECOND, THIRD = "willcross1024", "second-owner", "third-owner"


@dataclass(frozen=True)
class Trouble:
    """How a check's episode begins (at START), when a check run notifies it, and what ends it."""

    kind: Kind
    begin: Callable[[World], None]
    notified_at: datetime
    end: Callable[[World], None]


TROUBLES = [
    Trouble("left_open", lambda world: world.open(), START + timedelta(minutes=6), lambda world: world.close()),
    Trouble("silent", lambda world: world.heartbeat(), START + timedelta(minutes=61), lambda world: world.heartbeat()),
    # The default schedule's 08:00 in Rome is 06:00 UTC, late at 07:00; a dose at 07:10 resolves it.
    Trouble("late_dose", lambda world: None, START + timedelta(hours=2, minutes=5), lambda world: world.dose()),
]
BY_KIND = pytest.mark.parametrize("trouble", TROUBLES, ids=[t.kind for t in TROUBLES])


def bench(db: Database[Any], monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    set_setting(monkeypatch, "CHECK_PARTITIONS", "1")
    world = World(db, START)
    world.provision(user_id=FIRST)
    yield world
    world.stop()


@pytest.fixture
def world(mock_db: Database[Any], monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    yield from bench(mock_db, monkeypatch)


@pytest.fixture
def world_on_secantus(real_db: Database[Any], monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    yield from bench(real_db, monkeypatch)


def hand_over(world: World, user_id: str) -> None:
    """Provision the bottle again, as its registry was, with another user."""
    world.after(minutes=1).provision(user_id=user_id)


def owners_and_resolutions(world: World, kind: Kind) -> list[tuple[str, bool]]:
    """Each notification of `kind`, oldest episode first: the user it belongs to, and whether it is resolved."""
    return [(n["user_id"], n["resolved_at"] is not None) for n in world.notifications(kind)]


def end_and_check(world: World, trouble: Trouble) -> None:
    """End the episode, then let the check run as its timer would for a quarter of an hour."""
    world.after(minutes=5)
    trouble.end(world)
    world.every(trouble.kind, until=world.now + timedelta(minutes=15), step=timedelta(minutes=1))


@BY_KIND
@pytest.mark.parametrize(
    ("before", "after", "notified"),
    [
        ([], [SECOND], FIRST),  # a hand-over
        ([], [SECOND, THIRD], FIRST),  # two hand-overs
        ([SECOND], [FIRST], SECOND),  # a hand-over back: notified while the second owner had it
    ],
    ids=["a hand-over", "two hand-overs", "a hand-over back"],
)
def test_a_notification_is_resolved_for_the_user_it_was_sent_to_whoever_owns_the_bottle_when_it_ends(
    world: World, trouble: Trouble, before: list[str], after: list[str], notified: str
) -> None:
    handed_over_around_the_notification(world, trouble, before, after, notified)


@pytest.mark.integration
@BY_KIND
def test_on_secantus_a_notification_sent_between_a_hand_over_and_a_hand_over_back_is_resolved(
    world_on_secantus: World, trouble: Trouble
) -> None:
    handed_over_around_the_notification(world_on_secantus, trouble, [SECOND], [FIRST], SECOND)


def handed_over_around_the_notification(
    world: World, trouble: Trouble, before: list[str], after: list[str], notified: str
) -> None:
    """The bottle handed to each of `before`, the episode notified (to `notified`), handed to each of `after`,
    then the episode ends: its one notification is `notified`'s, and resolved."""
    trouble.begin(world)
    for user_id in before:
        hand_over(world, user_id)
    [message] = world.at(trouble.notified_at).check(trouble.kind)
    for user_id in after:
        hand_over(world, user_id)

    end_and_check(world, trouble)

    assert message["user_id"] == notified
    assert owners_and_resolutions(world, trouble.kind) == [(notified, True)]


@BY_KIND
@pytest.mark.parametrize("place", PLACES)
def test_a_hand_over_during_the_run_that_notifies_leaves_the_notification_with_the_owner_it_read(
    world: World, monkeypatch: pytest.MonkeyPatch, trouble: Trouble, place: str
) -> None:
    """The hand-over lands after the run read the bottle: just before it records the notification, or just after
    (before the bottle's marker is written). The notification is the first owner's, and it is resolved."""
    trouble.begin(world)
    landed = during_the_next_run(monkeypatch, trouble.kind, place, lambda: world.provision(user_id=SECOND))

    [message] = world.at(trouble.notified_at).check(trouble.kind)
    end_and_check(world, trouble)

    assert landed
    assert message["user_id"] == FIRST
    assert owners_and_resolutions(world, trouble.kind) == [(FIRST, True)]


def test_two_late_slots_sent_to_two_owners_are_both_resolved_by_the_dose_after_a_hand_over_back(
    world: World,
) -> None:
    """08:00 in Rome (06:00 UTC) goes late while the first owner has the bottle, 20:00 (18:00 UTC) while the second
    has it; handed back, a dose at 19:10 UTC is counted for 20:00 and resolves both slots, each in its owner's
    notifications."""
    world.at(START + timedelta(hours=2, minutes=5)).check("late_dose")
    hand_over(world, SECOND)
    world.at(datetime(2026, 5, 4, 19, 5, tzinfo=UTC)).check("late_dose")
    hand_over(world, FIRST)

    world.at(datetime(2026, 5, 4, 19, 10, tzinfo=UTC)).dose()
    world.every("late_dose", until=world.now + timedelta(minutes=10))

    assert owners_and_resolutions(world, "late_dose") == [(FIRST, True), (SECOND, True)]


@pytest.mark.parametrize("check", [LEFT_OPEN, SILENT], ids=["left_open", "silent"])
def test_the_settle_resolves_an_earlier_marked_episode_for_the_users_its_marker_records(check: Any) -> None:
    """The run's marker write missed, and reading the bottle again it finds an earlier episode still marked, sent
    to the first owner before a hand-over: that episode is over (the one just recorded began after it), and its
    notification is resolved in the first owner's partition, not the new owner's."""
    now, earlier, latest = START + timedelta(hours=3), START, START + timedelta(hours=1)
    document = {
        "_id": "bottle-1",
        "user_id": SECOND,
        "medication": "Cordrazine",
        check.marker: earlier,
        check.users: [FIRST],
        # Going on since `latest` (left open: opened then; silent: last heard of then).
        "last_action": "opened",
        "open_since": latest,
        "alive_at": latest,
    }
    writes = Writes()
    recorded = [Episode("bottle-1", SECOND, "Cordrazine", check.kind, latest)]

    check.settler(now, get_settings())(document, recorded, writes)

    assert writes.resolutions == [documents.resolve_episode(FIRST, "bottle-1", check.kind, earlier, now)]
    [marked] = writes.status
    assert marked == UpdateOne(
        {"_id": "bottle-1", "bottle_id": "bottle-1", check.marker: earlier, check.users: [FIRST]},
        {"$set": {check.marker: latest, check.users: [SECOND], check.pending: True}},
    )


def settle_of_a_run_that_notified_first(world: World, check: Any, episode_start: datetime) -> Callable[[], None]:
    """What the settle of a run that read the bottle before the hand-over writes, its notification of the episode
    that began at `episode_start` the first owner's (it came first) and its marker write beaten by a run that read
    the bottle after the hand-over: it adds the first owner to the marker, from the bottle as it reads it then."""
    collection = world.db[CHECKS[check.kind].collection]

    def settle() -> None:
        bottle = collection.find_one({"_id": "bottle-1"}, CHECKS[check.kind].projection)
        writes = Writes()
        recorded = [Episode("bottle-1", FIRST, bottle["medication"], check.kind, episode_start)]
        check.settler(world.now, get_settings())(bottle, recorded, writes)
        assert writes.status, "the settle adds the first owner"
        collection.bulk_write(writes.status)

    return settle


def marked_by_a_run_that_read_the_second_owner(world: World, check: Any) -> None:
    """The marker as a run that read the bottle after its hand-over leaves it when its marker write lands first:
    its users are the second owner only."""
    world.db[CHECKS[check.kind].collection].update_one({"_id": "bottle-1"}, {"$set": {check.users: [SECOND]}})


ONE_MARKER = [(LEFT_OPEN, TROUBLES[0]), (SILENT, TROUBLES[1])]


@pytest.mark.parametrize(("check", "trouble"), ONE_MARKER, ids=["left_open", "silent"])
def test_an_owner_added_to_an_ended_marker_while_a_run_marks_the_next_episode_is_still_resolved(
    world: World, monkeypatch: pytest.MonkeyPatch, check: Any, trouble: Trouble
) -> None:
    """Two runs notified the first episode side by side around a hand-over: the first owner's notification came
    first, the marker write of the run that read the second owner landed first. That episode ends and the next one
    goes on long enough to be notified; a third run reads the bottle, and the first run's settle adds the first
    owner to the ended marker before the third run replaces the marker with the next episode. The first owner's
    notification of the first episode is resolved all the same."""
    trouble.begin(world)
    [message] = world.at(trouble.notified_at).check(trouble.kind)
    hand_over(world, SECOND)
    marked_by_a_run_that_read_the_second_owner(world, check)
    world.after(minutes=1)
    trouble.end(world)
    world.after(minutes=1)
    trouble.begin(world)
    landed = during_the_next_run(
        monkeypatch, trouble.kind, BEFORE_THE_MARKER, settle_of_a_run_that_notified_first(world, check, START)
    )

    [second] = world.after(minutes=(trouble.notified_at - START) // timedelta(minutes=1)).check(trouble.kind)
    end_and_check(world, trouble)

    assert landed
    assert (message["user_id"], second["user_id"]) == (FIRST, SECOND)
    assert owners_and_resolutions(world, trouble.kind) == [(FIRST, True), (SECOND, True)]


@pytest.mark.parametrize(("check", "trouble"), ONE_MARKER, ids=["left_open", "silent"])
def test_an_owner_the_settle_adds_to_a_marker_another_run_clears_meanwhile_is_resolved(
    world: World, monkeypatch: pytest.MonkeyPatch, check: Any, trouble: Trouble
) -> None:
    """A run notifies the first owner; before its marker write, the bottle is handed over and a run that read the
    second owner marks the episode, so the first run's settle adds the first owner to that marker. Between the
    settle's read and its write the episode ends and another run clears the marker: the settle reads the bottle
    again and resolves the first owner's notification."""
    trouble.begin(world)

    def marked_for_the_second_owner() -> None:
        world.provision(user_id=SECOND)
        world.db[CHECKS[check.kind].collection].update_one(
            {"_id": "bottle-1"}, {"$set": {check.marker: START, check.users: [SECOND], check.pending: False}}
        )

    landed = during_the_next_run(monkeypatch, trouble.kind, BEFORE_THE_MARKER, marked_for_the_second_owner)
    writes_counted: list[int] = []

    def counting(*args: Any) -> int:
        writes_counted.append(1)
        if len(writes_counted) == 2:  # the settle's, after it read the bottle again
            trouble.end(world)
            world.check(trouble.kind)
        return count_matched(*args)

    monkeypatch.setattr(run, "count_matched", counting)
    [message] = world.at(trouble.notified_at).check(trouble.kind)

    assert landed
    assert message["user_id"] == FIRST
    assert owners_and_resolutions(world, trouble.kind) == [(FIRST, True)]
