"""Dose schedules: fixed local times in an IANA zone, or every N hours; when doses fall due."""

from collections.abc import Iterator
from datetime import UTC, date, datetime, time, timedelta
from functools import lru_cache
from typing import Annotated, Any
from zoneinfo import ZoneInfo, available_timezones

from pydantic import BaseModel, ConfigDict, Discriminator, Field, StrictInt, StrictStr, Tag, field_validator

HHMM = Annotated[StrictStr, Field(pattern=r"^([01]\d|2[0-3]):[0-5]\d$")]


@lru_cache(maxsize=1)
def _known_zones() -> frozenset[str]:
    return frozenset(available_timezones())


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
        """The UTC instants of the day's slots (local calendar day), in order."""
        zone = ZoneInfo(self.timezone)
        return [local_instant(day, time.fromisoformat(hhmm), zone) for hhmm in self.times]

    def slots_from(self, start: datetime) -> Iterator[datetime]:
        """Every slot at or after `start`, in order, forever."""
        day = start.astimezone(ZoneInfo(self.timezone)).date() - timedelta(days=1)
        while True:
            for slot in self.slots_on(day):
                if slot >= start:
                    yield slot
            day += timedelta(days=1)


class IntervalSchedule(BaseModel):
    """A dose every `every_hours` hours after the previous one."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    every_hours: Annotated[StrictInt, Field(ge=1, le=168)]


def _schedule_kind(value: Any) -> str:
    if isinstance(value, dict):
        return "every_hours" if "every_hours" in value else "times"
    return "every_hours" if isinstance(value, IntervalSchedule) else "times"


Schedule = Annotated[
    Annotated[TimesSchedule, Tag("times")] | Annotated[IntervalSchedule, Tag("every_hours")],
    Discriminator(_schedule_kind),
]


def local_instant(day: date, wall: time, zone: ZoneInfo) -> datetime:
    """The UTC instant of a local wall time. A time skipped by a DST change moves to the next valid
    instant (the end of the gap); a repeated one takes its first occurrence."""
    candidate = datetime.combine(day, wall)
    for _ in range(24 * 60):
        local = candidate.replace(tzinfo=zone, fold=0)
        instant = local.astimezone(UTC)
        if instant.astimezone(zone).replace(tzinfo=None) == candidate:
            return instant
        candidate += timedelta(minutes=1)  # inside a DST gap: walk to its end
    raise AssertionError(f"no valid local time after {day} {wall} in {zone}")  # pragma: no cover


def next_dose_due(
    schedule: TimesSchedule | IntervalSchedule,
    grace: timedelta,
    provisioned_at: datetime,
    last_dose: datetime | None,
) -> datetime:
    """When the next dose is due, given the latest dose (may be in the past: the dose is overdue).

    Interval: N hours after the last dose (or after provisioning). Times: the latest dose satisfies the
    first slot within `grace` either side of it, and the next dose is due at the slot after that; a dose
    near no slot leaves the next slot after it due. Slots before provisioning are never due.
    """
    if isinstance(schedule, IntervalSchedule):
        return (last_dose or provisioned_at) + timedelta(hours=schedule.every_hours)
    start = provisioned_at if last_dose is None else max(provisioned_at, last_dose - grace)
    slots = schedule.slots_from(start)
    first = next(slots)
    if last_dose is not None and first <= last_dose + grace:
        return next(slots)
    return first
