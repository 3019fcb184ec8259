"""The notifications the app stored, scored against the trouble the plan injected: per kind, how many were
expected, notified and matched, and the episodes missed or unexpected."""

from datetime import UTC, datetime
from typing import Any

from tools.fleet import Expected
from tools.simulate.result import Score

KINDS = ("late_dose", "left_open", "silent")


def score(
    expected: set[Expected], notifications: list[dict[str, Any]]
) -> tuple[dict[str, Score], list[Expected], list[Expected]]:
    """Per kind of KINDS, its Score; then the expected episodes not notified and the notified ones not expected."""
    actual = {
        Expected(n["bottle_id"], n["kind"], _utc(n["episode_start"])) for n in notifications if n.get("kind") in KINDS
    }
    scores = {}
    for kind in KINDS:
        want = {e for e in expected if e.kind == kind}
        got = {a for a in actual if a.kind == kind}
        scores[kind] = Score(expected=len(want), notified=len(got), matched=len(want & got))
    return scores, sorted(expected - actual, key=str), sorted(actual - expected, key=str)


def _utc(moment: datetime) -> datetime:
    """`moment` in UTC (a naive one read as UTC, as the store returns them without tz_aware)."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
