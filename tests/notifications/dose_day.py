"""The day the late-dose tests play, 4 May 2026 (Europe/Rome is UTC+2: the default schedule's 08:00 and 20:00 are
06:00 and 18:00 UTC), its slots, and hours as a timedelta; the late-dose and resolution tests share them."""

from datetime import UTC, datetime, timedelta

# In May, Europe/Rome is UTC+2: the default schedule's 08:00 and 20:00 are 06:00 and 18:00 UTC.
DAY = datetime(2026, 5, 4, tzinfo=UTC)

MORNING, EVENING = DAY + timedelta(hours=6), DAY + timedelta(hours=18)

NEXT_MORNING = MORNING + timedelta(days=1)


def h(hours: float) -> timedelta:
    return timedelta(hours=hours)
