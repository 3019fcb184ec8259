"""A feed partition's worker (the queue trigger `aggregate_report_partition`): it claims the partition's lease, hands
it to the feed's consumer (shared/feeds/consumers.py), which works within the run's time budget and checkpoints
under the lease after each page, then releases the lease. The claim, the checkpoints and the release are fenced by
the lease's owner and version (shared/feeds/leases.py)."""

import logging
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from pymongo.database import Database
from pymongo.errors import PyMongoError

from shared.feeds.consumers import Consumer, PartitionRun
from shared.feeds.leases import Lease, checkpoint, claim, new_owner, release
from shared.feeds.partitions import NoPartitionTokens, Partition
from shared.feeds.sources import PartitionLayoutChanged
from shared.settings import Settings
from shared.store.retries import RetryPolicy, StoreUnavailable
from shared.telemetry import metrics
from shared.telemetry.observability import fields

log = logging.getLogger(__name__)


def process_partition(
    db: Database[Any],
    partition: Partition,
    *,
    consumer: Consumer,
    now: datetime,
    settings: Settings,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> PartitionRun:
    """One run of `aggregate_report_partition`: claim the partition's lease, let `consumer` work from its position
    until done or out of budget (checked between pages), then release the lease.

    A database error, an error of the consumer's own (`Consumer.failures`), or a GetChangeStreamTokens reply
    without tokens, propagates (the invocation fails and its message is retried) after the lease is released, so
    the retry can claim it at once; what was checkpointed stays."""
    worker = _Worker(db, partition, settings, now=now, clock=clock, sleep=sleep)
    lease = claim(db, partition, worker.owner, now=now, lease_for=worker.lease_for, policy=worker.policy)
    if lease is None:
        return worker.run
    worker.run.claimed = True
    held = lease  # as stored by the claim: its owner is this run's
    failures: tuple[type[Exception], ...] = (PyMongoError, StoreUnavailable, NoPartitionTokens, *consumer.failures)
    try:
        held = consumer.run(worker, held)
    except PartitionLayoutChanged as change:
        log.info(
            "reports: %s belongs to an old partition layout (%s); leaving it",
            partition.lease_id,
            change,
            extra=fields(feed=partition.feed.key, partition=partition.lease_id),
        )
        worker.run.layout_changed = True
    except failures:
        worker.release_quietly(held)
        raise
    if not worker.run.lost_lease:
        release(db, partition, held, now=worker.wall_clock(), policy=worker.release_policy())
    worker.run.checkpoint_time = held.checkpoint_time
    if held.checkpoint_time is not None and not partition.feed.hourly:
        lag = worker.wall_clock() - held.checkpoint_time  # both aware: the client is tz_aware (shared/store/client.py)
        metrics.partition_lag(partition.feed.key, partition.lease_id, lag.total_seconds())
    return worker.run


class _Worker:
    """One worker invocation on one partition (a consumer's `Work`): its budget, its lease timing and what it did."""

    def __init__(
        self,
        db: Database[Any],
        partition: Partition,
        settings: Settings,
        *,
        now: datetime,
        clock: Callable[[], float],
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.db, self.partition, self.settings = db, partition, settings
        self.policy = RetryPolicy.for_run(settings, settings.reports_time_budget_seconds)
        self.lease_for = timedelta(seconds=settings.reports_lease_seconds)
        self.owner = new_owner()
        self.run = PartitionRun(partition.lease_id)
        self.now, self.clock, self.sleep, self._started = now, clock, sleep, clock()
        self.deadline = self._started + settings.reports_time_budget_seconds  # on `clock`

    def fields(self, **values: object) -> dict[str, object]:
        """The log fields of this run's lines: its feed and partition (lease id), and `values`."""
        return fields(feed=self.partition.feed.key, partition=self.partition.lease_id, **values)

    def wall_clock(self) -> datetime:
        """The server clock as the run goes on (the trigger read `now` once, at the start)."""
        return self.now + timedelta(seconds=self.clock() - self._started)

    def out_of_time(self) -> bool:
        return self.clock() >= self.deadline

    def time_left(self) -> float:
        return self.deadline - self.clock()

    def pause(self, seconds: float) -> bool:
        """Wait `seconds` for the next page of a paced pass if the budget leaves time for it; False: it does not."""
        if self.clock() + seconds >= self.deadline:
            return False
        self.sleep(seconds)
        return True

    def save(self, held: Lease, source: str) -> bool:
        """Checkpoint the position and renew the lease; False (logged, and the run marked) if the lease was lost."""
        saved = checkpoint(
            self.db,
            self.partition,
            held,
            source=source,
            now=self.wall_clock(),
            lease_for=self.lease_for,
            policy=self.policy,
        )
        if not saved:
            log.warning(
                "reports: lost the lease of %s to another worker; stopping unsaved",
                self.partition.lease_id,
                extra=self.fields(),
            )
            self.run.lost_lease = True
        return saved

    def release_policy(self) -> RetryPolicy:
        """A release has a request's deadline of its own: the run's may be what just ran out."""
        return RetryPolicy.for_request(self.settings)

    def release_quietly(self, held: Lease) -> None:
        try:
            release(self.db, self.partition, held, now=self.wall_clock(), policy=self.release_policy())
        except (PyMongoError, StoreUnavailable) as error:  # the lease then expires on its own
            log.warning(
                "reports: could not release %s: %s",
                self.partition.lease_id,
                type(error).__name__,
                extra=self.fields(error=type(error).__name__),
            )
