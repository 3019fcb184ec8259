"""What every queue- and timer-triggered function does around its work: read its work message (`work_message`),
log its one `invocation` line (`Invocation`): its counts, how it was triggered (a timer's `past_due`, a
message's `dequeue_count`) and how long it took; and log and count a failure (`Invocation.guard`), the last
attempt of a message as a poison message. So the triggers stay thin, and log alike."""

import json
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import azure.functions as func

from shared.telemetry import metrics
from shared.telemetry.observability import fields, host_trace, log_invocation, trace_parent_of

# host.json extensions.queues.maxDequeueCount: a message whose attempt of this number fails goes to the poison
# queue (tests/functions/test_telemetry_volume.py holds the two equal).
MAX_DEQUEUE_COUNT = 5


def work_message(message: func.QueueMessage) -> dict[str, Any]:
    """A work message's body: a JSON object; ValueError otherwise (the invocation fails, so the host retries the
    message and then moves it to the poison queue)."""
    body = message.get_body()
    try:
        decoded = json.loads(body)
    except ValueError as error:
        raise ValueError(f"a work message is JSON, not {body!r:.200}") from error
    if not isinstance(decoded, dict):
        raise ValueError(f"a work message is a JSON object, not {decoded!r:.200}")
    return decoded


@dataclass(frozen=True)
class Invocation:
    """One invocation of a queue- or timer-triggered function, timed from when this was made."""

    function: str
    trigger: dict[str, Any]  # how it was triggered, logged after its counts
    trace_parent: str | None = None  # the host's trace (shared.telemetry.observability.host_trace)
    started: float = field(default_factory=time.perf_counter)

    @classmethod
    def of_timer(cls, function: str, timer: func.TimerRequest, context: func.Context | None = None) -> "Invocation":
        """A timer's run; a past-due one (the host was down or busy) is an ordinary run, logged as past due.
        `context`: the invocation's, whose trace its lines join."""
        return cls(function, {"past_due": timer.past_due}, trace_parent_of(context))

    @classmethod
    def of_message(cls, function: str, message: func.QueueMessage, context: func.Context | None = None) -> "Invocation":
        """A queue message's run; a dequeue count above 1 is a retried message."""
        return cls(function, {"dequeue_count": message.dequeue_count}, trace_parent_of(context))

    @contextmanager
    def guard(self, logger: logging.Logger) -> Iterator[None]:
        """Run the invocation's work: an exception propagates (the host records the failure, and retries a
        message) after it is logged at ERROR with its fields (never sampled away) and, for a queue message,
        counted (`pillbottle.queue.failures`; on its last attempt `pillbottle.queue.poison_messages` too, and
        `poison` in the line): the host's own record of it is in a sampled trace only."""
        try:
            with host_trace(self.trace_parent):
                yield
        except Exception as error:
            dequeue_count = self.trigger.get("dequeue_count")
            poison = dequeue_count is not None and dequeue_count >= MAX_DEQUEUE_COUNT
            with host_trace(self.trace_parent):
                self._log_failure(logger, error, poison)
            if dequeue_count is not None:
                metrics.queue_failure(self.function, last_attempt=poison)
            raise

    def _log_failure(self, logger: logging.Logger, error: Exception, poison: bool) -> None:
        logger.error(
            "invocation %s failed: %s%s",
            self.function,
            type(error).__name__,
            " (its last attempt: the message goes to the poison queue)" if poison else "",
            extra=fields(function=self.function, error=type(error).__name__, poison=poison, **self.trigger),
        )

    def log(self, logger: logging.Logger, **counts: Any) -> None:
        """Log `invocation <function> {counts, then how it was triggered, then duration_ms}`, in the host's
        trace."""
        duration_ms = round((time.perf_counter() - self.started) * 1000)
        with host_trace(self.trace_parent):
            log_invocation(logger, self.function, **counts, **self.trigger, duration_ms=duration_ms)
