"""NCRONTAB, the six-field cron of Azure Functions timers: `{second} {minute} {hour} {day} {month}
{day-of-week}`. The settings check every schedule with it at start-up; the local host and the simulator run
the timers on it.

As Microsoft Learn's "Timer trigger for Azure Functions" (NCRONTAB expressions,
https://learn.microsoft.com/azure/azure-functions/functions-bindings-timer#ncrontab-expressions) describes it
and NCrontab (the library the host uses) reads it: each field is `*`, a value, a range `a-b`, a list `a,b`, or
an interval `*/n` or `a/n` or `a-b/n`; months and days of the week may be named in English, whole or abbreviated,
in any case (`Jan`, `monday`); the day of the week counts Sunday as 0; a date must match the day, the month AND
the day of the week. Stricter than NCrontab where it would quietly guess: a range must run from low to high (it
swaps `Fri-Mon`), an interval must be at least 1 (it reads `*/0` as `*`), a name needs three letters (it takes
`M` for March), and a schedule that never fires (`0 0 0 31 2 *`) is refused (its timer would never run)."""

import calendar
import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta

_MONTHS = tuple(calendar.month_name[1:])
_WEEKDAYS = ("Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")
_NUMBER = re.compile(r"[0-9]{1,9}")
_GREGORIAN_CYCLE_YEARS = 400  # the calendar, weekdays included, repeats every 400 years


@dataclass(frozen=True)
class _Field:
    name: str
    low: int
    high: int
    names: tuple[str, ...] = ()

    def value(self, text: str, part: str) -> int:
        """A value of this field written as digits or (months and days of the week) a name."""
        if _NUMBER.fullmatch(text):
            return int(text)
        if self.names and text.isascii() and text.isalpha() and len(text) >= 3:
            for index, name in enumerate(self.names):
                if name.lower().startswith(text.lower()):
                    return self.low + index
        named = f", or a name ({', '.join(n[:3] for n in self.names)})" if self.names else ""
        raise ValueError(f"NCRONTAB {self.name} field '{part}': '{text}' is not a number {self.low}-{self.high}{named}")

    def parse(self, text: str) -> frozenset[int]:
        """The values a field's text selects; a ValueError naming the field and the part it cannot read."""
        values: set[int] = set()
        for part in text.split(","):
            values.update(self._part(part))
        return frozenset(values)

    def _part(self, part: str) -> range:
        base, slash, step_text = part.partition("/")
        if slash and not (_NUMBER.fullmatch(step_text) and int(step_text) >= 1):
            raise ValueError(f"NCRONTAB {self.name} field '{part}': the interval after '/' must be a number from 1")
        step = int(step_text) if slash else 1
        if base == "*":
            start, end = self.low, self.high
        elif "-" in base:
            first, _, last = base.partition("-")
            start, end = self.value(first, part), self.value(last, part)
        else:
            start = self.value(base, part)
            end = self.high if slash else start
        for value in (start, end):
            if not self.low <= value <= self.high:
                raise ValueError(f"NCRONTAB {self.name} field '{part}': {value} is outside {self.low}-{self.high}")
        if start > end:
            raise ValueError(f"NCRONTAB {self.name} field '{part}': a range runs from low to high")
        return range(start, end + 1, step)


_FIELDS = (
    _Field("second", 0, 59),
    _Field("minute", 0, 59),
    _Field("hour", 0, 23),
    _Field("day", 1, 31),
    _Field("month", 1, 12, _MONTHS),
    _Field("day-of-week", 0, 6, _WEEKDAYS),
)


@dataclass(frozen=True)
class Schedule:
    seconds: frozenset[int]
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]

    @classmethod
    def parse(cls, expression: str) -> "Schedule":
        """The schedule an expression describes, or a ValueError saying what in it is wrong (never-firing
        included): the host would not run such a timer, so neither should anything here."""
        parts = expression.split()
        if len(parts) != 6:
            raise ValueError(
                f"NCRONTAB needs 6 fields (second minute hour day month day-of-week), not {len(parts)}: "
                "for example '0 */5 * * * *' (every 5 minutes)"
            )
        schedule = cls(*(field.parse(part) for part, field in zip(parts, _FIELDS, strict=True)))
        if next(schedule._dates_from(date(2000, 1, 1)), None) is None:
            raise ValueError(
                "NCRONTAB schedule never fires: no date matches its day, month and day-of-week fields together"
            )
        return schedule

    def next_after(self, moment: datetime) -> datetime:
        """The first firing strictly after `moment` (same time zone as `moment`)."""
        start = moment.replace(microsecond=0) + timedelta(seconds=1)
        for day in self._dates_from(start.date()):
            at = self._first_time_from(start.time() if day == start.date() else time())
            if at is not None:
                return datetime.combine(day, at, tzinfo=moment.tzinfo)
        raise ValueError("schedule never fires")  # parse() refuses such a schedule; only past year 9999

    def shortest_interval(self) -> timedelta:
        """The shortest time between two consecutive firings: within a day, between its times; across days, from
        the last time of a firing day to the first of the next, the nearest two firing dates apart (found within
        one Gregorian cycle, which every calendar pattern repeats in)."""
        times = sorted(h * 3600 + m * 60 + s for h in self.hours for m in self.minutes for s in self.seconds)
        within = min((b - a for a, b in itertools.pairwise(times)), default=None)
        day = 86_400
        if within is not None and within <= day - times[-1] + times[0]:
            return timedelta(seconds=within)  # across days is never shorter, whatever the dates
        fewest_days = None
        dates = self._dates_from(date(2000, 1, 1))
        previous = next(dates)
        for found in dates:
            days = (found - previous).days
            fewest_days = days if fewest_days is None else min(fewest_days, days)
            if fewest_days == 1:
                break
            previous = found
        if fewest_days is None:  # one firing date in the cycle: none after it to measure to
            return timedelta(seconds=within) if within is not None else timedelta(days=_GREGORIAN_CYCLE_YEARS * 366)
        across = fewest_days * day - times[-1] + times[0]
        return timedelta(seconds=across if within is None else min(within, across))

    def _dates_from(self, first: date) -> Iterator[date]:
        """Every date from `first` on (within one Gregorian cycle) that matches day, month and day of week."""
        for year in range(first.year, min(first.year + _GREGORIAN_CYCLE_YEARS + 1, 10_000)):
            for month in sorted(self.months):
                if (year, month) < (first.year, first.month):
                    continue
                last = calendar.monthrange(year, month)[1]
                for day in sorted(d for d in self.days if d <= last):
                    found = date(year, month, day)
                    if found >= first and found.isoweekday() % 7 in self.weekdays:  # cron counts Sunday as 0
                        yield found

    def _first_time_from(self, earliest: time) -> time | None:
        """The first second of a day at or after `earliest` that the schedule fires at, or None."""
        for hour in sorted(h for h in self.hours if h >= earliest.hour):
            for minute in sorted(self.minutes):
                if (hour, minute) < (earliest.hour, earliest.minute):
                    continue
                same_minute = (hour, minute) == (earliest.hour, earliest.minute)
                seconds = sorted(s for s in self.seconds if not same_minute or s >= earliest.second)
                if seconds:
                    return time(hour, minute, seconds[0])
        return None
