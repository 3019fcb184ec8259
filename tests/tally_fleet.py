"""A fleet of bottles on one store, driven through the app's own provisioning, ingestion and heartbeat tally at
chosen server clocks (Fleet), and the instants and events its tests play: the heartbeat tally's tests (tests/reports/),
the archive's, the heartbeat document's and the tally on SecantusDB share it."""

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from shared.bottles.provisioning import provision
from shared.bottles.spec import BottleSpec
from shared.consumers.plugged import dispatch, partition_of, process_partition
from shared.feeds.sources import Change
from shared.ingestion.receive import receive
from shared.reports.aggregation import Stamper, refresh_hourly
from shared.reports.feeds import HEARTBEAT_TALLY
from shared.reports.tally import rolled_up_before
from shared.settings import Settings
from shared.store import schema
from shared.store.partitioning import bucket_of
from shared.store.retries import RetryPolicy
from tests.tally_runner import TallyPartition

POLICY = RetryPolicy(max_retries=0, base_ms=1)

# A fixed day, a week before CLOCK, where the app's clock runs in these tests (their modules' `own_clock` mark):
# within the hourly reports' retention (mongomock expires them by the app's clock), and every instant the tests play,
# up to four days on, is past. Fixed, since the tests play their instants themselves: the instant the suite runs at
# cannot matter to them, and the clock matrix leaves them out (docs/testing.md).
DAY = datetime(2027, 1, 4, tzinfo=UTC)
CLOCK = DAY + timedelta(days=7)

HOUR = timedelta(hours=1)


class Fleet:
    """Bottles provisioned and heartbeats received at chosen server times, and the tally's one partition."""

    def __init__(self, db: Any, settings: Settings) -> None:
        self.db, self.settings = db, settings
        self.keys: dict[str, str] = {}
        self.partition = TallyPartition(db, settings)

    def provision(self, bottle_id: str, user_id: str, now: datetime) -> None:
        spec = BottleSpec(user_id=user_id, medication="med", schedule={"every_hours": 12})
        key = provision(self.db, bottle_id, spec, rotate_key=False, now=now, settings=self.settings).device_key
        if key:
            self.keys[bottle_id] = key

    def send(self, bottle_id: str, *events: dict[str, Any], now: datetime) -> None:
        body = json.dumps({"events": list(events)}).encode()
        receive(self.db, bottle_id, self.keys[bottle_id], body, now=now, settings=self.settings)
        actions = self.db[schema.BOTTLE_ACTIONS].find({"bottle_id": bottle_id, "received_at": now})
        changes = [Change(schema.BOTTLE_ACTIONS, a["_id"], a) for a in actions]
        if changes:  # the actions' consumer, at once
            refresh_hourly(
                self.db, changes, stamp=Stamper(now).next(), policy=POLICY, rolled_up_before=rolled_up_before(now)
            )

    def beat(self, bottle_id: str, at: datetime, *, received: datetime | None = None) -> None:
        self.send(bottle_id, {"type": "heartbeat", "time": at.isoformat()}, now=received or at)

    def tally(self, now: datetime) -> bool:
        return self.partition.run(now)

    def hourly(self, user_id: str) -> dict[datetime, int]:
        found = self.db[schema.USER_HOURLY_REPORTS].find({"user_id": user_id})
        return {r["hour"].astimezone(UTC): r["heartbeats"] for r in found if r.get("heartbeats")}

    def daily(self, user_id: str, day: datetime) -> dict[str, Any] | None:
        found: dict[str, Any] | None = self.db[schema.USER_DAILY_REPORTS].find_one(
            {"user_id": user_id, "day": day}, {"_id": 0, "updated_at": 0}
        )
        return found


def user_in(low: int, high: int, prefix: str = "user") -> str:
    """A user id whose bucket is in [low, high)."""
    return next(f"{prefix}{i}" for i in range(100_000) if low <= bucket_of(f"{prefix}{i}") < high)


def opened(at: datetime) -> dict[str, Any]:
    return {"type": "opened", "time": at.isoformat(), "number_of_pills": 30, "mass_of_contents": 15.0}


def tally_passes(db: Any, settings: Settings, now: datetime, cut_short: Callable[[], bool] = lambda: False) -> None:
    """A dispatch at `now` and a run of each tally partition it sent (the actions' feed is run by the Fleet), some
    `cut_short` after a page."""
    sent: list[str] = []
    dispatch(db, now=now, settings=settings, send=sent.extend)
    for partition in (partition_of(json.loads(body)) for body in sent):
        if partition.feed == HEARTBEAT_TALLY:
            process_partition(db, partition, now=now, settings=settings, clock=ticking(30 if cut_short() else 1))


def ticking(seconds: int) -> Callable[[], float]:
    """A monotonic clock that moves `seconds` each time it is read."""
    ticks = iter(range(0, 10**9, seconds))
    return lambda: float(next(ticks))
