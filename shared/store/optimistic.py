"""Optimistic writes: a write computed from documents as read, and guarded by them (its filter says "still as
read"), lands only if no other write came in between; when one did, the caller reads again and computes again.
`until_landed` is the one loop for all of them, so the number of rounds and the error that ends them are the same
everywhere: a 503 whose Retry-After is jittered like a throttled one (`RetryPolicy.contended_retry_after`), so
the devices or runs that met the contention do not all come back in the same second. Every store call inside a
round goes through `with_retries` itself (shared/store/retries.py); a round is not retried as a whole."""

import enum
from collections.abc import Callable
from typing import Literal

from shared.store.retries import RetryPolicy, StoreUnavailable

# Rounds before a write that keeps losing to concurrent writes gives up (a retry later is safe: every write is
# idempotent).
MAX_ROUNDS = 5


class Round(enum.Enum):
    AGAIN = "again"


AGAIN: Literal[Round.AGAIN] = Round.AGAIN
"""What a round answers when its guard failed: read again, compute again."""


def until_landed[T](attempt: Callable[[], T | Literal[Round.AGAIN]], what: str, policy: RetryPolicy) -> T:
    """Run `attempt` (read, compute, one guarded write) until it answers anything but AGAIN, at most MAX_ROUNDS
    times; StoreUnavailable (a 503 with a jittered Retry-After) if `what` kept changing all along."""
    for _round in range(MAX_ROUNDS):
        outcome = attempt()
        if outcome is not AGAIN:
            return outcome
    raise kept_changing(what, policy)


def kept_changing(what: str, policy: RetryPolicy) -> StoreUnavailable:
    """The error of an optimistic write that lost every round: a 503 a short wait cures."""
    return StoreUnavailable(f"{what} kept changing during the write; retry", policy.contended_retry_after())
