"""The lifecycle run's splits: each growing collection's physical partitions split once their bytes pass a limit
set from the plan, so that every run splits them; those of `bottle_actions` inside a report worker's read of them
(docs/lifecycle.md, "Splits")."""

import threading
from datetime import datetime, timedelta
from typing import Any

from pymongo.database import Database

from shared.settings import get_settings
from shared.store import schema
from tools.cosmos_store.partitions import parse_bound
from tools.lifecycle.faults import SkewedClock
from tools.lifecycle.lag import lease_position
from tools.lifecycle.result import SplitDone

MID_PAGE_WAIT = timedelta(hours=3)  # longer than the reports' schedule: nearly every actions split lands mid-page
# Each collection's partition size limit (standing for 50 GB), as a share of what the plan will have written by its
# end (its documents times their average size so far), so that every run splits them: bottle_actions at least 3
# times (at least 4 partitions), the others at least once.
SPLIT_SHARES = {
    schema.BOTTLE_ACTIONS: 1 / 3.6,
    schema.BOTTLE_HEARTBEATS: 1 / 2.2,
    schema.USER_HOURLY_REPORTS: 1 / 2.5,
    schema.USER_DAILY_REPORTS: 1 / 2.2,
}


class Splitter:
    """Splits a partition once its bytes pass its collection's limit: at once for most collections; for the
    bottle actions, inside the next report worker's read of them (a split while the partition's worker is mid-
    page), or at the next step if no worker has read them for MID_PAGE_WAIT."""

    def __init__(self, proxy: Any, backend: Database[Any], planned: dict[str, int], clock: SkewedClock) -> None:
        self.proxy, self.backend, self.planned, self.clock = proxy, backend, planned, clock
        self.database = backend.name
        self.done: list[SplitDone] = []
        self.re_read_floor = 0  # documents written since each split parent's last checkpoint (and the overlap)
        self._due_since: dict[str, datetime] = {}
        self._lock = threading.Lock()

    def at_step(self) -> None:
        """After each step of the run: split what is over its limit, but `bottle_actions` only once it has waited
        MID_PAGE_WAIT for a report worker's read."""
        for name in self.planned:
            if name != schema.BOTTLE_ACTIONS:
                self._split_over_limit(name, mid_page=False)
            elif self._over(name):
                since = self._due_since.setdefault(name, self.clock.now)
                if self.clock.now - since > MID_PAGE_WAIT:
                    self._split_over_limit(name, mid_page=False)

    def in_read(self, name: str) -> None:
        """Before a report worker's read of collection `name`: split `bottle_actions` if it is over its limit."""
        if name == schema.BOTTLE_ACTIONS:
            self._split_over_limit(name, mid_page=True)

    def limit(self, name: str) -> float:
        """The collection's partition limit: its share of the bytes its planned documents will take."""
        partitions = self.proxy.partition_map(self.database, name)
        held = sum(sum(p.keys.values()) for p in partitions)
        average = sum(p.bytes for p in partitions) / held if held else 0
        return max(1_000.0, self.planned[name] * average * SPLIT_SHARES[name])

    def _over(self, name: str) -> bool:
        """Whether a partition of `name` holding more than one shard key is over the limit."""
        limit = self.limit(name)
        return any(p.bytes > limit and len(p.keys) > 1 for p in self.proxy.partition_map(self.database, name))

    def _split_over_limit(self, name: str, *, mid_page: bool) -> None:
        """Split every partition of `name` over the limit (one shard key never splits), recording each split and,
        for `bottle_actions`, what its children must read again."""
        with self._lock:
            limit = self.limit(name)
            for partition in self.proxy.partition_map(self.database, name):
                if partition.bytes > limit and len(partition.keys) > 1:  # one shard key never splits
                    if name == schema.BOTTLE_ACTIONS:
                        self.re_read_floor += written_since_checkpoint(self.backend, self.proxy, partition)
                    for split in self.proxy.split(self.database, name, partition.id):
                        children = (split.children[0].id, split.children[1].id)
                        self.done.append(SplitDone(self.clock.now, name, split.parent.id, children, mid_page))
            self._due_since.pop(name, None)


def written_since_checkpoint(backend: Database[Any], proxy: Any, partition: Any) -> int:
    """The actions in a partition's hash range written since the last checkpoint of the current leases that
    read that range, less the polling overlap: what its children must read again at least (the re-reads a split
    may cost, docs/reports.md#splits)."""
    collection = proxy.partitions.collection(backend.name, schema.BOTTLE_ACTIONS)
    positions = [
        lease_position(lease)
        for lease in backend[schema.LEASES].find({"feed": schema.BOTTLE_ACTIONS, "retired_at": None})
        if lease.get("range")
        and parse_bound(lease["range"][0]) < partition.high
        and partition.low < parse_bound(lease["range"][1])
    ]
    if not positions:
        return 0
    since = min(positions) - timedelta(seconds=get_settings().reports_poll_overlap_seconds)
    found = backend[schema.BOTTLE_ACTIONS].find({"received_at": {"$gt": since}}, {"bottle_id": 1})
    return sum(1 for action in found if partition.holds(collection.hash_of(action)))
