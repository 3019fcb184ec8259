"""NCRONTAB, the six-field cron of Azure Functions timers: `{second} {minute} {hour} {day} {month}
{day-of-week}`. Enough of it to run the app's timers locally and in simulated time."""

from dataclasses import dataclass
from datetime import datetime, timedelta

_FIELDS = (("second", 0, 59), ("minute", 0, 59), ("hour", 0, 23), ("day", 1, 31), ("month", 1, 12), ("weekday", 0, 6))


def _parse_field(text: str, low: int, high: int, name: str) -> frozenset[int]:
    values: set[int] = set()
    for part in text.split(","):
        base, _, step_text = part.partition("/")
        step = int(step_text) if step_text else 1
        if base == "*":
            start, end = low, high
        elif "-" in base:
            start, end = (int(v) for v in base.split("-", 1))
        else:
            start = int(base)
            end = high if step_text else start
        if not (low <= start <= end <= high) or step < 1:
            raise ValueError(f"NCRONTAB {name} field '{part}' is outside {low}-{high}")
        values.update(range(start, end + 1, step))
    return frozenset(values)


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
        parts = expression.split()
        if len(parts) != 6:
            raise ValueError(f"NCRONTAB '{expression}' needs 6 fields (second minute hour day month day-of-week)")
        fields = [_parse_field(p, low, high, name) for p, (name, low, high) in zip(parts, _FIELDS, strict=True)]
        return cls(*fields)

    def _day_matches(self, moment: datetime) -> bool:
        weekday = (moment.weekday() + 1) % 7  # cron counts Sunday as 0
        return moment.month in self.months and moment.day in self.days and weekday in self.weekdays

    def next_after(self, moment: datetime) -> datetime:
        """The first firing strictly after `moment` (same time zone as `moment`)."""
        candidate = moment.replace(microsecond=0) + timedelta(seconds=1)
        for _ in range(366 * 24 * 60 + 1):
            if self._day_matches(candidate) and candidate.hour in self.hours and candidate.minute in self.minutes:
                later = [s for s in sorted(self.seconds) if s >= candidate.second]
                if later:
                    return candidate.replace(second=later[0])
            candidate = candidate.replace(second=0) + timedelta(minutes=1)
        raise ValueError("schedule never fires")
