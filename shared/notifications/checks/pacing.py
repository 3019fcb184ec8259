"""How a check run spreads its detect batches: the late-dose check's morning peak lands in one sweep, so with the
function's clock its batches are written (and their notifications sent) evenly over
CHECK_LATE_DOSES_SPREAD_MINUTES instead of in the sweep's first minute, which autoscale would bill for the hour
(shared/store/pacing.py's `Pace`; docs/checks.md, Paced late-dose sweeps)."""

import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pymongo.database import Database

from shared.notifications.checks.rules import CHECKS, Document, detect_sweep
from shared.notifications.documents import Kind
from shared.settings import Settings
from shared.store.pacing import Pace
from shared.store.retries import RetryPolicy, with_retries


def spread_of(kind: Kind, settings: Settings) -> timedelta:
    """How long a check's sweep spreads its batches over: CHECK_LATE_DOSES_SPREAD_MINUTES for the late-dose
    check, whose morning peak lands in one sweep; the others find a few bottles a sweep and run unpaced."""
    return timedelta(minutes=settings.check_late_doses_spread_minutes if kind == "late_dose" else 0)


def pace_of(
    db: Database[Any], kind: Kind, within: Document, *, now: datetime, settings: Settings, policy: RetryPolicy
) -> Pace | None:
    """The pace of a partition's detect sweep (shared/store/pacing.py: its batches spread evenly from `now` over the
    check's spread), counting on the batches its bottles in trouble fill now (one indexed count, only when the
    check has a spread); None: unpaced (no spread, or fewer batches than the spread has minutes)."""
    spread = spread_of(kind, settings)
    if not spread:
        return None
    check = CHECKS[kind]
    selector = {**within, **detect_sweep(check, now, settings).selector}
    found = with_retries(lambda: db[check.collection].count_documents(selector), policy)
    return Pace.over(now, spread, math.ceil(found / settings.check_batch_size))


@dataclass(frozen=True)
class Pacer:
    """How a paced run waits for its detect batches: its pace, when it began (`now`, and `started` on `clock`)."""

    pace: Pace
    now: datetime
    started: float
    clock: Callable[[], float]
    sleep: Callable[[float], None]

    def wait_for_batch(self, done: int, send_recorded: Callable[[], None]) -> float:
        """Wait until the detect batch after `done` ones is due, first sending what those recorded
        (`send_recorded`: so each notification goes out about when its batch was due, not at the end of the
        spread); the seconds waited. The first batch is due at once."""
        wall = self.now + timedelta(seconds=self.clock() - self.started)
        due_in = 0.0 if done == 0 else self.pace.wait(done, wall, wall)  # the batches so far just done
        if due_in <= 0:
            return 0.0
        before = self.clock()
        send_recorded()
        if (left := before + due_in - self.clock()) > 0:
            self.sleep(left)
        return self.clock() - before
