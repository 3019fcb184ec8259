"""Points in time as the API and the store see them: aware UTC datetimes at millisecond precision."""

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta, timezone
from functools import partial

# The contract's date-time (openapi.yaml `Instant`; RFC 3339's): the date, `T`, the time to the second with an
# optional fraction, then the UTC offset, `Z` or `+hh:mm`/`-hh:mm`. ASCII digits only.
_DATE_TIME = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?([A-Za-z]|[+-][\d:.]*)?", re.ASCII)
_OFFSET = re.compile(r"([+-])([01]\d|2[0-3]):([0-5]\d)", re.ASCII)
FORMAT = "YYYY-MM-DDThh:mm:ss[.fraction] and 'Z' or '+hh:mm'"
_QUOTED = 40  # at most this much of a rejected value is quoted back
HOUR = timedelta(hours=1)


def parse_instant(text: str) -> datetime:
    """Parse the contract's date-time (`2026-11-21T08:00:00+01:00`, `...T07:00:00.5Z`) into UTC, at millisecond
    precision; ValueError saying what is wrong. Anything else ISO-8601 allows (a space for `T`, no seconds,
    basic format, week dates, an offset with seconds) is refused: the contract names one format."""
    quoted = _quote(text)
    found = _DATE_TIME.fullmatch(text)
    if found is None:
        raise ValueError(f"{quoted} {_what_is_wrong(text)}")
    *fields, fraction, offset = found.groups()
    if offset is None:
        raise ValueError(f"{quoted} has no UTC offset; add 'Z' or '+hh:mm'")
    zone = _zone(offset)
    if zone is None:
        raise ValueError(f"{quoted} has a UTC offset that is not 'Z' or '+hh:mm' (hh 00-23, mm 00-59)")
    year, month, day, hour, minute, second = (int(f) for f in fields)
    try:
        moment = datetime(year, month, day, hour, minute, second, int((fraction or "").ljust(6, "0")[:6]), zone)
    except ValueError as error:
        raise ValueError(f"{quoted} is not a date-time: {error}") from None
    try:
        return to_stored(moment)
    except OverflowError:  # 0001-01-01T00:00+01:00 and 9999-12-31T23:59-01:00 have no UTC instant
        raise ValueError(f"{quoted} is outside the range of representable times (years 1-9999 in UTC)") from None


def _what_is_wrong(text: str) -> str:
    """Why a value that is not in the contract's format was refused: what ISO-8601 makes of it says most."""
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return f"is not an ISO-8601 date-time; the API takes {FORMAT}"
    if parsed.tzinfo is None:
        return "has no UTC offset; add 'Z' or '+hh:mm'"
    return f"is not in the API's date-time format: {FORMAT}"


def _zone(offset: str) -> timezone | None:
    if offset == "Z":
        return UTC
    found = _OFFSET.fullmatch(offset)
    if found is None:
        return None
    sign, hours, minutes = found.groups()
    return timezone((-1 if sign == "-" else 1) * timedelta(hours=int(hours), minutes=int(minutes)))


def _quote(text: str) -> str:
    """The value as an error message quotes it: its start only, so a huge one does not fill the answer."""
    return f"'{text}'" if len(text) <= _QUOTED else f"'{text[:_QUOTED]}...'"


def to_stored(moment: datetime) -> datetime:
    """UTC, truncated to milliseconds: what BSON keeps, so values compare equal after a round trip."""
    moment = moment.astimezone(UTC)
    return moment.replace(microsecond=moment.microsecond // 1000 * 1000)


def hour_of(moment: datetime) -> datetime:
    """The start of the UTC hour holding `moment`."""
    return moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def day_of(moment: datetime) -> datetime:
    """The start of the UTC day holding `moment`."""
    return hour_of(moment).replace(hour=0)


def format_instant(moment: datetime) -> str:
    """'2026-11-21T08:00:00.000Z': always four digits of year (strftime's %Y gives '999' for 999), so the
    strings of instants sort as the instants do."""
    utc = to_stored(moment)
    return f"{utc.year:04d}-{utc:%m-%dT%H:%M:%S}.{utc.microsecond // 1000:03d}Z"


_clock: Callable[[], datetime] | None = None
# The real clock, which set_clock(None) restores; tests/conftest.py can place it at a chosen instant.
_wall_clock: Callable[[], datetime] = partial(datetime.now, UTC)


def utc_now() -> datetime:
    """The server clock. Triggers read it once per invocation and pass it down to domain code."""
    return to_stored(_clock() if _clock is not None else _wall_clock())


def set_clock(clock: Callable[[], datetime] | None) -> None:
    """Replace the server clock (the simulator plays days in minutes); None restores the real one."""
    global _clock  # noqa: PLW0603 - one clock per process is the point
    _clock = clock


@contextmanager
def clock_restored() -> Iterator[None]:
    """Whatever clocks the code within sets (set_clock), the one that ran before it runs again afterwards: its
    caller's own (a test's, the simulator's) or the real one. Why: set_clock(None) at the end would put a caller
    that plays its own clock on the real one, so what it measured next would depend on when it ran."""
    before = _clock
    try:
        yield
    finally:
        set_clock(before)
