"""What plugs into the feed machinery: a `Consumer` of one feed, which runs a partition once its lease is claimed
(shared/feeds/worker.py), and what its run is given (`Work`) and reports (`PartitionRun`). The machinery claims,
checkpoints, releases and dispatches; what a partition's run does with its feed is the consumer's alone, so the
machinery knows no consumer and no consumer knows another (shared/consumers/plugged.py plugs them in)."""

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol, TypedDict

from pymongo.database import Database

from shared.feeds.leases import Lease
from shared.feeds.partitions import Feed, Partition
from shared.settings import Settings
from shared.store.retries import RetryPolicy


@dataclass
class PartitionRun:
    """What one worker invocation did with its partition: for its log line and the tests."""

    lease_id: str
    claimed: bool = False  # False: a live worker holds the partition (a message delivered twice)
    pages: int = 0
    changes: int = 0
    hourly_written: int = 0
    daily_written: int = 0
    caught_up: bool = False
    empty_retries: int = 0  # empty pages after a full one (a throttled stream), asked again after a back-off
    recovered: bool = False  # rebuilt from a checkpoint time
    lost_lease: bool = False  # taken over after it expired: stopped without saving a position
    layout_changed: bool = False  # Cosmos DB split the partition: the new layout's leases carry on
    gave_way: bool = False  # the archive's sweep gave way to another writer of its chunk's files (logged)
    checkpoint_time: datetime | None = None


class Work(Protocol):
    """A claimed partition as its consumer's run sees it: the store, the budget and the lease's bookkeeping."""

    db: Database[Any]
    partition: Partition
    settings: Settings
    policy: RetryPolicy  # the run's: retries end with its time budget
    now: datetime  # when the invocation began
    run: PartitionRun

    def wall_clock(self) -> datetime:
        """The server clock as the run goes on."""

    def out_of_time(self) -> bool:
        """Whether the run's time budget is spent (checked between pages)."""

    def time_left(self) -> float:
        """The seconds left of the run's time budget (0 or less: spent)."""

    def sleep(self, seconds: float) -> None:
        """Wait (the worker's clock: tests give a fake one)."""

    def pause(self, seconds: float) -> bool:
        """Wait `seconds` if the budget leaves time for it (True); False: it does not, and the run should end."""

    def save(self, held: Lease, source: str) -> bool:
        """Checkpoint the position and renew the lease; False if the lease was lost (the run must stop)."""

    def fields(self, **values: object) -> dict[str, object]:
        """The log fields of this run's lines: its feed and partition, and `values`."""


class Budget(TypedDict):
    """What a run of hourly passes (the tally's, the archive's) takes of its `Work`, as keyword arguments: its
    settings and retry policy, its clock, its budget, how it saves its position and how it waits for a paced page."""

    settings: Settings
    policy: RetryPolicy
    wall_clock: Callable[[], datetime]
    out_of_time: Callable[[], bool]
    save: Callable[[Lease], bool]
    pause: Callable[[float], bool]


def budget_of(work: Work, source: str) -> Budget:
    """`work`'s Budget, its saves marked as `source`'s (the lease's `source`, for operators)."""
    return {
        "settings": work.settings,
        "policy": work.policy,
        "wall_clock": work.wall_clock,
        "out_of_time": work.out_of_time,
        "save": lambda lease: work.save(lease, source),
        "pause": work.pause,
    }


@dataclass(frozen=True)
class Trail:
    """Where a TRAILING feed stands against the feed it trails: the partitions whose run is due, and how far behind
    its furthest-behind partition is."""

    due: list[Partition] = field(default_factory=list)
    lag: timedelta = timedelta(0)


class Consumer(ABC):
    """The consumer of one feed: what a run of one of its partitions does, under a claimed lease."""

    feed: Feed
    # Errors of the consumer's own that fail a run (its message is retried) after the lease is released, as the
    # store's do (a target store down: shared/archive/storage.py ArchiveUnavailable).
    failures: tuple[type[Exception], ...] = ()

    @property
    def active(self) -> bool:
        """Whether the dispatcher keeps the feed (a consumer whose target is not configured is left out; a message
        already queued for it still reaches its `run`, which then does nothing)."""
        return True

    @abstractmethod
    def run(self, work: Work, held: Lease) -> Lease:
        """Do the partition's work from `held` until done, out of time (`work.out_of_time`) or the lease is lost
        (`work.save` is False); the position reached. What it did goes into `work.run`."""

    def trail(self, db: Database[Any], partitions: Sequence[Partition], *, now: datetime, policy: RetryPolicy) -> Trail:
        """A TRAILING feed's due partitions and lag (shared/feeds/partitions.py Shape); other shapes have none."""
        raise NotImplementedError(f"{self.feed.key} is a {self.feed.shape.value} feed: it trails no other")
