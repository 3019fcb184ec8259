"""A paced heartbeat tally on a fleet of USERS users, one heartbeat an hour each, run by a Worker on the tally's
own clock: the pacing and time-budget tests share it."""

import json
from datetime import datetime, timedelta
from typing import Any

from shared.bottles.provisioning import provision
from shared.bottles.spec import BottleSpec
from shared.consumers.plugged import dispatch, partition_of, process_partition
from shared.feeds.consumers import PartitionRun
from shared.ingestion.receive import receive
from shared.reports.feeds import HEARTBEAT_TALLY
from shared.settings import Settings
from shared.store import schema
from tests.tally_fleet import DAY

USERS = 40

BUDGET_S = 45.0

SPREAD = timedelta(minutes=10)


def settings(spread: timedelta = SPREAD) -> Settings:
    # A page a user, and a roll-up at every pass (DAILY_ROLLUP_HOURS=1): every page of a pass rolls days up.
    return Settings(
        reports_page_size=1,
        reports_partitions=1,
        change_source="polling",
        daily_rollup_hours=1,
        reports_time_budget_seconds=BUDGET_S,
        reports_tally_spread_minutes=int(spread / timedelta(minutes=1)),
    )


def fleet(db: Any, config: Settings, hours: int, users: list[str] | None = None) -> dict[str, str]:
    """USERS users (or `users`) of one bottle each, heard from every half hour for `hours` hours from DAY; the
    bottles' device keys."""
    spec = BottleSpec(user_id="u", medication="med", schedule={"every_hours": 12})
    keys = {}
    for n, user_id in enumerate(users or [f"user{n:02d}" for n in range(USERS)]):
        user = spec.model_copy(update={"user_id": user_id})
        key = provision(db, f"b{n:02d}", user, rotate_key=False, now=DAY, settings=config).device_key
        assert key is not None
        keys[f"b{n:02d}"] = key
    for hour in range(hours):
        beat(db, config, keys, hour)
    return keys


def beat(db: Any, config: Settings, keys: dict[str, str], hour: int) -> None:
    """A heartbeat of each bottle at minutes 1 and 31 of DAY's `hour`, each received on time."""
    for bottle_id, key in keys.items():
        for minute in (1, 31):
            at = DAY + timedelta(hours=hour, minutes=minute)
            body = json.dumps({"events": [{"type": "heartbeat", "time": at.isoformat()}]}).encode()
            receive(db, bottle_id, key, body, now=at, settings=config)


class Worker:
    """The tally partition's worker, one run a minute from `start`, on a clock its waits move on."""

    def __init__(self, db: Any, config: Settings) -> None:
        self.db, self.config = db, config
        self.elapsed = 0.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.elapsed

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.elapsed += seconds

    def run(self, now: datetime) -> PartitionRun:
        messages: list[str] = []
        dispatch(self.db, now=now, settings=self.config, send=messages.extend)
        tally = [p for p in (partition_of(json.loads(m)) for m in messages) if p.feed == HEARTBEAT_TALLY]
        if not tally:
            return PartitionRun("none", caught_up=True)
        self.elapsed = 0.0
        return process_partition(self.db, tally[0], now=now, settings=self.config, clock=self.clock, sleep=self.sleep)

    def pass_from(self, start: datetime, *, minutes: int = 60) -> list[PartitionRun]:
        """A run each minute from `start` until the pass is done (or `minutes` have gone)."""
        runs = []
        for minute in range(minutes):
            run = self.run(start + timedelta(minutes=minute))
            runs.append(run)
            if run.caught_up:
                break
        return runs


def hourly(db: Any) -> dict[tuple[str, datetime], int]:
    found = db[schema.USER_HOURLY_REPORTS].find({}, {"user_id": 1, "hour": 1, "heartbeats": 1})
    return {(r["user_id"], r["hour"]): r["heartbeats"] for r in found if r.get("heartbeats")}
