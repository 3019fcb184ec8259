"""Cosmos DB request units and the bill, by Microsoft's documented rules (development only: nothing here is deployed;
the benchmarks, the tests and the Cosmos-faithful store's charges use it). The inputs come from
tools/costs/meter.py: per database command, the documents a query or a change feed returned (their BSON sizes) and
how many shard key values its filter names, and per document a write changed, its stored size before and after and
the index terms it deleted and inserted. The outputs are request units (RU) per operation, which
benchmarks/costs.py turns into RU per heartbeat, per opened and closed event, per report change and per swept
bottle, and the billing rules benchmarks/design_scale.py applies to them (the hourly peak, the storage floor, the
physical partitions, the regions, the price).

RULES is the model: one row per rule, each with the page it comes from and a worked example that
tests/tools/test_cost_model.py checks against the code. Where the documentation gives no figure, ASSUMPTIONS says what
the model takes instead; `./dev bench --mongodb-uri` (benchmarks/calibrate.py) prints the charge a real account
reports beside the model's, operation by operation. There is one bill, the honest one: no optimistic line.
"""

import bisect
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

KB = 1024
READ_ON = "2026-11-27"  # the date every page below was read for its figures

# --- sources -----------------------------------------------------------------------------------------------

RU_CONSUMPTION = "https://learn.microsoft.com/azure/cosmos-db/understand-request-unit-consumption"
REQUEST_UNITS = "https://learn.microsoft.com/azure/cosmos-db/request-units"
READS_WRITES = "https://learn.microsoft.com/azure/cosmos-db/optimize-cost-reads-writes"
MONGO_INDEXING = "https://learn.microsoft.com/azure/cosmos-db/mongodb/indexing"
QUERY_CONTAINER = "https://learn.microsoft.com/azure/cosmos-db/how-to-query-container"
AUTOSCALE = "https://learn.microsoft.com/azure/cosmos-db/provision-throughput-autoscale"
AUTOSCALE_FAQ = "https://learn.microsoft.com/azure/cosmos-db/autoscale-faq"
CHOOSE_OFFER = "https://learn.microsoft.com/azure/cosmos-db/how-to-choose-offer"
DYNAMIC_SCALING = "https://learn.microsoft.com/azure/cosmos-db/autoscale-per-partition-region"
DEVBLOGS = "https://devblogs.microsoft.com/cosmosdb"
DYNAMIC_SCALING_GA = f"{DEVBLOGS}/announcing-the-ga-of-dynamic-scaling-per-region-and-per-partition-autoscale"
RESERVED_CAPACITY = "https://learn.microsoft.com/azure/cosmos-db/reserved-capacity"
SET_THROUGHPUT = "https://learn.microsoft.com/azure/cosmos-db/set-throughput"
LIMITS = "https://learn.microsoft.com/azure/cosmos-db/concepts-limits"
PARTITIONING = "https://learn.microsoft.com/azure/cosmos-db/partitioning-overview"
TIME_TO_LIVE = "https://learn.microsoft.com/azure/cosmos-db/time-to-live"
REGIONS = "https://learn.microsoft.com/azure/cosmos-db/optimize-cost-regions"
STORAGE_COST = "https://learn.microsoft.com/azure/cosmos-db/optimize-cost-storage"

# --- the figures the rules use -------------------------------------------------------------------------------

# (KB, RU) from the "Document size" table of RU_CONSUMPTION (session consistency; "illustrative" values).
_READ_TABLE = ((1, 1.00), (2, 1.04), (4, 1.14), (8, 1.33), (16, 1.67), (32, 2.19), (64, 4.76), (128, 9.95))
_WRITE_TABLE = ((1, 4.95), (2, 6.29), (4, 6.67), (8, 7.04), (16, 9.52), (32, 11.23), (64, 22.67), (128, 48.19))
TERM_RU = 0.2  # per index term added or removed (RU_CONSUMPTION, Write operations)
FANOUT_RU = 2.5  # per physical partition a query not confined to one shard key value reaches
PARTITION_GB = 50  # storage of one physical partition
PARTITION_RU = 10_000  # RU/s of one physical partition
STORAGE_FLOOR_RU_PER_GB = 10  # autoscale's maximum RU/s is at least 10 x the GB stored
AUTOSCALE_MIN_MAX = 1_000  # the smallest autoscale maximum
AUTOSCALE_STEP = 1_000  # the maximum is set in steps of 1,000 RU/s
BILLED_FLOOR = 0.1  # an autoscale hour bills at least a tenth of the maximum
STANDARD_MIN_RU = 400  # the smallest standard (manual) throughput of a container
STANDARD_RU_PER_GB = 1  # standard throughput is at least 1 RU/s per GB stored (LIMITS: "Minimum RU/s ... per 1 GB")
STANDARD_STEP = 100  # standard throughput is set in steps of 100 RU/s
RESERVED_MAX_DISCOUNT = 0.63  # RESERVED_CAPACITY: "save up to 63%" with a three-year commitment
HOURS_PER_MONTH = 730
ALL = -1  # an Operation's reach: every physical partition


@dataclass(frozen=True)
class Price:
    """The public list price the bill uses (US dollars, a US region, pay as you go)."""

    standard_per_100_ru_hour: float = 0.008  # provisioned throughput, single write region
    autoscale_factor: float = 1.5  # autoscale's rate per 100 RU/s is 1.5 x the standard one (single write region)
    storage_per_gb_month: float = 0.25  # data and index, in each region
    source: str = (
        f"{REGIONS} (page dated 2021-08-26, read {READ_ON}: $0.008 per 100 RU/s per hour with a single write "
        f"region, storage $0.25 per GB-month, 730 hours a month); {CHOOSE_OFFER} and {AUTOSCALE_FAQ} (read "
        f"{READ_ON}: autoscale 1.5 x the standard rate, single write region); "
        "https://azure.microsoft.com/pricing/details/cosmos-db/ for today's price in your region"
    )

    @property
    def autoscale_per_100_ru_hour(self) -> float:
        return self.standard_per_100_ru_hour * self.autoscale_factor


PRICE = Price()

STANDARD, AUTOSCALE_MODE = "standard", "autoscale"  # a collection's throughput mode (CHOOSE_OFFER)


@dataclass(frozen=True)
class Rule:
    name: str
    statement: str
    source: str
    example: str  # a worked example from the source; tests/tools/test_cost_model.py checks the code against it


RULES = (
    Rule(
        "point read",
        "reading one document by its `_id` and shard key costs 1 RU up to 1 KB (an item under 1 KB costs as 1 KB), "
        "then by the size table: 1.04 at 2 KB, 1.14 at 4, 1.33 at 8 ... 9.95 at 128",
        f"{REQUEST_UNITS}; {RU_CONSUMPTION} (Document size)",
        "a 300-byte document: 1 RU; 1 KB: 1 RU; 128 KB: 9.95 RU",
    ),
    Rule(
        "write, by size",
        "writing a document costs about 5 RU up to 1 KB (an item under 1 KB costs as 1 KB), then by the size "
        "table: 6.29 at 2 KB, 6.67 at 4, 7.04 at 8 ... 48.19 at 128",
        f"{RU_CONSUMPTION} (Document size); {READS_WRITES}",
        "a 300-byte document: 4.95 RU; 2 KB: 6.29 RU",
    ),
    Rule(
        "create",
        "the size-based write plus 0.2 RU per index term inserted",
        f"{RU_CONSUMPTION} (Write operations: Create)",
        "1 KB with 10 terms: 4.95 + 0.2 x 10 = 6.95 RU (the page: about 7)",
    ),
    Rule(
        "update (replace)",
        "deleting the old document and inserting the new one, plus 0.2 RU per modified index term deleted and per "
        "one inserted",
        f"{RU_CONSUMPTION} (Updates (replace))",
        "1 KB changing two terms: 4.95 + 4.95 + 0.2 x 2 + 0.2 x 2 = 10.7 RU (the page: about 10.8)",
    ),
    Rule(
        "delete",
        "the size-based write plus 0.2 RU per index term deleted",
        f"{RU_CONSUMPTION} (Delete)",
        "1 KB with 10 terms: 6.95 RU (the page: about 7)",
    ),
    Rule(
        "query and change feed, documents",
        "each document a query or a feed returns costs what its point read does (floored at 1 KB), and a request "
        "no less than one point read",
        f"{RU_CONSUMPTION} (Feed operations: five 1 KB documents cost about five point reads; Query Operations); "
        f"{REQUEST_UNITS}",
        "a feed page of five 1 KB documents: 5 RU; an empty page: 1 RU",
    ),
    Rule(
        "query fan-out",
        "a query whose filter does not pin the shard key to one value runs against every physical partition's "
        "own index and pays about 2.5 RU for each partition it reaches, on top of its documents; one that names "
        "k values with `$in` reaches the partitions holding them (P x (1 - (1 - 1/P)^k) of P, on average)",
        f"{QUERY_CONTAINER} (Cross-partition query: 'it must fan out to all physical partitions where it's run "
        "against each partition's index'); the ~2.5 RU per partition is this model's assumption, stated "
        "in no Microsoft page: calibrate it on an account (./dev bench --mongodb-uri)",
        "a sorted page over 200 partitions: 200 x 2.5 = 500 RU plus its documents; `$in` of 200 users over "
        "191 partitions reaches 124.2 of them: 310 RU",
    ),
    Rule(
        "index terms",
        "the API for MongoDB indexes `_id` and the shard key by itself, and the indexes created; a compound "
        "index is one term per document, an indexed array one term per element (multikey)",
        f"{MONGO_INDEXING}",
        "an action with (bottle_id, time), received_at, (user_id, time) and a TTL: 6 terms with `_id`, the shard "
        "key and `_ts`",
    ),
    Rule(
        "autoscale bills each hour's peak",
        "each hour bills the highest RU/s the system scaled to within that hour, and at least 0.1 x the maximum "
        "RU/s (Tmax); so a burst bills its peak for the whole hour",
        f"{AUTOSCALE} ('billed for the highest RU/s the system scaled to in the hour, or 0.1*Tmax, whichever is "
        f"higher'); {AUTOSCALE_FAQ}",
        "Tmax 10,000: an hour that peaked at 6,000 bills 6,000; an idle hour bills 1,000",
    ),
    Rule(
        "standard (manual) throughput",
        "a container set to T RU/s bills T every hour at the standard rate, however little it uses, and "
        "rate-limits (16500) a second that needs more; T is spread evenly over its physical partitions, so a "
        "partition serves T / P; T is at least MAX(400, 1 RU/s per GB stored, the highest T ever set / 100), "
        "in steps of 100",
        f"{CHOOSE_OFFER} (Billing model: 'billed for the RU/s provisioned, regardless of how many RUs were "
        f"consumed'); {SET_THROUGHPUT} (throughput 'evenly distributed among its physical partitions'); {LIMITS} "
        "(Minimum throughput limits; Minimum RU/s required per 1 GB: 1 RU/s)",
        "400 RU/s standard bills 400 in hour 1 and in hour 2; a container raised to 50,000 RU/s holding 20 GB "
        "may go back down to MAX(400, 20 x 1, 50,000 / 100) = 500 RU/s",
    ),
    Rule(
        "standard or autoscale",
        "each collection takes the cheaper of standard throughput at its busiest minute (and its minimum) and "
        "autoscale billed hour by hour at 1.5 x the standard rate: standard saves where the hours bill, on "
        "average, more than two thirds of the standard figure; the page's rule of thumb, 'use the full amount "
        "for 66 % of hours or more', is the same comparison with the other hours idle",
        f"{CHOOSE_OFFER} ('When to use it'; 'The autoscale rate per RU/s is 1.5 x the standard (manual) rate'); "
        f"{AUTOSCALE_FAQ} (single write region: 1.5 x)",
        "Tmax 4,000 scaled to 3,500 in hour 1 and idle in hour 2 bills 3,500 and 400 at 1.5 x: 5,850 "
        "standard-rate RU/s-hours, against 8,000 for 4,000 standard: autoscale; the same maximum used in 66 % "
        "of the hours and idle in the rest bills 1.5 x (0.66 + 0.34 x 0.1) = 1.04 x standard: standard",
    ),
    Rule(
        "dynamic scaling (per partition and region)",
        "with dynamic scaling each physical partition (and region) of an autoscale container scales, and bills, "
        "to its own hourly peak, at least its share of 0.1 x Tmax; without it every partition scales to the "
        "busiest one's need; the app's deployment enables it (enablePerRegionPerPartitionAutoscale): it is on by "
        "default for accounts created since its general availability (2024-09-25)",
        f"{DYNAMIC_SCALING} (Example); {DYNAMIC_SCALING_GA}; {AUTOSCALE_FAQ} ('How can I enable dynamic "
        "autoscale': enablePerRegionPerPartitionAutoscale, API 2024-11-15 or later)",
        "1,000 RU/s over 2 partitions and 2 regions, peaks 500 and 200 (write region), 150 and 50 (read region): "
        "2,000 RU/s billed scaled to the busiest, 900 with dynamic scaling",
    ),
    Rule(
        "reserved capacity",
        "a reservation is a purchase of standard RU/s for one or three years at a discount (up to 63 %), which "
        "covers that much provisioned throughput each hour, the rest billed pay as you go; an autoscale RU/s "
        "uses 1.5 of them: a separate line, not a design choice",
        f"{RESERVED_CAPACITY} ('save up to 63%'; 'if 10,000 RU/s is your consistent hourly usage, buy 10,000'); "
        f"{AUTOSCALE_FAQ} ('to cover 10,000 autoscale RU/s, plan to buy 15,000')",
        "10,000 RU/s of autoscale billed every hour needs 15,000 RU/s reserved; at 63 % off, 10,000 RU/s "
        "standard for a month costs $584 x 0.37 = $216",
    ),
    Rule(
        "storage floor",
        "the smallest autoscale maximum a container may have is MAX(1,000, the highest maximum ever set / 10, "
        "the GB stored (data and index) x 10), rounded up to 1,000 RU/s, and Cosmos DB raises it by itself",
        f"{AUTOSCALE} (Minimum autoscale max RU/s for a container)",
        "9,531 GB stored: at least 96,000 RU/s maximum, so every hour bills at least 9,600",
    ),
    Rule(
        "physical partitions",
        "a physical partition holds up to 50 GB and serves up to 10,000 RU/s: a container has at least "
        "MAX(GB / 50, maximum RU/s / 10,000) of them, and each splits as it grows",
        f"{LIMITS} (Maximum RUs per partition: 10,000); {PARTITIONING} (50 GB per physical partition)",
        "9,531 GB at a 96,000 RU/s maximum: 191 partitions",
    ),
    Rule(
        "TTL deletes are not billed",
        "with provisioned throughput, expired items are deleted with leftover RUs that user requests did not "
        "consume: they add nothing to the hour's peak",
        f"{TIME_TO_LIVE} ('For provisioned throughput accounts, the deletion of expired items uses leftover RUs')",
        "60 days of actions expiring: 0 RU/s billed",
    ),
    Rule(
        "regions",
        "the throughput configured is reserved in each region of the account: T RU/s in N regions bills T x N "
        "(every write is applied, and charged, again in each region); storage is billed in each region too",
        f"{REGIONS}; {STORAGE_COST}",
        "10,000 RU/s and 512 GB in 2 regions: 20,000 RU/s and 1,024 GB billed",
    ),
    Rule(
        "price",
        "autoscale with one write region: $0.012 per 100 RU/s per hour (1.5 x the standard $0.008), storage "
        "$0.25 per GB-month, 730 hours a month",
        PRICE.source,
        "10,000 RU/s standard for a month: 100 x 730 x $0.008 = $584; autoscale billed 10,000 every hour: $876; "
        "512 GB: $128",
    ),
)

ASSUMPTIONS = (
    "An update through the API for MongoDB is charged as a replace of the whole document (not as a patch).",
    "A findAndModify is an update plus a point read of the document it returns (its reply).",
    "A write whose filter matches nothing costs a point read of the document it looked at.",
    "A document's `_ts` is an index term when its collection has a TTL index: every write replaces it.",
    "A query's documents cost what their point reads do (each floored at 1 KB) on top of the partitions it "
    "reaches: the documentation gives no per-document figure for queries over small items, so this is the "
    "pessimistic reading; calibrate on a real account.",
    "Load spreads evenly over a container's physical partitions (PARTITION_SKEW: the busiest partition's share "
    "against the average): keys hashed over millions of bottles and users; a skew would raise what standard "
    "throughput must be set to (T / P per partition), and what autoscale without dynamic scaling bills.",
    "Standard throughput set at the busiest minute (STANDARD_HEADROOM above it) serves the seconds within it: the "
    "steady load is thousands of small requests a second; a second above it is rate-limited and retried "
    "(shared/store/retries.py).",
)

# --- the size-based parts ------------------------------------------------------------------------------------


def _size_part(size: int, table: Sequence[tuple[int, float]]) -> float:
    kb = max(size / KB, 1.0)  # an item under 1 KB costs as 1 KB
    sizes = [s for s, _ in table]
    i = bisect.bisect_left(sizes, kb)
    if i == 0:
        return table[0][1]
    if i >= len(table):  # past the table: the last point's rate per KB
        return table[-1][1] * kb / table[-1][0]
    (k0, r0), (k1, r1) = table[i - 1], table[i]
    return r0 + (r1 - r0) * (kb - k0) / (k1 - k0)


def read_ru(size: int) -> float:
    """A point read of a document of `size` BSON bytes."""
    return _size_part(size, _READ_TABLE)


def write_ru(size: int) -> float:
    """The size-based part of writing (inserting, or deleting) a document of `size` bytes."""
    return _size_part(size, _WRITE_TABLE)


# --- operations ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DocumentWrite:
    """One document a write command changed (or looked at): its BSON size before and after (None: it did not
    exist), and the index terms it deleted and inserted."""

    before: int | None
    after: int | None
    terms_deleted: int = 0
    terms_inserted: int = 0
    unchanged: bool = False  # the write matched nothing (or changed nothing): the document was only read
    indexes: tuple[str, ...] = ()  # the indexes whose terms it changed

    def ru(self) -> float:
        if self.unchanged:
            size = self.before if self.before is not None else self.after
            return read_ru(size if size is not None else KB)
        if self.before is None and self.after is None:
            return 0.0
        if self.before is None:  # create
            assert self.after is not None
            return write_ru(self.after) + TERM_RU * self.terms_inserted
        if self.after is None:  # delete
            return write_ru(self.before) + TERM_RU * self.terms_deleted
        # update (replace): the old document deleted, the new one inserted, the modified terms both ways
        return write_ru(self.before) + write_ru(self.after) + TERM_RU * (self.terms_deleted + self.terms_inserted)


def partitions_reached(reach: int, partitions: int) -> float:
    """The physical partitions (of `partitions`) a query reaches: one, all (ALL), or, for `$in` of `reach` shard key
    values spread evenly, the expected number of distinct partitions they fall in."""
    if reach == ALL:
        return float(partitions)
    if reach <= 1 or partitions <= 1:
        return 1.0
    return partitions * (1 - (1 - 1 / partitions) ** reach)


def fanout_ru(reach: int, partitions: int) -> float:
    """What a query pays for the partitions it reaches: nothing when its filter pins one shard key value."""
    return 0.0 if reach == 1 else FANOUT_RU * partitions_reached(reach, partitions)


@dataclass
class Operation:
    """One database command as the cost model sees it."""

    command: str
    collection: str
    returned: list[int] = field(default_factory=list)  # BSON sizes of the documents it returned
    writes: list[DocumentWrite] = field(default_factory=list)
    reply_document: int | None = None  # findAndModify: the document in its reply
    reach: int = 1  # a read's shard key values: 1 (one partition), k (`$in` of k values) or ALL

    @property
    def is_read(self) -> bool:
        return self.command in {"find", "getMore", "aggregate", "count", "distinct"}

    def base_ru(self) -> float:
        """The RU that do not depend on the partition count: documents, writes, index terms."""
        if self.is_read:
            return max(sum(read_ru(size) for size in self.returned), read_ru(KB))
        total = sum(write.ru() for write in self.writes)
        if self.reply_document is not None:
            total += read_ru(self.reply_document)
        return total

    def ru(self, partitions: int = 1) -> float:
        """The operation's charge on a container of `partitions` physical partitions."""
        return self.base_ru() + (fanout_ru(self.reach, partitions) if self.is_read else 0.0)


def total_ru(operations: Iterable[Operation], partitions: int = 1) -> float:
    return sum(op.ru(partitions) for op in operations)


# --- the bill ------------------------------------------------------------------------------------------------


def round_up(ru_per_second: float, step: int = AUTOSCALE_STEP) -> int:
    return max(step, math.ceil(ru_per_second / step - 1e-9) * step)


def storage_floor(storage_gb: float) -> int:
    """The smallest autoscale maximum a container storing `storage_gb` (data and index) may have."""
    return round_up(max(AUTOSCALE_MIN_MAX, storage_gb * STORAGE_FLOOR_RU_PER_GB))


def autoscale_max(peak_ru_per_second: float, storage_gb: float, headroom: float = 1.0) -> int:
    """The autoscale maximum to set: the peak with its headroom, and no less than the storage floor."""
    return max(round_up(peak_ru_per_second * headroom), storage_floor(storage_gb))


def billed_in_hour(peak_ru_per_second: float, maximum: int) -> float:
    """What one hour bills: its highest RU/s, and at least a tenth of the maximum."""
    return max(peak_ru_per_second, BILLED_FLOOR * maximum)


def standard_minimum(storage_gb: float, highest_ever: int = 0) -> int:
    """The smallest standard (manual) throughput a container storing `storage_gb` may be set to."""
    least = max(STANDARD_MIN_RU, storage_gb * STANDARD_RU_PER_GB, highest_ever / 100)
    return round_up(least, STANDARD_STEP)


def standard_throughput(peak_ru_per_second: float, storage_gb: float, headroom: float = 1.0) -> int:
    """The standard throughput to set: the busiest minute with its headroom, and no less than the minimum."""
    return max(round_up(peak_ru_per_second * headroom, STANDARD_STEP), standard_minimum(storage_gb))


def partition_peaks(peak_ru_per_second: float, partitions: int, skew: float = 1.0) -> list[float]:
    """A container's peak spread over its physical partitions: the busiest one `skew` times the average, the
    others even (the total kept)."""
    if partitions <= 1:
        return [peak_ru_per_second]
    average = peak_ru_per_second / partitions
    rest = (partitions - skew) / (partitions - 1) * average
    return [skew * average] + [rest] * (partitions - 1)


def autoscale_billed(peaks: Sequence[float], maximum: int, *, dynamic: bool = True) -> float:
    """What an autoscale hour bills from each physical partition's (and region's) highest RU/s in it: each its
    own, and at least its share of a tenth of the maximum, with dynamic scaling; without it, each as much as the
    busiest."""
    floor = BILLED_FLOOR * maximum / max(len(peaks), 1)
    if dynamic:
        return sum(max(peak, floor) for peak in peaks)
    return len(peaks) * max(max(peaks, default=0.0), floor)


def throughput_cost(mode: str, billed_per_hour: float, hours: float = 1.0, price: Price = PRICE) -> float:
    """Dollars for `hours` hours that bill `billed_per_hour` RU/s on average in `mode`."""
    rate = price.standard_per_100_ru_hour if mode == STANDARD else price.autoscale_per_100_ru_hour
    return billed_per_hour / 100 * rate * hours


def cheaper_mode(standard_ru: int, autoscale_hourly: Sequence[float], price: Price = PRICE) -> str:
    """STANDARD or AUTOSCALE_MODE, whichever bills `autoscale_hourly`'s hours for less (CHOOSE_OFFER)."""
    hours = len(autoscale_hourly)
    standard = throughput_cost(STANDARD, standard_ru, hours, price)
    autoscale = throughput_cost(AUTOSCALE_MODE, sum(autoscale_hourly), 1.0, price)
    return STANDARD if standard < autoscale else AUTOSCALE_MODE


def reserved_equivalent(mode: str, ru_per_second: float) -> float:
    """The standard RU/s of reserved capacity that cover `ru_per_second` billed in `mode` (AUTOSCALE_FAQ)."""
    return ru_per_second * (PRICE.autoscale_factor if mode == AUTOSCALE_MODE else 1.0)


def physical_partitions(storage_gb: float, maximum: int) -> int:
    return max(1, math.ceil(storage_gb / PARTITION_GB), math.ceil(maximum / PARTITION_RU))


def monthly_cost(
    billed_ru_hours_per_hour: float,
    storage_gb: float,
    regions: int = 1,
    price: Price = PRICE,
    mode: str = AUTOSCALE_MODE,
) -> float:
    """Dollars a month: `billed_ru_hours_per_hour` is the average over the hours of what each bills, in RU/s,
    at `mode`'s rate."""
    throughput = throughput_cost(mode, billed_ru_hours_per_hour, HOURS_PER_MONTH, price)
    return regions * (throughput + storage_gb * price.storage_per_gb_month)


@dataclass(frozen=True)
class UnitCost:
    """RU per unit of work (a heartbeat, a change, a swept bottle), by collection: the part that does not depend
    on the partition count, and the queries per unit by their reach, which are priced by the partitions each
    collection has (at the design scale: design_scale.py)."""

    base: dict[str, float] = field(default_factory=dict)
    queries: dict[str, dict[int, float]] = field(default_factory=dict)  # collection -> reach -> queries per unit

    @classmethod
    def of(cls, operations: Iterable[Operation], units: float) -> "UnitCost":
        base: dict[str, float] = {}
        queries: dict[str, dict[int, float]] = {}
        for op in operations:
            base[op.collection] = base.get(op.collection, 0.0) + op.base_ru() / units
            if op.is_read and op.reach != 1:
                by_reach = queries.setdefault(op.collection, {})
                by_reach[op.reach] = by_reach.get(op.reach, 0.0) + 1 / units
        return cls(base, queries)

    @property
    def collections(self) -> set[str]:
        return set(self.base) | set(self.queries)

    def ru(self, collection: str, partitions: int = 1) -> float:
        fanout = sum(n * fanout_ru(reach, partitions) for reach, n in self.queries.get(collection, {}).items())
        return self.base.get(collection, 0.0) + fanout

    def by_collection(self, partitions: dict[str, int] | None = None) -> dict[str, float]:
        partitions = partitions or {}
        return {name: self.ru(name, partitions.get(name, 1)) for name in sorted(self.collections)}

    def total(self, partitions: dict[str, int] | None = None) -> float:
        return sum(self.by_collection(partitions).values())


def combine(parts: Iterable[tuple[UnitCost, float]], *, floor_at_zero: bool = False) -> UnitCost:
    """The weighted sum of unit costs (a weight may be negative: a marginal cost is a run less an empty run)."""
    base: dict[str, float] = {}
    queries: dict[str, dict[int, float]] = {}
    for cost, weight in parts:
        for name, ru in cost.base.items():
            base[name] = base.get(name, 0.0) + ru * weight
        for name, by_reach in cost.queries.items():
            into = queries.setdefault(name, {})
            for reach, n in by_reach.items():
                into[reach] = into.get(reach, 0.0) + n * weight
    if floor_at_zero:
        base = {name: max(ru, 0.0) for name, ru in base.items()}
        queries = {name: {r: max(n, 0.0) for r, n in by_reach.items()} for name, by_reach in queries.items()}
    return UnitCost(base, queries)


# --- the archive: its blob storage, its transactions, and the request units of its sweep --------------------------
# A section of its own: the archive is billed by Azure Storage, not Cosmos DB, beside the one Cosmos DB cost it adds
# (the sweep's reads of `bottle_actions`). docs/archive.md says how it is written; docs/costs.md shows this bill.

BLOB_PRICING = "https://azure.microsoft.com/pricing/details/storage/blobs/"
ACCESS_TIERS = "https://learn.microsoft.com/azure/storage/blobs/access-tiers-overview"


@dataclass(frozen=True)
class BlobPrice:
    """Block blob list prices the archive's bill assumes (US dollars, a US region, LRS, pay as you go; storage per
    GB-month, operations per 10,000). Not from a Microsoft Learn page: they are the pricing page's order of
    magnitude, to be checked there for a region and a date before any decision."""

    hot_gb_month: float = 0.018
    cool_gb_month: float = 0.01
    cold_gb_month: float = 0.0036
    hot_writes: float = 0.05
    hot_reads: float = 0.004
    source: str = (
        f"{BLOB_PRICING} (assumed: hot $0.018, cool $0.01, cold $0.0036 per GB-month; hot tier writes $0.05 and "
        f"reads $0.004 per 10,000); tiers and their minimum days: {ACCESS_TIERS}"
    )


BLOB_PRICE = BlobPrice()


@dataclass(frozen=True)
class ArchiveScale:
    """What the archive's bill is computed from: the design's rates, the archive's layout, and what was measured
    (bytes per row: tests/tools/test_cost_model.py encodes rows of the design's sizes with
    shared/archive/parquet.py)."""

    events_per_second: float = 1_400  # design_scale.OPENED_PER_SECOND + CLOSED_PER_SECOND
    bottles: int = 30_000_000  # design_scale.BOTTLES; each sends a heartbeat every 30 minutes: a row every hour
    event_bytes: int = 330  # an action document (BSON), each a point read when a query returns it
    event_row_bytes: float = 34  # an event in an `actions` file (Parquet, Snappy), measured
    bottle_hour_row_bytes: float = 19  # a bottle-hour in a `heartbeats` file, measured
    chunk_rows: int = 100_000  # shared/archive/actions.py CHUNK_ROWS
    dates_per_chunk: float = 2  # a chunk's device dates: its own, and the late uploads' (assumed)
    page_size: int = 5_000  # ARCHIVE_PAGE_SIZE
    actions_partitions: int = 82  # physical partitions of `bottle_actions` after a year (docs/costs.md, the bill)
    spread_minutes: int = 60  # REPORTS_TALLY_SPREAD_MINUTES: the sweep's pages are paced over them
    user_buckets: int = 1024  # heartbeat files per hour (BUCKETS)
    tally_partitions: int = 64  # REPORTS_PARTITIONS at this scale
    runs_per_pass: int = 53  # a tally pass of 40 minutes in runs of REPORTS_TIME_BUDGET_SECONDS (45)
    window_hours: int = 28  # the most hours a ring holds (HEARTBEAT_WINDOW_HOURS 24, in whole fields)
    heartbeat_days: int = 14  # HEARTBEAT_ARCHIVE_DAYS
    cool_after_days: int = 30  # the lifecycle policy (infra/modules/archive.bicep)
    cold_after_days: int = 90


@dataclass(frozen=True)
class ArchiveBill:
    """The archive at the design scale: the sweep's request units, the files and transactions, the storage."""

    sweep_ru_average: float  # RU/s on `bottle_actions`, averaged over the hour
    sweep_ru_billed: float  # RU/s at its paced peak: what autoscale bills for the hour
    sweep_dollars_month: float  # that, a month, one region
    event_writes_hour: float
    heartbeat_merges_hour: float  # each a read and a write of a file
    heartbeat_merges_hour_most: float  # if late heartbeats reached every hour of every bucket's window each hour
    transactions_dollars_month: float  # at the most
    events_gb_year: float
    heartbeats_gb: float  # steady: HEARTBEAT_ARCHIVE_DAYS of bottle-hours
    storage_dollars_month_year_1: float  # at the end of the first year, by tier
    storage_dollars_month_year_5: float


def _per_month(per_hour: float) -> float:
    return per_hour * HOURS_PER_MONTH


def archive_bill(scale: ArchiveScale = ArchiveScale(), price: BlobPrice = BLOB_PRICE) -> ArchiveBill:
    """What the archive costs at the design scale.

    - The sweep reads every event once more: each a point read (the model's rule for documents a query returns),
      plus a page's fan-out over every physical partition of `bottle_actions`; its pages are paced over the spread,
      so autoscale bills the hour at the average times 60 / spread. The heartbeats add no request unit: they come
      from the pages the tally reads anyway.
    - Event files: a file per chunk and device date, written once (plus a partial write at each run's end).
    - Heartbeat files: each (hour, user bucket) merged once when its hour closes, once more at each run that ends
      in its bucket, and again when a late heartbeat reaches its hour (at most every hour of every window, every
      pass); a merge is a read and a write.
    - Storage: the events for good (hot, then cool after 30 days, cold after 90), the heartbeats for 14 days."""
    events_hour = scale.events_per_second * 3600
    pages_per_second = scale.events_per_second / scale.page_size
    average = scale.events_per_second * read_ru(scale.event_bytes) + pages_per_second * fanout_ru(
        ALL, scale.actions_partitions
    )
    billed = average * 60 / scale.spread_minutes
    chunks = -(-events_hour // scale.chunk_rows)
    event_writes = chunks * scale.dates_per_chunk + scale.runs_per_pass * scale.dates_per_chunk
    merges = scale.user_buckets + scale.tally_partitions * scale.runs_per_pass
    merges_most = merges + scale.user_buckets * scale.window_hours
    transactions = _per_month(event_writes + merges_most) / 10_000 * (price.hot_writes + price.hot_reads)
    gb_per_day = events_hour * 24 * scale.event_row_bytes / 1e9
    heartbeats_gb = scale.bottles * 24 * scale.heartbeat_days * scale.bottle_hour_row_bytes / 1e9

    def storage(days: int) -> float:
        hot = min(days, scale.cool_after_days) * gb_per_day
        cool = max(0, min(days, scale.cold_after_days) - scale.cool_after_days) * gb_per_day
        cold = max(0, days - scale.cold_after_days) * gb_per_day
        tiers = hot * price.hot_gb_month + cool * price.cool_gb_month + cold * price.cold_gb_month
        return tiers + heartbeats_gb * price.hot_gb_month

    return ArchiveBill(
        sweep_ru_average=average,
        sweep_ru_billed=billed,
        sweep_dollars_month=billed / 100 * PRICE.autoscale_per_100_ru_hour * HOURS_PER_MONTH,
        event_writes_hour=event_writes,
        heartbeat_merges_hour=merges,
        heartbeat_merges_hour_most=merges_most,
        transactions_dollars_month=transactions,
        events_gb_year=gb_per_day * 365,
        heartbeats_gb=heartbeats_gb,
        storage_dollars_month_year_1=storage(365),
        storage_dollars_month_year_5=storage(5 * 365),
    )


def archive_markdown(bill: ArchiveBill) -> str:
    """The archive's bill as docs/costs.md shows it (tests/tools/test_cost_model.py holds the page to it)."""
    rows = [
        ("the sweep's reads of `bottle_actions`", f"{bill.sweep_ru_average:,.0f} RU/s average, "
         f"{bill.sweep_ru_billed:,.0f} billed (paced)", f"{bill.sweep_dollars_month:,.0f}"),
        ("the heartbeats, from the tally's pages", "0 RU", "0"),
        ("event files written", f"{bill.event_writes_hour:,.0f} an hour", ""),
        ("heartbeat files merged (a read and a write)", f"{bill.heartbeat_merges_hour:,.0f} an hour, at most "
         f"{bill.heartbeat_merges_hour_most:,.0f} with late heartbeats", ""),
        ("storage transactions, at the most", "", f"{bill.transactions_dollars_month:,.0f}"),
        ("events stored", f"{bill.events_gb_year:,.0f} GB a year, kept for good", ""),
        ("heartbeats stored", f"{bill.heartbeats_gb:,.0f} GB (14 days)", ""),
        ("storage, after a year (hot, cool, cold)", "", f"{bill.storage_dollars_month_year_1:,.0f}"),
        ("storage, after five years", "", f"{bill.storage_dollars_month_year_5:,.0f}"),
    ]  # fmt: skip
    lines = ["| the archive at the design scale | how much | $/month |", "| --- | ---: | ---: |"]
    lines += [f"| {what} | {how} | {dollars} |" for what, how, dollars in rows]
    return "\n".join(lines)
