"""What a Cosmos DB account bills for the request units it serves and the data it stores, by Microsoft's documented
rules (tools/costs/rules.py: each rule, its page and its worked example): autoscale's hourly peak or standard
throughput, whichever is cheaper, the storage floor, the physical partitions, the regions, reserved capacity and
the price; and, in a section of its own, the archive's bill. Development only: nothing here is deployed;
benchmarks/design_scale.py applies these rules to the request units tools/costs/request_units.py prices, and the
Cosmos-faithful store (tools/cosmos_store/charges.py) to its collections' throughput and partitions.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass

from tools.costs.request_units import ALL, fanout_ru, read_ru
from tools.costs.rules import PRICE_SOURCE

# --- the figures the rules use (tools/costs/rules.py: their pages) -----------------------------------------------

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


@dataclass(frozen=True)
class Price:
    """The public list price the bill uses (US dollars, a US region, pay as you go)."""

    standard_per_100_ru_hour: float = 0.008  # provisioned throughput, single write region
    autoscale_factor: float = 1.5  # autoscale's rate per 100 RU/s is 1.5 x the standard one (single write region)
    storage_per_gb_month: float = 0.25  # data and index, in each region
    source: str = PRICE_SOURCE

    @property
    def autoscale_per_100_ru_hour(self) -> float:
        return self.standard_per_100_ru_hour * self.autoscale_factor


PRICE = Price()

STANDARD, AUTOSCALE_MODE = "standard", "autoscale"  # a collection's throughput mode (CHOOSE_OFFER)


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
    (bytes per row: tests/archive/test_cost.py encodes rows of the design's sizes with shared/archive/parquet.py)."""

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
    """The archive's bill as docs/costs.md shows it (tests/archive/test_cost.py holds the page to it)."""
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
