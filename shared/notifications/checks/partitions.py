"""A check's partitions: CHECK_PARTITIONS ranges of the 1024 hash buckets of `bottle_id`, each swept by its own
queue-triggered run. A check's timer runs on one instance (timers never scale out), so it only dispatches one work
message per partition (`dispatch`), and the workers scale out over them (docs/checks.md, Partitioned sweeps)."""

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from shared.notifications.documents import KINDS, Kind
from shared.settings import Settings
from shared.store.partitioning import BucketRange


@dataclass(frozen=True)
class CheckPartition:
    """One check's sweep of one bucket range: what a work message names, e.g.
    `{"kind": "late_dose", "partition": 2, "of": 4}`."""

    kind: Kind
    buckets: BucketRange

    @property
    def name(self) -> str:
        return f"{self.kind}:{partition_label(self.buckets)}"

    def message(self) -> str:
        """The work message the dispatcher sends for this partition (JSON)."""
        body = {"kind": self.kind, "partition": self.buckets.index, "of": self.buckets.count}
        return json.dumps(body, separators=(",", ":"))

    @classmethod
    def from_message(cls, message: Mapping[str, Any]) -> "CheckPartition":
        """The partition a work message (decoded) names; ValueError for anything else (the invocation fails, so
        the host retries the message and then moves it to the poison queue)."""
        if set(message) != {"kind", "partition", "of"}:
            raise ValueError(f"not a check's work message: {message!r:.200}")
        kind, index, count = message["kind"], message["partition"], message["of"]
        if kind not in KINDS or type(index) is not int or type(count) is not int:
            raise ValueError(f"not a check's work message: {message!r:.200}")
        return cls(cast(Kind, kind), BucketRange(index, count))  # BucketRange refuses a partition out of range


def partition_label(buckets: BucketRange) -> str:
    """A bucket range as the log lines and metrics name it: `index/count`."""
    return f"{buckets.index}/{buckets.count}"


def partitions(kind: Kind, settings: Settings) -> list[CheckPartition]:
    """The partitions of a check: CHECK_PARTITIONS bucket ranges covering every bucket once."""
    return [CheckPartition(kind, BucketRange(i, settings.check_partitions)) for i in range(settings.check_partitions)]


def dispatch(kind: Kind, *, settings: Settings, send: Callable[[list[str]], None]) -> list[CheckPartition]:
    """One run of a check's timer: a work message per partition, all handed to `send` at once (the queue output
    binding, which the host writes after the function returns: a message lost there costs that partition one
    sweep, and the next timer run sends it again). The partitions dispatched."""
    dispatched = partitions(kind, settings)
    send([partition.message() for partition in dispatched])
    return dispatched
