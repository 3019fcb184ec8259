"""The NCRONTAB schedules the local host and the simulator run timers on."""

import itertools
from datetime import datetime, timedelta

import pytest

from tools.ncrontab import Schedule


@pytest.mark.parametrize(
    ("expression", "after", "expected"),
    [
        ("0 */1 * * * *", datetime(2026, 1, 1, 10, 3, 7), datetime(2026, 1, 1, 10, 4, 0)),
        ("0 */5 * * * *", datetime(2026, 1, 1, 10, 3, 7), datetime(2026, 1, 1, 10, 5, 0)),
        ("0 */5 * * * *", datetime(2026, 1, 1, 10, 5, 0), datetime(2026, 1, 1, 10, 10, 0)),
        ("*/30 * * * * *", datetime(2026, 1, 1, 10, 0, 10), datetime(2026, 1, 1, 10, 0, 30)),
        ("0 30 9 * * 1-5", datetime(2026, 1, 2, 10, 0, 0), datetime(2026, 1, 5, 9, 30, 0)),  # Fri -> Mon
        ("0 0 0 1 1 *", datetime(2026, 6, 1), datetime(2027, 1, 1)),
        ("15,45 0 12 * * *", datetime(2026, 1, 1, 12, 0, 20), datetime(2026, 1, 1, 12, 0, 45)),
    ],
)
def test_next_firing(expression, after, expected):
    assert Schedule.parse(expression).next_after(after) == expected


@pytest.mark.parametrize("expression", ["* * * * *", "61 * * * * *", "0 */0 * * * *", "0 0 25 * * *"])
def test_invalid_expressions_are_rejected(expression):
    with pytest.raises(ValueError, match="NCRONTAB"):
        Schedule.parse(expression)


# --- what Azure Functions takes, and what never fires -------------------------------------------------------
# Microsoft Learn, "Timer trigger for Azure Functions", NCRONTAB expressions
# (https://learn.microsoft.com/azure/azure-functions/functions-bindings-timer#ncrontab-expressions): months and
# days of the week may be given as names or abbreviations, in English and in any case; 0 is Sunday.


@pytest.mark.parametrize(
    ("expression", "after", "expected"),
    [
        ("0 30 9 * Jan Mon", datetime(2026, 2, 1), datetime(2027, 1, 4, 9, 30)),  # the first Monday of next January
        ("0 30 9 * * monday-FRIDAY", datetime(2026, 1, 3), datetime(2026, 1, 5, 9, 30)),  # Sat -> Mon
        ("0 0 12 * * Sun", datetime(2026, 1, 1), datetime(2026, 1, 4, 12, 0)),
        ("0 0 0 29 Feb *", datetime(2026, 3, 1), datetime(2028, 2, 29)),  # the next leap day, two years on
        ("0 0 0 29 2 1", datetime(2026, 3, 1), datetime(2044, 2, 29)),  # a leap day on a Monday
        ("0 0 0 13 * 5", datetime(2026, 1, 1), datetime(2026, 2, 13)),  # a Friday the 13th: day AND day of week
    ],
)
def test_names_and_rare_dates_fire_when_the_host_would(expression, after, expected):
    assert Schedule.parse(expression).next_after(after) == expected


@pytest.mark.parametrize(
    "expression",
    [
        "0 0 0 31 2 *",  # February has no 31st
        "0 0 0 30 2 *",
        "0 0 0 31 4,6,9,11 *",
        "0 0 0 31 Feb,Apr *",
    ],
)
def test_a_schedule_that_never_fires_is_refused(expression):
    with pytest.raises(ValueError, match="NCRONTAB schedule never fires"):
        Schedule.parse(expression)


@pytest.mark.parametrize(
    ("expression", "words"),
    [
        ("", "needs 6 fields"),
        ("   ", "needs 6 fields"),
        ("0 */5 * * *", "needs 6 fields"),
        ("0 +5 * * * *", "minute field '+5'"),
        ("0 1_0 * * * *", "minute field '1_0'"),
        ("0 5-1 * * * *", "a range runs from low to high"),
        ("0 0 0 * * 7", "day-of-week field '7': 7 is outside 0-6"),
        ("0 0 0 * Ju *", "month field 'Ju'"),  # a name needs three letters: NCrontab would take "Ju" for June
        ("0 0 0 * Foo *", "month field 'Foo'"),
        ("0 0 0 Mon * *", "day field 'Mon'"),  # names are for months and days of the week only
        ("0 */x * * * *", "the interval after '/' must be a number from 1"),
    ],
)
def test_a_malformed_expression_is_refused_naming_the_field(expression, words):
    with pytest.raises(ValueError, match="NCRONTAB") as refused:
        Schedule.parse(expression)
    assert words in str(refused.value)


@pytest.mark.parametrize(
    ("expression", "shortest"),
    [
        ("0 */5 * * * *", timedelta(minutes=5)),
        ("*/30 * * * * *", timedelta(seconds=30)),
        ("0 0,57 0,23 * * *", timedelta(minutes=3)),  # 23:57 to 00:00 the next day, not 57 minutes within one
        ("0 0,30 23 * * Fri", timedelta(minutes=30)),
        ("0 0 9 * * Mon-Fri", timedelta(days=1)),
        ("0 0 9 * * Mon", timedelta(days=7)),
        ("0 0 0 29 2 *", timedelta(days=4 * 365 + 1)),
        ("0 0 0 29 2 Mon", timedelta(days=4382)),  # 12 years apart at best: a Monday 29 February is rare
    ],
)
def test_the_shortest_interval_between_two_firings(expression, shortest):
    """What the settings hold CHECK_LATE_DOSES_SPREAD_MINUTES under: across midnight and rare dates too."""
    assert Schedule.parse(expression).shortest_interval() == shortest


@pytest.mark.parametrize("expression", ["0 0,57 0,23 * * *", "0 15 8,20 * * Sat,Sun", "0 0 12 1,2,31 * *"])
def test_the_shortest_interval_is_the_smallest_gap_between_firings_one_after_another(expression):
    schedule = Schedule.parse(expression)
    firings = [datetime(2026, 1, 1)]
    while len(firings) < 1500:
        firings.append(schedule.next_after(firings[-1]))
    gaps = [later - earlier for earlier, later in itertools.pairwise(firings[1:])]

    assert schedule.shortest_interval() == min(gaps)
