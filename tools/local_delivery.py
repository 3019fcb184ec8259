"""The Functions host's queue trigger, locally: every visible message of a triggered queue handed to its function
by worker threads side by side, with host.json's `extensions.queues` rules (batches, the processing lease renewed
at half time, a failed message visible again after the visibility timeout, the poison queue after
maxDequeueCount). `LocalHost.deliver` runs it; the queues are tools/local_queues.py's."""

import logging
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal

from tools.host import bindings
from tools.host.protocol import ParameterBinding, RpcFunctionMetadata, TypedData
from tools.local_queues import Clock, MessageNotFound, QueueOptions, QueueService, ReceivedMessage

log = logging.getLogger(__name__)

# How long the host keeps a message it is processing invisible (it renews this lease at half time while
# the function runs, and a function runs at most host.json's functionTimeout).
PROCESSING_LEASE = timedelta(minutes=10)


@dataclass
class QueueTrigger:
    """A queue-triggered function: the queue it is triggered on, its trigger's argument and its queue outputs."""

    name: str
    queue: str
    trigger_arg: str
    outputs: dict[str, str]  # argument name -> queue name
    function: RpcFunctionMetadata


# The host's invocation of a trigger's function with one received message (its binding and trigger metadata) at
# an instant; raises when the function fails.
InvokeTrigger = Callable[[QueueTrigger, ParameterBinding, dict[str, TypedData], datetime], object]

Outcome = Literal["delivered", "retry", "poisoned"]


@dataclass(frozen=True)
class Delivery:
    """One message handed to a queue-triggered function (or moved to the poison queue unseen).

    `delivered`: the function returned, its output messages were sent and the message deleted; `retry`:
    it raised and the message is visible again at `next_visible_time`; `poisoned`: it raised on the
    last allowed dequeue (or the message came back over the limit) and the message moved to `poison_queue`."""

    queue: str
    function: str
    message_id: str
    dequeue_count: int
    outcome: Outcome
    error: str | None = None  # what the function raised
    next_visible_time: datetime | None = None
    poison_queue: str | None = None

    @property
    def invoked(self) -> bool:
        return self.outcome != "poisoned" or self.error is not None


@dataclass(frozen=True)
class QueueTally:
    delivered: int = 0  # invocations that succeeded
    failed: int = 0  # invocations that raised (the last one before a poisoning included)
    poisoned: int = 0  # messages moved to the poison queue


@dataclass
class DeliveryReport:
    """What one `LocalHost.deliver` call did, in the order it happened."""

    deliveries: list[Delivery] = field(default_factory=list)

    @property
    def queues(self) -> dict[str, QueueTally]:
        """Per triggered queue: its deliveries, failures and poisonings."""
        counts: dict[str, Counter[str]] = {}
        for item in self.deliveries:
            count = counts.setdefault(item.queue, Counter())
            count["delivered"] += item.outcome == "delivered"
            count["failed"] += item.error is not None
            count["poisoned"] += item.outcome == "poisoned"
        return {queue: QueueTally(c["delivered"], c["failed"], c["poisoned"]) for queue, c in counts.items()}

    @property
    def delivered(self) -> int:
        return sum(1 for item in self.deliveries if item.outcome == "delivered")

    @property
    def failed(self) -> int:
        return sum(1 for item in self.deliveries if item.error is not None)

    @property
    def poisoned(self) -> int:
        return sum(1 for item in self.deliveries if item.outcome == "poisoned")


class QueueListener:
    """The host's listener on the queues of `triggers` (read when delivering: triggers added later count), in
    `service`, with `options`; `invoke` runs a trigger's function. It polls the triggers in turn, across calls."""

    def __init__(
        self,
        service: QueueService,
        options: QueueOptions,
        triggers: Mapping[str, QueueTrigger],
        invoke: InvokeTrigger,
    ) -> None:
        self.service, self.options, self.triggers, self.invoke = service, options, triggers, invoke
        self._turn = 0  # which trigger's queue is polled first next

    def deliver(
        self, *, clock: Clock, workers: int = 1, on_delivery: Callable[[Delivery], None] | None = None
    ) -> DeliveryReport:
        """Hand every visible message of a triggered queue to its function until none is visible and no worker
        holds one (see `LocalHost.deliver`): `workers` threads side by side (1: the calling thread), time from
        `clock`, `on_delivery` told of each delivery from the worker's thread. The host's own errors re-raise."""
        if workers < 1:
            raise ValueError("deliver needs at least one worker")
        run = _Run(clock, on_delivery)
        if workers == 1:
            self._work(run)
        else:
            threads = [
                threading.Thread(target=self._work, args=(run,), name=f"queue-worker-{i}") for i in range(workers)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        if run.errors:
            raise run.errors[0]
        return run.report

    def _work(self, run: "_Run") -> None:
        """One worker: take a batch, process it, again, until nothing is visible and nobody is busy."""
        try:
            while True:
                with run.idle:
                    while (taken := self._next_batch(run.clock())) is None:
                        if run.busy == 0:
                            run.idle.notify_all()
                            return
                        run.idle.wait(0.05)  # a busy worker may send more, or finish
                    run.busy += 1
                try:
                    trigger, batch = taken
                    for message in batch:
                        self._process(trigger, message, run)
                finally:
                    with run.idle:
                        run.busy -= 1
                        run.idle.notify_all()
        except Exception as error:  # not the function's (those are handled): the host's own, re-raised
            run.errors.append(error)

    def _next_batch(self, now: datetime) -> tuple[QueueTrigger, list[ReceivedMessage]] | None:
        """The next trigger (in turn) with visible messages, and up to batchSize of them, leased."""
        triggers = list(self.triggers.values())
        for step in range(len(triggers)):
            trigger = triggers[(self._turn + step) % len(triggers)]
            batch = self.service.receive(
                trigger.queue, self.options.batch_size, visibility_timeout=PROCESSING_LEASE, now=now
            )
            if batch:
                self._turn = (self._turn + step + 1) % len(triggers)
                return trigger, batch
        return None

    def _process(self, trigger: QueueTrigger, message: ReceivedMessage, run: "_Run") -> None:
        """One leased message: its lease renewed once half gone, poisoned unseen if it came back over the limit,
        else handed to the function and deleted once it returns."""
        now = run.clock()
        if now >= message.next_visible_time - PROCESSING_LEASE / 2:  # a long batch: renew, as the host does
            try:
                message = self.service.update_visibility(
                    message.queue, message.id, message.pop_receipt, PROCESSING_LEASE, now=now
                )
            except MessageNotFound:
                return  # the lease ran out and another worker has it now
        if message.dequeue_count > self.options.max_dequeue_count:  # came back without a verdict
            run.record(self._poison(trigger, message, None, now))
            return
        received, metadata = bindings.queue_message(
            trigger.trigger_arg,
            id=message.id,
            body=message.body,
            dequeue_count=message.dequeue_count,
            insertion_time=message.insertion_time,
            expiration_time=message.expiration_time,
            next_visible_time=message.next_visible_time,
            pop_receipt=message.pop_receipt,
        )
        try:
            self.invoke(trigger, received, metadata, now)
        except Exception as error:
            run.record(self._failed(trigger, message, error, now))
            return
        try:
            self.service.delete(message.queue, message.id, message.pop_receipt)
        except MessageNotFound:  # the lease ran out: it will be delivered again (at least once)
            log.warning("message %s of queue %s was done after its lease ran out", message.id, message.queue)
        run.record(Delivery(message.queue, trigger.name, message.id, message.dequeue_count, "delivered"))

    def _failed(self, trigger: QueueTrigger, message: ReceivedMessage, error: Exception, now: datetime) -> Delivery:
        """After the function raised on `message` (called while handling it): the poison queue on the last allowed
        dequeue, else the message visible again after the visibility timeout, as the host does."""
        log.exception(
            "function %s failed on message %s of queue %s (dequeue count %d)",
            trigger.name,
            message.id,
            message.queue,
            message.dequeue_count,
        )
        if message.dequeue_count >= self.options.max_dequeue_count:
            return self._poison(trigger, message, error, now)
        try:
            released = self.service.update_visibility(
                message.queue, message.id, message.pop_receipt, self.options.visibility_timeout, now=now
            )
        except MessageNotFound:
            released = None
        return Delivery(
            message.queue,
            trigger.name,
            message.id,
            message.dequeue_count,
            "retry",
            error=repr(error),
            next_visible_time=released.next_visible_time if released else None,
        )

    def _poison(
        self, trigger: QueueTrigger, message: ReceivedMessage, error: Exception | None, now: datetime
    ) -> Delivery:
        """Copy the message to `<queue>-poison` and delete it, as the host does."""
        poison = f"{message.queue}-poison"
        log.warning(
            "Message has reached MaxDequeueCount of %d. Moving message %s to queue '%s'.",
            self.options.max_dequeue_count,
            message.id,
            poison,
        )
        self.service.send(poison, message.body, now=now)
        try:
            self.service.delete(message.queue, message.id, message.pop_receipt)
        except MessageNotFound:
            log.warning("message %s of queue %s was poisoned after its lease ran out", message.id, message.queue)
        return Delivery(
            message.queue,
            trigger.name,
            message.id,
            message.dequeue_count,
            "poisoned",
            error=None if error is None else repr(error),
            poison_queue=poison,
        )


class _Run:
    """One deliver call's shared state: its clock, how many workers hold a batch, what happened."""

    def __init__(self, clock: Clock, on_delivery: Callable[[Delivery], None] | None) -> None:
        self.clock = clock
        self.on_delivery = on_delivery
        self.idle = threading.Condition()
        self.busy = 0
        self.report = DeliveryReport()
        self.errors: list[Exception] = []
        self._lock = threading.Lock()

    def record(self, delivery: Delivery) -> None:
        with self._lock:
            self.report.deliveries.append(delivery)
        if self.on_delivery is not None:
            self.on_delivery(delivery)
