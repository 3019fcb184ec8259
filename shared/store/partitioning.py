"""Hash buckets of a shard key: the fixed unit that partitioned jobs (the report feeds, the check sweeps)
divide the data by. A document carries the bucket of its shard key (written once, with the document), so a
partition is a bucket range that a query or a change stream's `$match` selects."""

import zlib
from dataclasses import dataclass
from typing import Any, Final

BUCKETS = 1024  # fixed forever: stored on documents; any partition count up to it divides it into ranges
BUCKET_FIELD: Final = "bucket"  # the field of a document that holds its shard key's bucket


def bucket_of(key: str) -> int:
    """The bucket of a shard-key value (CRC-32: stable across processes and versions, unlike hash())."""
    return zlib.crc32(key.encode()) % BUCKETS


@dataclass(frozen=True)
class BucketRange:
    """Partition `index` of `count`: the buckets [low, high)."""

    index: int
    count: int

    def __post_init__(self) -> None:
        if not 0 <= self.index < self.count <= BUCKETS:
            raise ValueError(f"partition {self.index} of {self.count} is not one of 1 to {BUCKETS} partitions")

    @property
    def low(self) -> int:
        return self.index * BUCKETS // self.count

    @property
    def high(self) -> int:
        return (self.index + 1) * BUCKETS // self.count

    def selector(self, field: str) -> dict[str, Any]:
        return {field: {"$gte": self.low, "$lt": self.high}}

    def holds(self, bucket: int) -> bool:
        return self.low <= bucket < self.high
