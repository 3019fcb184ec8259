"""The lifecycle run's plan: a growing fleet's requests, the trouble they carry and the notifications they should
cause, the changes to the fleet and the store (provisioning, key rotations, reassignments, throttling), and the
app settings that compress the app's clocks to match (docs/lifecycle.md, "Compressed time")."""

import random
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from shared.store import schema
from tools.fleet import Bottle, BottleLife, Expected, Plan, make_fleet
from tools.simulate.in_process import SIMULATION_START

# The compressed schedules (the app's semantics on coarser clocks, and the trouble planned to match them): a bottle
# left open 35-40 minutes meets an open-bottle check every 15 minutes after its 15 minutes open, even on a clock 2
# minutes slow; a dose 15-40 minutes past its grace meets a late-dose check before it is taken; a heartbeat every 100
# minutes stays under the 150 silent minutes, and a spell offline (5 to 6.5 hours) passes them with checks to spare.
HEARTBEAT = timedelta(minutes=100)
LEFT_OPEN_FOR = (35.0, 40.0)
SETTINGS = {
    "CHECK_OPEN_BOTTLES_SCHEDULE": "0 */15 * * * *",
    "CHECK_LATE_DOSES_SCHEDULE": "0 */15 * * * *",
    "CHECK_SILENT_BOTTLES_SCHEDULE": "0 */30 * * * *",
    "REPORTS_SCHEDULE": "0 0 */2 * * *",
    "LEFT_OPEN_MINUTES": "15",
    "SILENT_MINUTES": "150",
    "HEARTBEAT_WINDOW_HOURS": "48",  # the rings keep two days: the daily comparison sees every hour and day
    "CHECK_PARTITIONS": "1",
    "REPORTS_PARTITIONS": "1",
    "QUEUE_MESSAGES_PER_PARTITION": "2",  # scaled down with the fleet: a morning peak takes several runs to send
}
# The morning peak (docs/lifecycle.md): every bottle on a times schedule takes its first dose at 08:00 Rome time,
# and misses or is late with a large share of those, so that one late-dose check finds several times what a run
# may send (the design: ~100 K late bottles at the peak against 5,000 sends per partition and run).
PEAK_ZONE, PEAK_TIME = "Europe/Rome", "08:00"
PEAK_LATE_RATE = 0.6
OFFLINE_HOURS = (5.0, 6.5)
MORNING_LATE_RATE = 0.25  # of doses due before 10:00 local time: the daily late-dose peak
THROTTLE_EVERY_DAYS = 4
THROTTLE_FOR = timedelta(hours=2)


@dataclass(frozen=True)
class Change:
    """A change to the fleet or the store at `at`: a bottle provisioned, its key rotated, its owner changed, or a
    throttling episode starting or ending."""

    at: datetime
    kind: str  # provision | rotate | reassign | throttle | unthrottle
    bottle: Bottle | None = None
    user_id: str | None = None


@dataclass
class LifecyclePlan:
    """The fleet's plan (requests, expected notifications), its changes in time order, and when each bottle joined."""

    plan: Plan
    changes: list[Change]
    joined: dict[str, datetime]


class LifecycleLife(BottleLife):
    """A bottle's days as tools/fleet.py plans them, with longer spells offline (the silent limit is longer) and
    more late doses in the morning (the daily peak), left open for longer (the open-bottle check is less often),
    refilled when empty."""

    left_open_minutes = LEFT_OPEN_FOR

    def _dose_at(self, opened_at: datetime, slot: datetime) -> datetime | None:
        """A dose; a bottle about to run out is refilled first (tools/fleet.py plans a few days, this 60: an empty
        bottle's counts would go negative, and the app refuses those)."""
        if self.pills < 2:
            self.pills = self.rng.randint(40, 90)
        return super()._dose_at(opened_at, slot)

    def _take_or_skip(self, slot: datetime) -> tuple[datetime | None, bool]:
        local = slot.astimezone(ZoneInfo(self.bottle.schedule["timezone"]))
        if local.hour < 10 and self._trouble_allowed(slot + self.bottle.grace):
            rate = PEAK_LATE_RATE if f"{local:%H:%M}" == PEAK_TIME else MORNING_LATE_RATE
            roll = self.rng.random()
            if roll < rate:
                self.plan.expected.add(Expected(self.bottle.bottle_id, "late_dose", slot))
                late = slot + self.bottle.grace + timedelta(minutes=self.rng.uniform(15, 40))
                return (None if roll < rate / 3 else self._dose_at(late, slot)), True
        return super()._take_or_skip(slot)

    def _plan_offline_window(self) -> None:
        if self.rng.random() >= 0.15:
            return
        busy = [at for at, _ in self.outbox] + [s.due for s in self.plan.slots if s.bottle_id == self.bottle.bottle_id]
        minutes = (self.plan.end - self.plan.start).total_seconds() / 60
        for _ in range(10):
            begin = self.plan.start + timedelta(minutes=self.rng.uniform(120, max(minutes, 121)))
            end = begin + timedelta(hours=self.rng.uniform(*OFFLINE_HOURS))
            margin = self.bottle.grace + timedelta(minutes=30)
            if self._trouble_allowed(end) and all(not (begin - margin <= t <= end + margin) for t in busy):
                self.offline.append((begin, end))
                return


def plan_lifecycle(rng: random.Random, bottles: int, days: float) -> LifecyclePlan:
    """A fleet that starts with a quarter of its bottles and grows to all of them by 85% of the run; a key
    rotation a day, a reassignment every third day, a throttling episode every fourth morning."""
    users = max(2, bottles // 3)
    fleet = [aligned_for_peak(bottle) for bottle in make_fleet(rng, bottles, users)]
    start, end = SIMULATION_START, SIMULATION_START + timedelta(days=days)
    plan = Plan(start=start, end=end, bottles=fleet, heartbeat=HEARTBEAT)
    initial = max(2, bottles // 4)
    changes, joined = [], {}
    for i, bottle in enumerate(fleet):
        late = max(bottles - initial, 1)
        joins = start if i < initial else start + (end - start) * 0.85 * (i - initial + 1) / late
        joined[bottle.bottle_id] = joins
        changes.append(Change(joins, "provision", bottle))
        life = Plan(start=joins + timedelta(minutes=1), end=end, bottles=[bottle], heartbeat=HEARTBEAT)
        LifecycleLife(rng, bottle, life, schedule_from=joins).play()  # its requests start a minute after
        plan.requests += life.requests
        plan.expected |= life.expected
        plan.slots += life.slots
    plan.requests.sort(key=lambda r: (r.at, r.bottle_id))
    for day in range(int(days) + (days % 1 > 0)):
        at = start + timedelta(days=day, hours=rng.uniform(1, 23))
        present = [b for b in fleet if joined[b.bottle_id] < at]
        if at < end and present:
            changes.append(Change(at, "rotate", rng.choice(present)))
        if day % 3 == 1 and at < end and present:
            moved = rng.choice(present)
            changes.append(Change(at + timedelta(minutes=7), "reassign", moved, f"user-{rng.randrange(users):03d}"))
        if day % THROTTLE_EVERY_DAYS == 1:
            morning = start + timedelta(days=day, hours=2)  # the run starts at 05:00 UTC: 07:00
            if morning + THROTTLE_FOR < end:
                changes += [Change(morning, "throttle"), Change(morning + THROTTLE_FOR, "unthrottle")]
    return LifecyclePlan(plan, sorted(changes, key=lambda c: c.at), joined)


def aligned_for_peak(bottle: Bottle) -> Bottle:
    """A bottle on a times schedule takes its first dose of the day at PEAK_TIME in PEAK_ZONE (tools/fleet.py's
    first times are all 07:30-09:00): the fleet's morning doses fall due together, the morning peak."""
    if "times" not in bottle.schedule:
        return bottle
    times = [PEAK_TIME, *bottle.schedule["times"][1:]]
    return replace(bottle, schedule={**bottle.schedule, "times": times, "timezone": PEAK_ZONE})


def planned_documents(life: LifecyclePlan) -> dict[str, int]:
    """How many documents each splitting collection will hold by the end of the plan (about)."""
    plan = life.plan
    actions = sum(
        1
        for r in plan.requests
        for event in (r.payload.get("events", [r.payload]) if isinstance(r.payload, dict) else [])
        if isinstance(event, dict) and event.get("type") in ("opened", "closed")
    )
    users = len({b.user_id for b in plan.bottles})
    hours = (plan.end - plan.start).total_seconds() / 3600
    return {
        schema.BOTTLE_ACTIONS: actions,
        schema.BOTTLE_HEARTBEATS: len(plan.bottles),
        schema.USER_HOURLY_REPORTS: int(users * hours * 0.8),
        schema.USER_DAILY_REPORTS: int(users * max(hours / 24, 1)),
    }
