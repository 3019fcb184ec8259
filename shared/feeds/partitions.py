"""The report feeds and their partitions: what each feed reads, how it is cut into partitions (bucket ranges, or
on Cosmos DB one per physical partition, keyed by the feed range its `GetChangeStreamTokens` token carries) and
the work message that names one. Each partition has a lease (shared/feeds/leases.py); how a new layout's
partitions start from the old one's is shared/feeds/layouts.py."""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pymongo.database import Database

from shared.store import cosmos, schema
from shared.store.cosmos import FeedRange
from shared.store.partitioning import BucketRange
from shared.store.retries import RetryPolicy, with_retries

Token = Mapping[str, Any]  # a change stream's position: a resume token


@dataclass(frozen=True)
class Feed:
    """A source collection the reports read changes of (or, `tally`, sweep once an hour)."""

    collection: str
    time_field: str  # the server-side time the polling source reads by (indexed in shared/store/schema.py)
    fields: tuple[str, ...] = ()  # what aggregation reads of a changed document besides its `_id`
    name: str = ""  # what leases and work messages call it (default: its collection)
    tally: bool = False  # swept by user bucket, hour by hour (shared/reports/tally.py), not read as changes
    archive: bool = False  # swept hour by hour into the archive: by receive time (shared/archive/actions.py), or,
    # with `tally`, by user bucket where the tally could not hand its bottle-hours (shared/reports/archiving.py)

    @property
    def hourly(self) -> bool:
        """Whether its partitions run once an hour is due (the tally, the archive's sweep), not at every dispatch:
        bucket ranges on every store, dispatched by the hours they have yet to do."""
        return self.tally or self.archive

    @property
    def key(self) -> str:
        return self.name or self.collection

    @property
    def projection(self) -> dict[str, int]:
        """What the polling source reads of a document: a change only names what to recompute."""
        return dict.fromkeys((self.time_field, *self.fields), 1)


ACTIONS_FEED = Feed(schema.BOTTLE_ACTIONS, "received_at", ("bottle_id", "time"))
HEARTBEAT_TALLY = Feed(schema.BOTTLE_HEARTBEATS, "", name="heartbeat_tally", tally=True)  # no time: it sweeps
# The archive's sweep of the actions by receive time (shared/archive/actions.py): one partition, when the app has an
# archive (shared/archive/current.py).
ACTIONS_ARCHIVE = Feed(schema.BOTTLE_ACTIONS, "received_at", name="actions_archive", archive=True)
# The archive's heartbeats: a partition per tally partition (the same bucket ranges), whose lease is the archive's
# own position in the tally's hours; it reads the heartbeat documents only for the passes the tally could not hand
# over (shared/reports/archiving.py).
HEARTBEATS_ARCHIVE = Feed(schema.BOTTLE_HEARTBEATS, "", name="heartbeats_archive", tally=True, archive=True)
FEEDS = (ACTIONS_FEED, HEARTBEAT_TALLY)
ARCHIVE_FEEDS = (ACTIONS_ARCHIVE, HEARTBEATS_ARCHIVE)
FEED_BY_KEY = {feed.key: feed for feed in (*FEEDS, *ARCHIVE_FEEDS)}


def feeds_to_run(*, archived: bool) -> tuple[Feed, ...]:
    """The feeds the dispatcher keeps: the reports', and the archive's two when the app has an archive."""
    return (*FEEDS, *ARCHIVE_FEEDS) if archived else FEEDS


def tally_partner(partition: "Partition") -> "Partition":
    """The heartbeat tally's partition of the same buckets as a partition of the archive's heartbeats."""
    return Partition(HEARTBEAT_TALLY, partition.index, partition.count)


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
    def from_message(cls, message: Mapping[str, Any]) -> "Partition":
        """The partition a work message names; ValueError for anything else."""
        feed = FEED_BY_KEY.get(str(message.get("feed")))
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
    elsewhere `count` bucket ranges (no start token: a new stream starts at the present). The tally has bucket
    ranges everywhere, and so do the archive's heartbeats (the tally's); the archive's sweep has one partition."""
    if feed.archive and not feed.tally:  # one sweep by receive time, whatever the store: files named by content
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
