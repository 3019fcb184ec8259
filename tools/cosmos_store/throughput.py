"""Whether an operation may run now, by its partitions' throughput: past it, Cosmos DB answers 16500 at once
(`TooManyRequests`, the wait in `RetryAfterMs=`), or with server-side retry on, the operation waits in the server
until its partitions have budget, failing with code 50 after `server_retry_seconds`.

    https://learn.microsoft.com/azure/cosmos-db/mongodb/prevent-rate-limiting-errors
    "SSR retries requests across all collections in your account with short delays. If a 60-second timeout is
    reached, a client receives an ExceededTimeLimit exception (50)."

The budgets themselves (per partition, per second of the proxy's clock) are partitions.py's."""

from typing import Any

from tools.cosmos_store import wire
from tools.cosmos_store.partitions import Partition
from tools.cosmos_store.state import StoreState

THROTTLED = 16500
EXCEEDED_TIME_LIMIT = 50
Document = dict[str, Any]


def admit(state: StoreState, reached: list[Partition]) -> Document | None:
    """None when the partitions an operation reaches have budget now (or got it while it waited in the server);
    else Cosmos DB's refusal of it."""
    wait_ms = state.partitions.throttled_for_ms(reached)
    if wait_ms is None:
        return None
    if not state.options.server_side_retry:
        return throttled(state, reached, wait_ms)
    return wait_in_server(state, reached, wait_ms)


def throttled(state: StoreState, reached: list[Partition], wait_ms: int) -> Document:
    """Cosmos DB's answer past a partition's throughput: 16500, with the wait in `RetryAfterMs=`."""
    state.partitions.refuse(reached)
    with state.lock:
        state.metered.throttled += 1
    return wire.error_document(
        THROTTLED,
        f"Error={THROTTLED}, RetryAfterMs={wait_ms}, Details='Response status code does not indicate success: "
        "TooManyRequests (429); Substatus: 3200; Reason: (Request rate is large. More Request Units may be "
        "needed, so no changes were made. Please retry this request later.)'",
        "TooManyRequests",
    )


def wait_in_server(state: StoreState, reached: list[Partition], wait_ms: int) -> Document | None:
    """Server-side retry: wait (`sleep`, on the proxy's clock) until the partitions have budget (None), or fail
    with code 50 once `server_retry_seconds` have passed."""
    options = state.options
    started, slept = options.clock(), 0.0
    waiting: int | None = wait_ms
    while waiting is not None:
        state.partitions.refuse(reached)
        elapsed = max(options.clock() - started, slept)
        if elapsed >= options.server_retry_seconds:
            with state.lock:
                state.metered.timed_out += 1
            return wire.error_document(
                EXCEEDED_TIME_LIMIT,
                f"Request timed out. Retries due to rate limiting: True. (server-side retry gave up after "
                f"{options.server_retry_seconds:g} s)",
                "ExceededTimeLimit",
            )
        pause = min(waiting / 1000, options.server_retry_seconds - elapsed)
        options.sleep(pause)
        slept += pause
        waiting = state.partitions.throttled_for_ms(reached)
    with state.lock:
        state.metered.retried_in_server += 1
    return None
