"""A lifecycle run's result with nothing wrong (tools/lifecycle/result.py), for tests that plant one fault in it."""

from collections import Counter

from tools.lifecycle.result import LifecycleResult
from tools.simulate.result import ReportCheck, Score, Tally
from tools.simulate.scoring import KINDS

PERFECT = {kind: Score(2, 2, 2) for kind in KINDS}


def clean_result() -> LifecycleResult:
    check = ReportCheck(24, None, [])
    return LifecycleResult(
        days=1,
        bottles=4,
        users=2,
        workers=3,
        tally=Tally(),
        splits=[],
        partitions={},
        throttled=0,
        throttle_episodes=0,
        hourly_check=check,
        daily_check=check,
        scores=PERFECT,
        misses=[],
        extras=[],
        notifications_sent=Counter(),
        peak_late_doses=0,
        duplicates=[],
        kills=0,
        redeliveries=0,
        poisoned=0,
        re_reads=0,
        re_read_floor=0,
        request_units={},
        samples=[],
        changes=Counter(),
        throttle_windows=[],
    )
