"""Dose schedules and when doses fall due: fixed local times in an IANA zone (DST-correct), or every N hours.

The rules (the late-dose check, ingestion and the status view all follow them):
- `times`: one slot at each listed local time every day. A dose is a `closed` event with `pills_taken > 0`;
  taken in time order, each dose satisfies the earliest unsatisfied slot within `grace` either side of it.
  A slot is late once `grace` has passed after it without a dose satisfying it.
- `every_hours: N`: the next dose is due N hours after the last dose (or after the schedule started); it is
  late once `grace` has passed after that without a dose, and then the next one is due N hours after the
  missed slot. A dose taken before the due time's grace ran out counts, however early.
- Slots before the schedule started (provisioning, or the last schedule change) are never due.
"""

import bisect
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from functools import lru_cache
from importlib import resources
from typing import Annotated, Any
from zoneinfo import ZoneInfo

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    StrictInt,
    StrictStr,
    Tag,
    TypeAdapter,
    field_validator,
)

HHMM = Annotated[StrictStr, Field(pattern=r"^([01]\d|2[0-3]):[0-5]\d$")]

# How far before the due slot the late-dose review re-plays doses against slots, so that a dose already
# counted for an earlier slot is not counted again (exact whenever the day has a gap longer than twice the
# grace between two slots, which ends any chain of overlapping grace windows).
REVIEW_LOOKBACK = timedelta(hours=48)


# Not a place: "Factory" is tzdata's placeholder zone for unconfigured machines.
_NOT_PLACES = frozenset({"Factory"})


@lru_cache(maxsize=1)
def _known_zones() -> frozenset[str]:
    """The IANA zones of the `tzdata` package the app ships (never the host's zoneinfo directory, which may
    hold `localtime`, `posixrules` or an older database)."""
    names = resources.files("tzdata").joinpath("zones").read_text(encoding="utf-8").split()
    return frozenset(names) - _NOT_PLACES


@lru_cache(maxsize=1024)
def zone(name: str) -> ZoneInfo:
    """A zone's rules from the shipped `tzdata` package, so every host computes the same slots."""
    path = resources.files("tzdata.zoneinfo").joinpath(*name.split("/"))
    with path.open("rb") as rules:
        return ZoneInfo.from_file(rules, key=name)


class TimesSchedule(BaseModel):
    """A dose at each listed local time, every day, in `timezone`."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    times: Annotated[list[HHMM], Field(min_length=1, max_length=24)]
    timezone: StrictStr

    @field_validator("times")
    @classmethod
    def _distinct_and_sorted(cls, times: list[str]) -> list[str]:
        if len(set(times)) != len(times):
            raise ValueError("times must not repeat")
        return sorted(times)

    @field_validator("timezone")
    @classmethod
    def _iana_zone(cls, name: str) -> str:
        if name not in _known_zones():
            raise ValueError(f"'{name}' is not an IANA time zone (for example 'Europe/Rome')")
        return name

    def slots_on(self, day: date) -> list[datetime]:
        """The UTC instants of the day's slots (local calendar day), in order. Two local times that a DST
        gap maps to the same instant are one slot."""
        rules = zone(self.timezone)
        return sorted({local_instant(day, time.fromisoformat(hhmm), rules) for hhmm in self.times})

    def slots_from(self, start: datetime) -> Iterator[datetime]:
        """Every slot at or after `start`, in order, forever."""
        day = start.astimezone(zone(self.timezone)).date() - timedelta(days=1)
        while True:
            for slot in self.slots_on(day):
                if slot >= start:
                    yield slot
            day += timedelta(days=1)

    def first_slot_from(self, start: datetime) -> datetime:
        return next(self.slots_from(start))

    def slot_after(self, slot: datetime) -> datetime:
        """The first slot strictly after `slot`."""
        return self.first_slot_from(slot + timedelta(milliseconds=1))


class IntervalSchedule(BaseModel):
    """A dose every `every_hours` hours after the previous one."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    every_hours: Annotated[StrictInt, Field(ge=1, le=168)]

    @property
    def every(self) -> timedelta:
        return timedelta(hours=self.every_hours)


def _schedule_kind(value: Any) -> str:
    if isinstance(value, dict):
        return "every_hours" if "every_hours" in value else "times"
    return "every_hours" if isinstance(value, IntervalSchedule) else "times"


Schedule = Annotated[
    Annotated[TimesSchedule, Tag("times")] | Annotated[IntervalSchedule, Tag("every_hours")],
    Discriminator(_schedule_kind),
]
_SCHEDULE: TypeAdapter[TimesSchedule | IntervalSchedule] = TypeAdapter(Schedule)


def parse_schedule(stored: Any) -> TimesSchedule | IntervalSchedule:
    """A schedule as stored (already validated at provisioning)."""
    return _SCHEDULE.validate_python(stored)


def local_instant(day: date, wall: time, rules: ZoneInfo) -> datetime:
    """The UTC instant of a local wall time. A time skipped by a DST change moves to the next valid
    instant (the end of the gap); a repeated one takes its first occurrence."""
    candidate = datetime.combine(day, wall)
    for _ in range(24 * 60):
        local = candidate.replace(tzinfo=rules, fold=0)
        instant = local.astimezone(UTC)
        if instant.astimezone(rules).replace(tzinfo=None) == candidate:
            return instant
        candidate += timedelta(minutes=1)  # inside a DST gap: walk to its end
    raise AssertionError(f"no valid local time after {day} {wall} in {rules}")  # pragma: no cover


def satisfied_slots(slots: Sequence[datetime], doses: Iterable[datetime], grace: timedelta) -> set[datetime]:
    """The slots (sorted) that doses satisfy: each dose, in time order, satisfies the earliest slot within
    `grace` either side of it that no earlier dose satisfied."""
    satisfied: set[datetime] = set()
    for dose in sorted(doses):
        index = bisect.bisect_left(slots, dose - grace)
        while index < len(slots) and slots[index] <= dose + grace:
            if slots[index] not in satisfied:
                satisfied.add(slots[index])
                break
            index += 1
    return satisfied


@dataclass(frozen=True)
class Review:
    """What a bottle's doses say from its stored due slot on: the slots that went late (in order), the slot
    due next (not late yet), and the latest slot the schedule counts a dose for (None: none), by which the
    check resolves late-dose notifications (a dose counted for an earlier slot never resolves a later one)."""

    late: list[datetime]
    next_due: datetime
    latest_counted: datetime | None = None


@dataclass(frozen=True)
class DosePlan:
    """A bottle's schedule as the checks see it: the schedule, its grace, and when it took effect."""

    schedule: TimesSchedule | IntervalSchedule
    grace: timedelta
    start: datetime

    def first_due(self, doses: Iterable[datetime] = ()) -> datetime:
        """The slot due first when the schedule takes effect at `start` (doses taken just before count)."""
        if isinstance(self.schedule, IntervalSchedule):
            return self.review(self.start + self.schedule.every, doses, self.start).next_due
        return self.review(self.schedule.first_slot_from(self.start), doses, self.start).next_due

    def review(
        self,
        due: datetime,
        doses: Iterable[datetime],
        now: datetime,
        *,
        since: datetime | None = None,
        history_full: bool = False,
    ) -> Review:
        """From the stored due slot `due` (every earlier slot is settled: satisfied or already found late),
        the slots that are late at `now` given the doses known, and the slot due next.

        `doses` may hold doses taken any time, an older one arriving late included: it is placed where it
        belongs. On a `times` schedule such a dose can only satisfy slots, never make one late. On an
        `every_hours` one it restarts the count from itself, so slots after it may be late that were not
        before: `since` (the earliest dose that arrived since the last review) widens the review back to it.
        `history_full`: `doses` is the newest part of a longer history, so the count starts at its oldest."""
        ordered = sorted(set(doses))
        if isinstance(self.schedule, IntervalSchedule):
            lowest = due if since is None else min(due, since)
            return self._review_interval(self.schedule.every, ordered, now, history_full, lowest)
        return self._review_times(self.schedule, due, ordered, now)

    def _review_times(self, schedule: TimesSchedule, due: datetime, doses: list[datetime], now: datetime) -> Review:
        since = max(self.start, due - REVIEW_LOOKBACK)
        doses = [d for d in doses if d >= since - self.grace]
        # Beyond `limit` no dose can reach a slot and no slot is late: the first slot past it is surely due.
        limit = max(due, now, *doses) + self.grace
        slots: list[datetime] = []
        for slot in schedule.slots_from(since):
            slots.append(slot)
            if slot > limit:
                break
        satisfied = satisfied_slots(slots, doses, self.grace)
        pending = [s for s in slots if s >= due and s not in satisfied]
        late = [s for s in pending if s + self.grace <= now]
        next_due = next(s for s in pending if s + self.grace > now)
        return Review(late=late, next_due=next_due, latest_counted=max(satisfied, default=None))

    def _review_interval(
        self, every: timedelta, doses: list[datetime], now: datetime, history_full: bool, lowest: datetime
    ) -> Review:
        """Every slot is counted from the latest dose before it (or the start), so the count re-plays exactly
        from any dose: from the start when every dose since is known, else from the oldest one known. Only
        the late slots at or after `lowest` are listed (the others were found before)."""
        if history_full and doses:
            due, doses = doses[0] + every, doses[1:]
        else:
            due = self.start + every
            for dose in (d for d in doses if d < self.start):
                if dose + every >= self.start:  # a dose just before the start counts; slots before it never do
                    due = dose + every
            doses = [d for d in doses if d >= self.start]
        late: list[datetime] = []
        counted = None
        for dose in doses:
            # Slots whose grace ran out before this dose are late; the dose counts for the slot after them (however
            # early) and restarts the count.
            counted = self._late_slots(every, due, _ceil_div(dose - self.grace - due, every), lowest, late)
            due = dose + every
        count = (now - self.grace - due) // every + 1 if due + self.grace <= now else 0
        next_due = self._late_slots(every, due, count, lowest, late)
        return Review(late=late, next_due=next_due, latest_counted=counted)

    @staticmethod
    def _late_slots(every: timedelta, due: datetime, count: int, lowest: datetime, late: list[datetime]) -> datetime:
        """Append the `count` slots from `due` on that are at or after `lowest`; the slot after them."""
        first = max(0, _ceil_div(lowest - due, every))
        late.extend(due + k * every for k in range(first, count))
        return due + max(count, 0) * every


def _ceil_div(span: timedelta, step: timedelta) -> int:
    return -(-span // step)
