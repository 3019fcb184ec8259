"""The NCRONTAB schedules the local host and the simulator run timers on."""

from datetime import datetime

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
