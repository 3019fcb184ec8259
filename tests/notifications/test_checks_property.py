"""Property: for random device event streams (some events buffered and delivered hours late) and random check
instants, running the three checks any number of times at any of those instants records exactly one notification
per true episode, and sends each (unless withheld) exactly once; a late dose's is resolved at the first check,
from the one that found it on, at which the doses delivered by then resolve it.

The true episodes come from an oracle written from the spec, independently of the app: at each check instant, the
episodes the events delivered by then show (a late slot stays an episode even if a dose delivered later turns out
to have been in time: the user was notified). A late slot is resolved by a dose counted for it or a later slot, or
by a dose after its grace (docs/checks.md).

Each of the 60 examples: one bottle provisioned with one of eight schedules and one of four graces, 3 to 30 device
events over 36 hours (about a quarter buffered up to 6 hours) sent through the app's HTTP function, and 1 to 12
instants at which each check runs 1 to 3 times. The checks run in process (`run_check` on the one partition of a
world with CHECK_PARTITIONS=1): what they record and send does not depend on the runtime that invokes them, whose
triggers tests/functions/test_check_triggers.py holds, nor on how the fleet is cut into partitions,
tests/notifications/test_check_partitions.py's."""

import itertools
from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import mongomock
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.notifications.documents import KINDS
from shared.settings import get_settings
from shared.store import client as store
from shared.store.setup import ensure_store
from tests.api import closed, heartbeat, opened
from tests.checking import World

START = datetime(2026, 5, 4, 5, 0, tzinfo=UTC)
HORIZON_MINUTES = 36 * 60
LEFT_OPEN, SILENT = timedelta(minutes=5), timedelta(minutes=60)
SCHEDULES: list[dict[str, Any]] = [
    {"times": ["08:00", "20:00"], "timezone": "Europe/Rome"},
    {"times": ["07:30", "13:00", "19:30"], "timezone": "Europe/Rome"},
    {"times": ["09:00"], "timezone": "America/New_York"},
    {"times": ["08:00", "09:00", "20:00"], "timezone": "Europe/Rome"},  # 08:00 and 09:00 share doses' grace
    {"every_hours": 2},
    {"every_hours": 4},
    {"every_hours": 8},
    {"every_hours": 12},
]
EVENT_TYPES = ("heartbeat", "opened", "closed", "dose")

Event = tuple[datetime, str, datetime]  # when it happened, what, when the server received it
Episodes = set[tuple[str, datetime]]


# --- the oracle ----------------------------------------------------------------------------------------------


def silent_episodes(events: list[Event], checks: list[datetime]) -> Episodes:
    found = set()
    for check in checks:
        alive_at = max([START] + [at for at, kind, got in events if kind == "heartbeat" and got <= check])
        if alive_at < check - SILENT:
            found.add(("silent", alive_at))
    return found


def left_open_episodes(events: list[Event], checks: list[datetime]) -> Episodes:
    found = set()
    for check in checks:
        actions = [(at, kind) for at, kind, got in events if kind != "heartbeat" and got <= check]
        if actions:
            at, kind = max(actions)
            if kind == "opened" and at < check - LEFT_OPEN:
                found.add(("left_open", at))
    return found


def times_slots(schedule: dict[str, Any], end: datetime) -> list[datetime]:
    zone = ZoneInfo(schedule["timezone"])
    slots, day = [], START.astimezone(zone).date() - timedelta(days=1)
    while day <= end.astimezone(zone).date():
        for hhmm in schedule["times"]:
            instant = datetime.combine(day, time.fromisoformat(hhmm), zone).astimezone(UTC)
            if START <= instant <= end:
                slots.append(instant)
        day += timedelta(days=1)
    return sorted(slots)


def late_episodes(schedule: dict[str, Any], grace: timedelta, events: list[Event], checks: list[datetime]) -> Episodes:
    found: Episodes = set()
    for check in checks:
        late, _ = matching(schedule, grace, delivered_doses(events, check), check)
        found |= {("late_dose", slot) for slot in late}
    return found


def delivered_doses(events: list[Event], check: datetime) -> list[datetime]:
    return sorted(at for at, kind, got in events if kind == "dose" and got <= check)


def matching(
    schedule: dict[str, Any], grace: timedelta, doses: list[datetime], now: datetime
) -> tuple[list[datetime], dict[datetime, datetime]]:
    """The slots late at `now` given these doses, and the slot each dose counts for."""
    late, counted = [], {}
    if "times" in schedule:
        slots, satisfied = times_slots(schedule, now + grace), set()
        for dose in doses:  # each dose, in time order, takes the earliest free slot within grace either side
            free = [s for s in slots if s not in satisfied and abs(dose - s) <= grace]
            if free:
                satisfied.add(free[0])
                counted[dose] = free[0]
        late = [s for s in slots if s + grace <= now and s not in satisfied]
    else:
        every, due = timedelta(hours=schedule["every_hours"]), START + timedelta(hours=schedule["every_hours"])
        for dose in doses:
            while due + grace < dose:
                late.append(due)
                due += every
            counted[dose] = due  # however early
            due = dose + every
        while due + grace <= now:
            late.append(due)
            due += every
    return late, counted


def late_resolutions(
    schedule: dict[str, Any], grace: timedelta, events: list[Event], checks: list[datetime]
) -> dict[datetime, datetime | None]:
    """Each late slot and the check that resolves its notification: the first, from the one that found the slot
    late on, at which a delivered dose is counted for the slot or a later one, or was taken after its grace."""
    resolved: dict[datetime, datetime | None] = {}
    for check in checks:
        doses = delivered_doses(events, check)
        late, counted = matching(schedule, grace, doses, check)
        resolved |= {slot: None for slot in late if slot not in resolved}
        for slot in [s for s, at in resolved.items() if at is None]:
            if any(dose > slot + grace or (dose in counted and counted[dose] >= slot) for dose in doses):
                resolved[slot] = check
    return resolved


# --- the app -------------------------------------------------------------------------------------------------


def fresh_world() -> World:
    client: Any = mongomock.MongoClient(tz_aware=True)  # a fresh in-memory server per example
    db = client[get_settings().mongodb_database]
    ensure_store(db, get_settings(), on_cosmos=False)
    store.use_client(client)
    return World(db, START, runtime=False, settings=get_settings().model_copy(update={"check_partitions": 1}))


def send(world: World, at: datetime, kind: str) -> None:
    if kind == "heartbeat":
        world.post("bottle-1", heartbeat(at))
    elif kind == "opened":
        world.post("bottle-1", opened(at))
    else:
        world.post("bottle-1", closed(at, taken=1 if kind == "dose" else 0))


minutes = st.integers(min_value=1, max_value=HORIZON_MINUTES)
# Mostly delivered at once; now and then buffered by the device and delivered up to 6 hours later.
delays = st.one_of(st.just(0), st.just(0), st.just(0), st.integers(min_value=1, max_value=360))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    schedule=st.sampled_from(SCHEDULES),
    grace_minutes=st.sampled_from([15, 30, 60, 120]),
    events=st.lists(
        st.tuples(minutes, st.sampled_from(EVENT_TYPES), delays), min_size=3, max_size=30, unique_by=lambda e: e[0]
    ),
    checks=st.lists(
        st.tuples(minutes, st.integers(min_value=1, max_value=3)), min_size=1, max_size=12, unique_by=lambda c: c[0]
    ),
)
def test_one_notification_per_true_episode_however_often_the_checks_run(schedule, grace_minutes, events, checks):
    timed_events = sorted(
        (START + timedelta(minutes=m), kind, START + timedelta(minutes=m + d)) for m, kind, d in events
    )
    check_instants = sorted(START + timedelta(minutes=m) for m, _ in checks)
    runs = dict(sorted((START + timedelta(minutes=m), repeats) for m, repeats in checks))

    world = fresh_world()
    try:
        world.provision(schedule=schedule, grace_minutes=grace_minutes)
        # At the same minute, devices go first, then the checks.
        deliveries = [(got, 0, at, kind) for at, kind, got in timed_events]
        timeline = sorted(deliveries + [(at, 1, at, "") for at in runs])
        for at, is_check, happened, kind in timeline:
            world.at(at)
            if not is_check:
                send(world, happened, kind)
                continue
            for _, kind_to_check in itertools.product(range(runs[at]), KINDS):
                world.check(kind_to_check)
        recorded = world.notifications()
    finally:
        world.stop()

    expected = (
        silent_episodes(timed_events, check_instants)
        | left_open_episodes(timed_events, check_instants)
        | late_episodes(schedule, timedelta(minutes=grace_minutes), timed_events, check_instants)
    )
    assert sorted((n["kind"], n["episode_start"]) for n in recorded) == sorted(expected)
    sent = sorted(m["notification_id"] for m in world.sent)
    assert sent == sorted(n["_id"] for n in recorded if n["delivery"] != "withheld")
    assert all(n["resolved_at"] is None or n["resolved_at"] >= n["created_at"] for n in recorded)
    late = {n["episode_start"]: n["resolved_at"] for n in recorded if n["kind"] == "late_dose"}
    assert late == late_resolutions(schedule, timedelta(minutes=grace_minutes), timed_events, check_instants)


def test_the_oracle_knows_a_dst_free_may_day_in_rome() -> None:
    # Guards the oracle itself: 08:00 and 20:00 in Rome in May are 06:00 and 18:00 UTC.
    assert times_slots(SCHEDULES[0], START + timedelta(hours=14)) == [
        datetime.combine(date(2026, 5, 4), time(6), UTC),
        datetime.combine(date(2026, 5, 4), time(18), UTC),
    ]
