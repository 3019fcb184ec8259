"""The actions' report lag at a report dispatch, as the lifecycle run measures it from the leases, and the bound
the verdict holds it to (docs/lifecycle.md, "Reading the screen": report lag)."""

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pymongo.database import Database

from shared.reports.feeds import HEARTBEAT_TALLY
from shared.settings import get_settings
from shared.store import schema
from tools.cosmos_store.partitions import parse_bound


@dataclass
class LagBound:
    """The most the actions' reports may lag at a report dispatch (minutes): 0 when nothing disrupted it, else the
    time since the last dispatch nothing disrupted (or the run's start). A split of `bottle_actions` inside a
    worker's read, a report worker's failed run and throttling disrupt one (why: docs/lifecycle.md, report lag)."""

    clean_at: datetime  # the last dispatch nothing disrupted (the run's start before the first)
    mid_page_splits: int = 0  # of bottle_actions, seen by the dispatches so far
    reasons: set[str] = field(default_factory=set)  # what disrupted the dispatch under way, since the last one

    def disrupted(self, why: str) -> None:
        """Record that `why` disrupts the dispatch under way."""
        self.reasons.add(why)

    def at_dispatch(self, at: datetime) -> tuple[float, str]:
        """The bound (minutes) at the dispatch at `at`, and what disrupted it ("" when nothing did)."""
        why = ", ".join(sorted(self.reasons))
        self.reasons.clear()
        if not why:
            self.clean_at = at
            return 0.0, ""
        return (at - self.clean_at).total_seconds() / 60, why


def report_lag(backend: Database[Any], proxy: Any, now: datetime) -> float:
    """Now minus the oldest action that no live lease of the actions' feed holding its key has read (minutes;
    0 when there is none). A replaced parent stays live until its children have run, and its range is read
    once any lease holding a key has read past it."""
    leases = [
        lease
        for lease in backend[schema.LEASES].find({"feed": schema.BOTTLE_ACTIONS, "retired_at": None})
        if lease.get("range")
    ]
    if not leases:
        return 0.0
    collection = proxy.partitions.collection(get_settings().mongodb_database, schema.BOTTLE_ACTIONS)
    positions = [
        (parse_bound(lo), parse_bound(hi), lease_position(lease)) for lease in leases for lo, hi in [lease["range"]]
    ]
    oldest = min(p for _, _, p in positions)
    unread = [
        action["received_at"]
        for action in backend[schema.BOTTLE_ACTIONS].find({"received_at": {"$gt": oldest}})
        if action["received_at"] > max(_read_until(positions, collection.hash_of(action)), default=now)
    ]
    return max(0.0, (now - min(unread)).total_seconds() / 60) if unread else 0.0


def _read_until(positions: list[tuple[int, int, datetime]], key: int) -> list[datetime]:
    """The positions of the leases whose ranges hold `key`."""
    return [at for low, high, at in positions if low <= key < high]


def lease_position(lease: dict[str, Any]) -> datetime:
    """How far a lease has read its range: its last checkpoint, else its creation."""
    at: datetime = lease.get("checkpoint_time") or lease["created_at"]
    return at


def tally_behind(backend: Database[Any], counted_until: datetime) -> bool:
    """Whether a live lease of the heartbeat tally has not yet counted every hour before `counted_until` (its
    checkpoint time, the end of the hours it counted, is earlier): a paced pass still under way, or a run that
    ended before it was done."""
    leases = backend[schema.LEASES].find({"feed": HEARTBEAT_TALLY.name, "retired_at": None})
    return any((lease.get("checkpoint_time") or datetime.min.replace(tzinfo=UTC)) < counted_until for lease in leases)
