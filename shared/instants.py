"""Points in time as the API and the store see them: aware UTC datetimes at millisecond precision."""

from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial


def parse_instant(text: str) -> datetime:
    """Parse ISO-8601 with a UTC offset ('Z' or +hh:mm) into UTC; ValueError says what is wrong."""
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"'{text}' is not an ISO-8601 date-time") from None
    if parsed.tzinfo is None or parsed.utcoffset() is None:
        raise ValueError(f"'{text}' has no UTC offset; add 'Z' or '+hh:mm'")
    try:
        return to_stored(parsed)
    except OverflowError:  # 0001-01-01T00:00+01:00 and 9999-12-31T23:59-01:00 have no UTC instant
        raise ValueError(f"'{text}' is outside the range of representable times (years 1-9999 in UTC)") from None


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
