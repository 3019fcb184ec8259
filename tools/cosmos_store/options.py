"""The proxy's knobs, one dataclass: the scaled-down Cosmos DB limits it enforces (storage and throughput per
partition, a logical partition's cap, document sizes), the account capabilities it can play (server-side retry,
16 MB documents, autoscale), and its clock. Kept apart so that every part of the proxy reads one definition."""

import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class Options:
    """The knobs: `partition_bytes` stands for 50 GB, `partition_ru_per_second` for 10,000 RU/s (both scaled
    down); `index_delay_seconds` is how long an index transformation takes; `clock` is the proxy's time (the
    throughput's seconds, documents' `_ts`, index readiness); `seed` orders the tokens of
    GetChangeStreamTokens (None: a different order each time), unless `shuffle_tokens` is off.
    `logical_partition_bytes` stands for a logical partition's 20 GB (None: no cap); `server_side_retry` is the
    account capability (16500 retried inside the server for up to `server_retry_seconds` of the proxy's clock,
    waiting with `sleep`, then code 50); `incomplete_during_index_drops`: a filter on a path whose index is
    being dropped misses what the removal has reached; `autoscale_max_ru_per_second` (scaled as
    `partition_ru_per_second`) gives every collection an autoscale maximum, raised by the storage floor;
    `large_documents` is the account capability EnableMongo16MBDocumentSupport (documents up to 16 MB, not 2 MB)."""

    partition_bytes: int = 1_000_000
    partition_ru_per_second: float = 10_000.0
    initial_partitions: int = 1
    auto_split: bool = True
    index_delay_seconds: float = 0.0
    max_connections: int = 64
    ttl_sweep_seconds: float = 0.0  # 0: expire only when asked (`expire()`)
    seed: int | None = None
    shuffle_tokens: bool = True  # False: partition order, to tell a test's other failures from token order's
    max_wire_version: int | None = None  # what hello reports (MongoDB's numbering: 4.2 is 8); None: the backend's
    clock: Callable[[], float] = time.monotonic
    logical_partition_bytes: int | None = None
    server_side_retry: bool = False
    server_retry_seconds: float = 60.0
    sleep: Callable[[float], None] = time.sleep  # waits `seconds` of the proxy's clock (server-side retry)
    incomplete_during_index_drops: bool = True
    autoscale_max_ru_per_second: float | None = None
    large_documents: bool = False
