"""A check run's sending: the partition's pending notifications of its kind, sent through `delivery.send_pending`
once at the run's end, or also between paced batches, within the run's cap (QUEUE_MESSAGES_PER_PARTITION) and
its send deadline; then how many stay pending, for the metric. Nothing is sent once a send failed or the deadline
passed: the rest is the partition's next run's."""

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pymongo.database import Database
from pymongo.errors import PyMongoError

from shared.notifications import delivery
from shared.notifications.checks.partitions import partition_label
from shared.notifications.documents import Kind
from shared.settings import Settings
from shared.store import schema
from shared.store.partitioning import BucketRange
from shared.store.retries import RetryPolicy, StoreUnavailable, with_retries
from shared.telemetry.observability import fields

log = logging.getLogger(__name__)


@dataclass
class RunSending:
    """A run's sending, once at its end or also between paced batches: what it queued, and how the last send
    ended (`found` of at most `limit` pending; `limit` 0: the cap was used up, so more may be pending)."""

    db: Database[Any]
    kind: Kind
    partition: BucketRange
    now: datetime
    send_one: delivery.Send
    cap: int
    queued: int = 0
    found: int = 0
    limit: int = 0
    failed: bool = False
    out_of_time: bool = False

    def send(self, sending: delivery.Sending) -> None:
        """Send the partition's pending notifications, up to what is left of the run's cap; nothing more once a
        send failed or the deadline passed (the rest stays pending for the partition's next run)."""
        left = self.cap - self.queued
        if self.failed or self.out_of_time or left <= 0:
            self.found = self.limit = 0
            return
        sent = delivery.send_pending(
            self.db,
            self.kind,
            partition=self.partition,
            now=self.now,
            limit=left,
            send=self.send_one,
            sending=sending,
        )
        self.queued += sent.queued
        self.found, self.limit = sent.found, left
        self.failed, self.out_of_time = sent.failed, sent.out_of_time

    @property
    def all_sent(self) -> bool:
        """No send failed and the deadline never stopped the sending."""
        return not (self.failed or self.out_of_time)


def sending_until(settings: Settings, deadline: float, clock: Callable[[], float]) -> delivery.Sending:
    """Sending stops at the run's budget, but has at least one request deadline's time even when the sweep used
    the budget up (notifications are what the run is for; at QUEUE_SEND_CONCURRENCY sends at once that time
    covers a partition's cap, benchmarks/checks/runs.py measures it); each store request gets a deadline of its own."""
    return delivery.Sending(
        send_until=max(deadline, clock() + settings.request_deadline_seconds),
        concurrency=settings.queue_send_concurrency,
        request_policy=lambda: RetryPolicy.for_request(settings, clock),
        clock=clock,
    )


def still_pending(sending: RunSending, policy: RetryPolicy) -> int | None:
    """The partition's notifications of the run's kind left pending after its sending: none when every send
    succeeded below its cap (it sent all it found), else counted with one query over the delivery_pending index.
    None if that fails, an outage or a fault alike (a fault is logged with its trace): the run's sends and marks
    are done and stay done, and failing the run for a figure would only run it again."""
    if sending.all_sent and sending.found < sending.limit:
        return 0
    kind, label = sending.kind, partition_label(sending.partition)
    try:
        return with_retries(
            lambda: sending.db[schema.NOTIFICATIONS].count_documents(
                delivery.pending_selector(kind, sending.partition)
            ),
            policy,
        )
    except StoreUnavailable as error:
        log.warning(
            "%s %s: pending notifications not counted: %s",
            kind,
            label,
            error,
            extra=fields(check=kind, partition=label),
        )
        return None
    except PyMongoError:
        log.exception(
            "%s %s: pending notifications not counted: a database fault",
            kind,
            label,
            extra=fields(check=kind, partition=label),
        )
        return None
