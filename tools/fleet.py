"""A simulated fleet and what its users do: a deterministic plan of device requests, with injected
trouble and the notifications that trouble must cause (the ground truth the simulation is scored on)."""

import random
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

ZONES = ("Europe/Rome", "Europe/London", "America/New_York", "America/Los_Angeles", "Asia/Tokyo", "UTC")
TIMES_SCHEDULES = (("08:00", "20:00"), ("09:00",), ("07:30", "13:00", "19:30"), ("08:00", "14:00", "22:00"))
INTERVALS = (8, 12)
HEARTBEAT = timedelta(minutes=30)
# Checks run every 1-5 minutes; trouble is only injected where its notification is due well before the end.
QUIET_TAIL = timedelta(hours=3)
LEFT_OPEN = timedelta(minutes=5)


@dataclass(frozen=True)
class Bottle:
    bottle_id: str
    user_id: str
    medication: str
    schedule: dict[str, Any]
    grace_minutes: int = 60

    @property
    def grace(self) -> timedelta:
        return timedelta(minutes=self.grace_minutes)

    def spec(self) -> dict[str, Any]:
        return {
            "user_id": self.user_id,
            "medication": self.medication,
            "schedule": self.schedule,
            "grace_minutes": self.grace_minutes,
        }


@dataclass(frozen=True)
class Request:
    """One HTTP request a device sends at `at` (simulated time)."""

    at: datetime
    bottle_id: str
    payload: Any
    kind: str = "normal"  # normal | retry | invalid | buffered

    @property
    def event_count(self) -> int:
        if isinstance(self.payload, dict) and isinstance(self.payload.get("events"), list):
            return len(self.payload["events"])
        return 1


@dataclass(frozen=True)
class Expected:
    bottle_id: str
    kind: str  # late_dose | left_open | silent
    episode_start: datetime


@dataclass(frozen=True)
class DoseSlot:
    """A scheduled dose and what the user did about it."""

    bottle_id: str
    due: datetime
    taken: datetime | None  # the dose (its close), or None: not taken within the simulated days
    late: bool  # injected trouble: taken after the grace ran out, or never

    @property
    def outcome(self) -> str:
        """on_time, late, missed, or due (the simulation ended before the dose was taken or overdue)."""
        if self.late:
            return "late" if self.taken else "missed"
        return "on_time" if self.taken else "due"


@dataclass
class Plan:
    start: datetime
    end: datetime
    bottles: list[Bottle]
    heartbeat: timedelta = HEARTBEAT
    requests: list[Request] = field(default_factory=list)
    expected: set[Expected] = field(default_factory=set)
    slots: list[DoseSlot] = field(default_factory=list)


def make_fleet(rng: random.Random, bottles: int, users: int) -> list[Bottle]:
    fleet = []
    for i in range(bottles):
        user = i % users
        zone = ZONES[user % len(ZONES)]
        if rng.random() < 0.8:
            schedule: dict[str, Any] = {"times": list(rng.choice(TIMES_SCHEDULES)), "timezone": zone}
        else:
            schedule = {"every_hours": rng.choice(INTERVALS)}
        medication = rng.choice(("Cordrazine", "Tri-ox", "Hyronalin", "Kayolane", "Masiform D"))
        fleet.append(Bottle(f"bottle-{i:04d}", f"user-{user:03d}", medication, schedule))
    return fleet


def plan_fleet(
    rng: random.Random, fleet: list[Bottle], start: datetime, days: float, heartbeat: timedelta = HEARTBEAT
) -> Plan:
    plan = Plan(start=start, end=start + timedelta(days=days), bottles=fleet, heartbeat=heartbeat)
    for bottle in fleet:
        BottleLife(rng, bottle, plan).play()
    plan.requests.sort(key=lambda r: (r.at, r.bottle_id))
    return plan


def dose_slots(bottle: Bottle, start: datetime, end: datetime) -> list[datetime]:
    """The bottle's scheduled instants in [start, end) for a times schedule (independent of the app)."""
    zone = ZoneInfo(bottle.schedule["timezone"])
    slots = []
    day: date = start.astimezone(zone).date() - timedelta(days=1)
    while datetime.combine(day, time(), zone) < end + timedelta(days=1):
        for hhmm in bottle.schedule["times"]:
            instant = datetime.combine(day, time.fromisoformat(hhmm), zone).astimezone(UTC)
            if start <= instant < end:
                slots.append(instant)
        day += timedelta(days=1)
    return sorted(slots)


class BottleLife:
    """One bottle's days: heartbeats, doses with jitter, and now and then trouble. Its schedule counts from
    `schedule_from`, when the app provisioned it (default: the plan's start), as the app counts it: a bottle whose
    requests start after its provisioning still has its first slot where the app puts it."""

    left_open_minutes = (10.0, 20.0)  # how long a bottle left open stays open (past the app's LEFT_OPEN_MINUTES)

    def __init__(self, rng: random.Random, bottle: Bottle, plan: Plan, schedule_from: datetime | None = None) -> None:
        self.rng = rng
        self.bottle = bottle
        self.plan = plan
        self.schedule_from = plan.start if schedule_from is None else schedule_from
        self.pills = rng.randint(40, 90)
        self.offline: list[tuple[datetime, datetime]] = []
        self.outbox: list[tuple[datetime, dict[str, Any]]] = []

    def play(self) -> None:
        self._doses()
        self._heartbeats()
        self._deliver()
        self._retries_and_invalid()

    # --- doses -------------------------------------------------------------------------------
    def _doses(self) -> None:
        """Plan every dose and its trouble, then perhaps a spell offline between doses."""
        if "times" in self.bottle.schedule:
            for slot in dose_slots(self.bottle, self.schedule_from, self.plan.end):
                self._record(slot, *self._take_or_skip(slot))
        else:
            every = timedelta(hours=self.bottle.schedule["every_hours"])
            due = self.schedule_from + every
            while due < self.plan.end:
                taken, late = self._take_or_skip_interval(due)
                self._record(due, taken, late)
                due = (taken if taken is not None else due) + every
        self._plan_offline_window()

    def _trouble_allowed(self, at: datetime) -> bool:
        return at < self.plan.end - QUIET_TAIL

    def _record(self, due: datetime, taken: datetime | None, late: bool) -> None:
        self.plan.slots.append(DoseSlot(self.bottle.bottle_id, due, taken, late))

    def _take_or_skip(self, slot: datetime) -> tuple[datetime | None, bool]:
        """The dose's time (None when missed) and whether it is late."""
        roll = self.rng.random()
        grace = self.bottle.grace
        if roll < 0.05 and self._trouble_allowed(slot + grace):
            self.plan.expected.add(Expected(self.bottle.bottle_id, "late_dose", slot))
            if roll < 0.03:
                return None, True  # missed altogether
            return self._dose_at(slot + grace + timedelta(minutes=self.rng.uniform(15, 40)), slot), True
        return self._dose_at(slot + timedelta(minutes=self.rng.uniform(-20, 20)), slot), False

    def _take_or_skip_interval(self, due: datetime) -> tuple[datetime | None, bool]:
        """As `_take_or_skip`; after a missed dose the next is due N hours after the missed one."""
        if self.rng.random() < 0.04 and self._trouble_allowed(due + self.bottle.grace):
            self.plan.expected.add(Expected(self.bottle.bottle_id, "late_dose", due))
            return None, True
        return self._dose_at(due + timedelta(minutes=self.rng.uniform(-20, 20)), due), False

    def _dose_at(self, opened_at: datetime, slot: datetime) -> datetime | None:
        """Open, take a pill, close; returns the dose (close) time. Sometimes the bottle is left open."""
        opened_at = max(opened_at, self.plan.start + timedelta(minutes=1))
        if opened_at >= self.plan.end:
            return None
        left_open = self.rng.random() < 0.03 and self._trouble_allowed(opened_at + LEFT_OPEN)
        open_for = timedelta(
            minutes=self.rng.uniform(*self.left_open_minutes) if left_open else self.rng.uniform(0.15, 1.5)
        )
        closed_at = opened_at + open_for
        if closed_at - slot > self.bottle.grace:  # keep a left-open dose inside its slot's grace
            closed_at = opened_at + timedelta(seconds=60)
            left_open = False
        if left_open:
            self.plan.expected.add(Expected(self.bottle.bottle_id, "left_open", _ms(opened_at)))
        mass = round(self.pills * 0.5, 2)
        opened = {"type": "opened", "time": _iso(opened_at), "mass_of_contents": mass, "number_of_pills": self.pills}
        self.pills -= 1
        closed = {
            "type": "closed",
            "time": _iso(closed_at),
            "mass_of_contents": round(self.pills * 0.5, 2),
            "number_of_pills": self.pills,
            "pills_taken": 1,
        }
        self.outbox += [(opened_at, opened), (closed_at, closed)]
        return _ms(closed_at)

    # --- connectivity ------------------------------------------------------------------------
    def _plan_offline_window(self) -> None:
        """One bottle in ten drops offline for 2.5-3.5 h between doses, then uploads what it buffered."""
        if self.rng.random() >= 0.10:
            return
        busy = [at for at, _ in self.outbox] + [s.due for s in self.plan.slots if s.bottle_id == self.bottle.bottle_id]
        minutes = (self.plan.end - self.plan.start).total_seconds() / 60
        for _ in range(10):
            begin = self.plan.start + timedelta(minutes=self.rng.uniform(60, minutes))
            end = begin + timedelta(hours=self.rng.uniform(2.5, 3.5))
            margin = self.bottle.grace + timedelta(minutes=30)
            if self._trouble_allowed(end) and all(not (begin - margin <= t <= end + margin) for t in busy):
                self.offline.append((begin, end))
                return

    def _is_offline(self, at: datetime) -> tuple[datetime, datetime] | None:
        return next(((b, e) for b, e in self.offline if b <= at < e), None)

    def _heartbeats(self) -> None:
        at = self.plan.start + timedelta(seconds=self.rng.uniform(0, self.plan.heartbeat.total_seconds()))
        last_sent: datetime | None = None
        while at < self.plan.end:
            window = self._is_offline(at)
            if (
                window is not None
                and last_sent is not None
                and not any(
                    e.episode_start == last_sent for e in self.plan.expected if e.bottle_id == self.bottle.bottle_id
                )
            ):
                self.plan.expected.add(Expected(self.bottle.bottle_id, "silent", last_sent))
            self.outbox.append((at, {"type": "heartbeat", "time": _iso(at)}))
            if window is None:
                last_sent = _ms(at)
            at += self.plan.heartbeat

    def _deliver(self) -> None:
        """Online events go up as they happen; events from an offline spell go up in one late batch."""
        buffered: dict[tuple[datetime, datetime], list[dict[str, Any]]] = {}
        for at, event in sorted(self.outbox, key=lambda item: item[0]):
            window = self._is_offline(at)
            if window is None:
                self.plan.requests.append(Request(at, self.bottle.bottle_id, event))
            else:
                buffered.setdefault(window, []).append(event)
        for (_, back_online), events in buffered.items():
            self.plan.requests.append(Request(back_online, self.bottle.bottle_id, {"events": events}, "buffered"))

    def _retries_and_invalid(self) -> None:
        """Devices retry a request now and then (same body), and a few send something invalid."""
        mine = [r for r in self.plan.requests if r.bottle_id == self.bottle.bottle_id and r.kind == "normal"]
        for request in mine:
            if self.rng.random() < 0.03:
                retry = Request(request.at + timedelta(seconds=5), request.bottle_id, request.payload, "retry")
                self.plan.requests.append(retry)
            if self.rng.random() < 0.01:
                bad = dict(request.payload, firmware="1.2.3") if self.rng.random() < 0.5 else {"type": "heartbeat"}
                self.plan.requests.append(Request(request.at + timedelta(seconds=1), request.bottle_id, bad, "invalid"))


def _ms(moment: datetime) -> datetime:
    return moment.replace(microsecond=moment.microsecond // 1000 * 1000)


def _iso(moment: datetime) -> str:
    return _ms(moment).isoformat().replace("+00:00", "Z")
