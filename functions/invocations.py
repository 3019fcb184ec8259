"""What every queue- and timer-triggered function does around its work: read its work message (`work_message`),
and log its one `invocation` line (`Invocation`): its counts, how it was triggered (a timer's `past_due`, a
message's `dequeue_count`) and how long it took. So the triggers stay thin, and log alike."""

import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import azure.functions as func

from shared.observability import log_invocation


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
    started: float = field(default_factory=time.perf_counter)

    @classmethod
    def of_timer(cls, function: str, timer: func.TimerRequest) -> "Invocation":
        """A timer's run; a past-due one (the host was down or busy) is an ordinary run, logged as past due."""
        return cls(function, {"past_due": timer.past_due})

    @classmethod
    def of_message(cls, function: str, message: func.QueueMessage) -> "Invocation":
        """A queue message's run; a dequeue count above 1 is a retried message."""
        return cls(function, {"dequeue_count": message.dequeue_count})

    def log(self, logger: logging.Logger, **counts: Any) -> None:
        """Log `invocation <function> {counts, then how it was triggered, then duration_ms}`."""
        duration_ms = round((time.perf_counter() - self.started) * 1000)
        log_invocation(logger, self.function, **counts, **self.trigger, duration_ms=duration_ms)
