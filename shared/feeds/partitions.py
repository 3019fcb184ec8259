"""A feed and its partitions: what a feed reads and how it runs (its Shape), how it is cut into partitions (bucket
ranges, or on Cosmos DB one per physical partition, keyed by the feed range its `GetChangeStreamTokens` token
carries) and the work message that names one. Each partition has a lease (shared/feeds/leases.py); how a new
layout's partitions start from the old one's is shared/feeds/layouts.py. The feeds themselves are their consumers'
(shared/consumers/plugged.py lists them)."""

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from pymongo.database import Database

from shared.store import cosmos, schema
from shared.store.cosmos import FeedRange
from shared.store.partitioning import BucketRange
from shared.store.retries import RetryPolicy, with_retries

Token = Mapping[str, Any]  # a change stream's position: a resume token


class Shape(Enum):
    """How a feed's partitions are cut, when they are due and how far behind they are."""

    # Read as changes (a change stream, or polling by `time_field`): on Cosmos DB a partition per physical
    # partition, elsewhere bucket ranges; due at every dispatch; behind by the time since its checkpoint.
    CHANGES = "changes"
    # Swept an hour at a time by bucket range, on every store; due once an hour it has yet to do is due (Cosmos DB
    # bills autoscale by each hour's peak, so a sweep an hour beats a page a change); behind by the hours due.
    HOURLY = "hourly"
    # As HOURLY, as one partition whatever the store (a sweep by receive time into files named by their content).
    HOURLY_WHOLE = "hourly_whole"
    # Bucket ranges that trail the positions of another feed's partitions of the same buckets: when one is due and
    # how far behind it is, its consumer says (Consumer.trail).
    TRAILING = "trailing"


@dataclass(frozen=True)
class Feed:
    """A source collection a consumer reads: as changes, or swept hour by hour (`shape`)."""

    collection: str
    time_field: str  # the server-side time the polling source reads by (indexed in shared/store/schema.py)
    fields: tuple[str, ...] = ()  # what a consumer reads of a changed document besides its `_id`
    name: str = ""  # what leases and work messages call it (default: its collection)
    shape: Shape = Shape.CHANGES

    @property
    def hourly(self) -> bool:
        """Whether its partitions are swept hour by hour (bucket ranges on every store), not read as changes."""
        return self.shape is not Shape.CHANGES

    @property
    def key(self) -> str:
        return self.name or self.collection

    @property
    def projection(self) -> dict[str, int]:
        """What the polling source reads of a document: a change only names what to recompute."""
        return dict.fromkeys((self.time_field, *self.fields), 1)


# Feeds of an earlier layout (the heartbeat documents' change feed, and the hourly reports' feed that rolled the
# days up): their leases are left alone and a work message still queued for one is dropped (`retired`).
RETIRED_FEEDS = frozenset({schema.BOTTLE_HEARTBEATS, schema.USER_HOURLY_REPORTS})


def retired(message: Mapping[str, Any]) -> bool:
    """Whether a work message names a feed of an earlier layout, or a Cosmos DB partition by its place in the
    token list, as the code before feed ranges did (sent before an upgrade): the worker drops it, rather than
    failing it into the poison queue (where it would count as a failure, and alert)."""
    return message.get("feed") in RETIRED_FEEDS or (message.get("cosmos") is True and "range" not in message)


def bucket_span(buckets: BucketRange) -> FeedRange:
    """A bucket range as fixed-width hex, so bucket partitions' spans compare as feed ranges do."""
    return f"{buckets.low:04X}", f"{buckets.high:04X}"


@dataclass(frozen=True)
class Partition:
    """One partition of a feed: `index` of `count`, by bucket range, or by a Cosmos DB physical partition
    (`cosmos`: `feed_range`, the effective partition key range its token reads; its change stream starts from
    `start_token`, the partition's token when the lease was made; `index` of `count` only orders the ranges)."""

    feed: Feed
    index: int
    count: int
    cosmos: bool = False
    feed_range: FeedRange | None = None

    def __post_init__(self) -> None:
        if self.cosmos != (self.feed_range is not None):
            raise ValueError("a Cosmos DB partition is named by its feed range, and only it has one")

    @property
    def kind(self) -> str:
        return "cosmos" if self.cosmos else "buckets"

    @property
    def lease_id(self) -> str:
        if self.feed_range is not None:
            low, high = self.feed_range
            return f"reports:{self.feed.key}:cosmos:{low}-{high}"
        return f"reports:{self.feed.key}:buckets:{self.index}/{self.count}"

    @property
    def span(self) -> FeedRange:
        """The keys it reads, comparable with the spans of the same kind: its feed range, or its buckets as
        fixed-width hex."""
        if self.feed_range is not None:
            return self.feed_range
        return bucket_span(BucketRange(self.index, self.count))

    @property
    def buckets(self) -> BucketRange | None:
        """The bucket range a store without physical partitions reads (None on Cosmos DB)."""
        return None if self.cosmos else BucketRange(self.index, self.count)

    def message(self) -> dict[str, Any]:
        """The work message the dispatcher sends for this partition."""
        message = {"feed": self.feed.key, "partition": self.index, "of": self.count, "cosmos": self.cosmos}
        return message if self.feed_range is None else {**message, "range": list(self.feed_range)}

    @classmethod
    def from_message(cls, message: Mapping[str, Any], feeds: Mapping[str, Feed]) -> "Partition":
        """The partition of one of `feeds` (by key) a work message names; ValueError for anything else."""
        feed = feeds.get(str(message.get("feed")))
        index, count, on_cosmos = message.get("partition"), message.get("of"), message.get("cosmos")
        if feed is None or type(index) is not int or type(count) is not int or type(on_cosmos) is not bool:
            raise ValueError(f"not a report partition's work message: {dict(message)!r}")
        if not 0 <= index < count:
            raise ValueError(f"partition {index} of {count} does not exist")
        if not on_cosmos:
            return cls(feed, index, count)
        span = message.get("range")
        if not (isinstance(span, list) and len(span) == 2 and all(isinstance(k, str) for k in span)):
            raise ValueError(f"a Cosmos DB partition's work message without its feed range: {dict(message)!r}")
        return cls(feed, index, count, cosmos=True, feed_range=(span[0], span[1]))


class NoPartitionTokens(Exception):
    """Cosmos DB answered `GetChangeStreamTokens` without tokens, or with tokens that name no feed range: without
    them a feed cannot be read partition by partition (each bucket-filtered stream would read every physical
    partition). The dispatch fails, loudly, rather than fall back."""


def feed_partitions(
    db: Database[Any], feed: Feed, *, count: int, on_cosmos: bool, policy: RetryPolicy
) -> list[tuple[Partition, Token | None]]:
    """The feed's partitions, each with the token its change stream starts from when it has no position yet:
    on Cosmos DB one per physical partition (the tokens of `GetChangeStreamTokens`, ordered by feed range),
    elsewhere `count` bucket ranges (no start token: a new stream starts at the present). An hourly feed has
    bucket ranges on every store, and a HOURLY_WHOLE one a single partition (Shape)."""
    if feed.shape is Shape.HOURLY_WHOLE:
        return [(Partition(feed, 0, 1), None)]
    if on_cosmos and not feed.hourly:
        return list(cosmos_partitions(db, feed, policy))
    return [(Partition(feed, i, count), None) for i in range(count)]


def cosmos_partitions(db: Database[Any], feed: Feed, policy: RetryPolicy) -> list[tuple[Partition, Token]]:
    """One partition per token of `GetChangeStreamTokens`, named by the feed range the token carries."""
    tokens = with_retries(lambda: cosmos.change_stream_tokens(db, feed.collection), policy)
    if not tokens:
        raise NoPartitionTokens(f"GetChangeStreamTokens gave no resumeAfterTokens for {feed.collection}")
    try:
        ranged = sorted(((cosmos.feed_range(token), token) for token in tokens), key=lambda entry: entry[0])
    except ValueError as error:
        raise NoPartitionTokens(f"{feed.collection}: {error}") from None
    if len({span for span, _ in ranged}) != len(ranged):
        raise NoPartitionTokens(f"GetChangeStreamTokens named one feed range twice for {feed.collection}")
    return [
        (Partition(feed, i, len(ranged), cosmos=True, feed_range=span), token) for i, (span, token) in enumerate(ranged)
    ]
