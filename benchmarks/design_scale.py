"""The design-scale bill: what each collection bills at 30 M bottles of 10 M users, by the rules of
tools/costs/billing.py, from the RU the benchmarks measured per unit of work (benchmarks/costs.py) and the
design scale's rates (README.md, docs/costs.md: a heartbeat per bottle every 30 minutes, ~1.4 K opened/closed
events a second, a late-dose sweep at the morning peak finding ~100 K bottles).

Autoscale bills each hour's peak, so the bill follows each collection's profile minute by minute over a day:
heartbeats, events and the actions feed are steady; the heartbeat tally's pages land in TALLY_MINUTES of each hour
(its roll-up hours cost more: the measured hours of a roll-up block, in order); the checks' sweeps land in the
minute each runs, the late-dose one with the morning peak in MORNING_HOUR. Each hour bills its highest minute (and
at least a tenth of the maximum); the maximum to set is the day's peak with HEADROOM, and at least the storage
floor; the physical partitions follow the storage and the maximum, and price every query that fans out. What the
design does not give is an assumption, in ASSUMED_RATES, printed with the table.

The design-scale table of docs/costs.md is this module's output for the last full run
(benchmarks/suite.py writes it there and into benchmarks/RESULTS.md).
"""

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from shared.notifications.documents import KINDS
from shared.reports.aggregation import CLAUSES_PER_QUERY
from shared.settings import Settings
from shared.store import schema
from tools.costs.billing import (
    AUTOSCALE_MODE,
    PRICE,
    STANDARD,
    autoscale_billed,
    autoscale_max,
    cheaper_mode,
    monthly_cost,
    partition_peaks,
    physical_partitions,
    reserved_equivalent,
    standard_throughput,
    storage_floor,
)
from tools.costs.request_units import ALL, KB, DocumentWrite, UnitCost, combine, write_ru

BOTTLES = 30_000_000
USERS = 10_000_000
HEARTBEATS_PER_SECOND = BOTTLES / 1800  # one per bottle every 30 minutes
OPENED_PER_SECOND = CLOSED_PER_SECOND = 700  # ~1.4 K opened/closed events a second, half each
CHANGES_PER_SECOND = HEARTBEATS_PER_SECOND + OPENED_PER_SECOND + CLOSED_PER_SECOND
SECONDS_PER_DAY = 86_400
HEADROOM = 1.2  # the autoscale maximum to set: the day's peak plus a fifth, rounded up to 1,000 RU/s
# Standard (manual) throughput to set: the day's busiest minute plus a twentieth, for the seconds within it (the
# steady load is thousands of small requests a second, so a minute's seconds differ by far less), rounded up to
# 100 RU/s; unlike autoscale's headroom it is billed every hour (tools.costs.rules.RULES: standard (manual) throughput).
STANDARD_HEADROOM = 1.05
# The busiest physical partition's load against the average (tools.costs.rules.ASSUMPTIONS): shard keys hash millions of
# bottles and users, so 1.0; standard throughput must cover it (T / P a partition), dynamic autoscale bills it.
PARTITION_SKEW = 1.0
TALLY_FIRST_MINUTE = 10  # an hour is counted SETTLE (10 minutes) after it ends (shared/reports/tally.py)
TALLY_MINUTES = 15  # a pass's pages land in about 15 minutes of each hour
MORNING_HOUR = 7  # the hour (UTC) of the morning late-dose peak
SWEEP_MINUTES = {"late_dose": 5, "left_open": 1, "silent": 5}  # each check runs every so many minutes
REPORTS_PARTITIONS = 64  # the tally's partitions at this scale (docs/costs.md: Throughput to deploy)
MEASURED_ROLLUP_HOUR = 18  # the measured block's roll-up reads the day's first 18 hours (costs.consumer_costs)

# Rates the design does not give, and what the table assumes for them.
ASSUMED_RATES = {
    "late doses found by a sweep in the morning hour": 100_000.0,  # the design scale: ~100 K in the peak's sweep
    "late doses found by a sweep in any other hour": 10_000.0,  # a tenth of the morning's
    "bottles left open per second": OPENED_PER_SECOND * 0.01,  # one opening in a hundred left open
    "bottles going silent per second": BOTTLES * 0.01 / SECONDS_PER_DAY,  # one bottle in a hundred a day
    "minutes a sweep's work takes": 1.0,  # the check partitions run side by side, each within its minute
}


BLOCK, EVERY_HOUR, STAGGERED = "block", "every hour", "staggered"  # when a user's day is rolled up


@dataclass(frozen=True)
class Variant:
    """A way of running the same work, for the alternatives table. `status`: the app runs it this way (the bill's
    own row, "yes"), can by its settings, or it is modelled only (what it would change said in `name`).

    - tally_minutes: how long each hour's tally pages take (None: the app's REPORTS_TALLY_SPREAD_MINUTES, the
      pass paced over them; unpaced, it reads as fast as it can: about TALLY_MINUTES);
    - rollup: BLOCK (every user's day at the hours that end a block of DAILY_ROLLUP_HOURS), STAGGERED (each user
      at its own hour of the block: a block's share of the users a pass, the same lag), EVERY_HOUR (every user's
      day at every pass: within an hour of its hours); None: as the app's DAILY_ROLLUP_STAGGERED has it;
    - reports_by_in: the tally's reads of the report collections by `_id` an `$in` of a page's users (the app's
      earlier code: each query fans out over the partitions of its users) instead of one user (one shard key
      value) a query, as the app reads them (shared/reports/aggregation.py);
    - sweep_spread: the minutes a partition's late-dose sweep spreads its work over (None: the app's
      CHECK_LATE_DOSES_SPREAD_MINUTES; 0: unpaced), when it fills a batch a minute
      (shared/notifications/checks/pacing.py pace_of); an unpaced sweep's work takes about a minute
      (ASSUMED_RATES), the other checks' too;
    - heartbeat_insert: each heartbeat inserted as its own document with a TTL (HEARTBEAT_INSERT_RU), the tally
      reading each of them instead of each bottle's ring once an hour; with `keep_last_heard` the heartbeat
      document is still updated at each heartbeat (the silent check needs the last time within its 60 minutes),
      without it the silent check has nothing to sweep (a feature lost). Their storage is left out;
    - heartbeats_per_write: each device uploads this many heartbeats in one request (the API takes a batch, and a
      batch's heartbeats are one write of the heartbeat document): a device contract change, and SILENT_MINUTES
      must then exceed the upload interval;
    - settings: the app's settings this way changes (a row the app runs by a setting);
    - keeps_every_feature: False for a row that loses a feature or changes the device contract (the floor,
      `floor`, is the cheapest row that keeps them all)."""

    name: str
    tally_minutes: int | None = None
    rollup: str | None = None
    reports_by_in: bool = False
    sweep_spread: int | None = None
    heartbeat_insert: bool = False
    keep_last_heard: bool = True
    heartbeats_per_write: int = 1
    settings: tuple[tuple[str, Any], ...] = ()
    keeps_every_feature: bool = True
    status: str = "modelled"

    def applied(self, settings: Settings) -> Settings:
        """The settings this way runs with: the app's, with this row's own."""
        return settings.model_copy(update=dict(self.settings)) if self.settings else settings

    def minutes(self, settings: Settings) -> int:
        if self.tally_minutes is not None:
            return self.tally_minutes
        return settings.reports_tally_spread_minutes or TALLY_MINUTES

    def rollups(self, settings: Settings) -> str:
        if self.rollup is not None:
            return self.rollup
        return STAGGERED if settings.daily_rollup_staggered else BLOCK

    def sweep_minutes(self, kind: str, found: float, settings: Settings) -> float:
        """How long a sweep that finds `found` bottles spreads its work: a paced late-dose sweep over its spread
        (each check partition counts its batches and paces them when they fill one a minute), anything else
        about a minute."""
        work = ASSUMED_RATES["minutes a sweep's work takes"]
        spread = settings.check_late_doses_spread_minutes if self.sweep_spread is None else self.sweep_spread
        batches = math.ceil(found / settings.check_partitions / settings.check_batch_size)
        if kind != "late_dose" or not spread or batches < spread:
            return work
        return max(float(spread), work)


# An insert of a heartbeat under 1 KB: 4.95 RU and 0.2 a term for `_id`, the shard key, `_ts` (its TTL) and the
# tally's (ub, user_id) index (tools.costs.rules.RULES: write, by size; create).
HEARTBEAT_INSERT_RU = DocumentWrite(None, 300, terms_inserted=4).ru()

TODAY = Variant(
    "the app: the tally paced (REPORTS_TALLY_SPREAD_MINUTES) reading reports one user a query, roll-ups "
    "staggered (DAILY_ROLLUP_STAGGERED), the late-dose sweep paced (CHECK_LATE_DOSES_SPREAD_MINUTES)",
    status="yes",
)
ALTERNATIVES = (
    Variant(
        "before: the tally unpaced (~15 minutes) reading reports by `$in` of a page's users, every user's roll-up "
        "at the block's end, the sweeps unpaced",
        TALLY_MINUTES,
        BLOCK,
        reports_by_in=True,
        sweep_spread=0,
        status="no (the code before)",
    ),
    Variant(
        "the tally paced, every user's roll-up at the block's end",
        rollup=BLOCK,
        status="DAILY_ROLLUP_STAGGERED=false",
    ),
    Variant(
        "the late-dose sweep unpaced (its morning peak in a minute)",
        sweep_spread=0,
        status="CHECK_LATE_DOSES_SPREAD_MINUTES=0",
    ),
    Variant(
        "the tally's report reads an `$in` of a page's users (fanning out)",
        reports_by_in=True,
        status="no (the code before)",
    ),
    TODAY,
    Variant("+ daily reports within an hour (every user's day at every pass)", rollup=EVERY_HOUR),
    Variant(
        "the tally paced over 40 minutes of each hour (the default before the whole hour)",
        settings=(("reports_tally_spread_minutes", 40),),
        status="REPORTS_TALLY_SPREAD_MINUTES=40",
    ),
    Variant(
        "+ the tally's pages of 2,000 heartbeat documents (fewer sorted queries over every partition)",
        settings=(("reports_page_size", 2000),),
        status="REPORTS_PAGE_SIZE=2000",
    ),
    Variant(
        "+ the tally paced over the hour in pages of 2,000, and the late-dose sweep over 5 minutes",
        settings=(("reports_page_size", 2000), ("check_late_doses_spread_minutes", 5)),
        status="REPORTS_PAGE_SIZE=2000, CHECK_LATE_DOSES_SPREAD_MINUTES=5",
    ),
    Variant(
        "+ a heartbeat inserted with a TTL, the heartbeat document's update kept",
        heartbeat_insert=True,
    ),
    Variant(
        "+ a heartbeat inserted with a TTL, no update (the silent check lost)",
        heartbeat_insert=True,
        keep_last_heard=False,
        keeps_every_feature=False,
    ),
    Variant(
        "+ heartbeats uploaded two at a time, every hour (a device contract change; SILENT_MINUTES above 60)",
        heartbeats_per_write=2,
        keeps_every_feature=False,
        status="no (the devices' contract)",
    ),
    Variant(
        "+ heartbeats uploaded three at a time, every 90 minutes (likewise; SILENT_MINUTES above 90)",
        heartbeats_per_write=3,
        keeps_every_feature=False,
        status="no (the devices' contract)",
    ),
)

HEARTBEATS, EVENTS, FEED, TALLY, CHECKS, FLOOR = (
    "heartbeats",
    "opened/closed events",
    "actions feed",
    "heartbeat tally",
    "notification checks",
    "0.1 x maximum",
)
WORK = (HEARTBEATS, EVENTS, FEED, TALLY, CHECKS, FLOOR)


@dataclass(frozen=True)
class Measured:
    """What the benchmarks measured, per unit of work (benchmarks/costs.py)."""

    heartbeat: UnitCost
    opened: UnitCost
    closed: UnitCost
    actions_feed: UnitCost  # per source change (heartbeat or action): the actions feed's work
    tally: Sequence[UnitCost]  # per source change: the heartbeat tally's, one per hour of a roll-up block, in order
    consumer_run: UnitCost  # per report partition run: leases, empty polls
    swept: Mapping[str, UnitCost]  # per bottle in trouble a sweep finds, beyond a run's fixed cost, by check kind
    sweep_run: Mapping[str, UnitCost]  # per check run that finds nobody, by check kind
    sizes: Mapping[str, float]  # average BSON bytes of a document by collection; its index's as "<collection> index"
    hourly_reports_per_user_hour: float = 1.0  # user-hours written per user per hour (every user is active)
    calls: Mapping[str, float] = field(default_factory=dict)  # database commands per unit of work, by kind


@dataclass
class Row:
    collection: str
    work: list[str] = field(default_factory=list)
    storage_gb: float = 0.0  # data and index, after a year
    storage_note: str = ""
    peak: float = 0.0  # the day's highest RU/s (a minute's)
    average: float = 0.0  # RU/s over the day
    maximum: int = 0  # the autoscale maximum to set
    standard: int = 0  # the standard (manual) throughput to set instead
    mode: str = AUTOSCALE_MODE  # the cheaper of the two (tools.costs.billing.cheaper_mode), which the deployment takes
    partitions: int = 1  # physical partitions after a year
    billed: float = 0.0  # what its busiest hour bills on autoscale, RU/s
    billed_average: float = 0.0  # what an hour bills on autoscale, averaged over the day's hours
    hourly_billed: list[float] = field(default_factory=list)  # each hour's autoscale bill (dynamic scaling)
    by_work: dict[str, float] = field(default_factory=dict)  # RU/s at the peak by kind of work (WORK)

    @property
    def floor(self) -> int:
        return storage_floor(self.storage_gb)

    def hourly(self, mode: str | None = None) -> list[float]:
        """What each hour of the day bills, RU/s, in `mode` (None: the row's own)."""
        if (mode or self.mode) == STANDARD:
            return [float(self.standard)] * len(self.hourly_billed)
        return list(self.hourly_billed)

    def monthly(self, regions: int = 1, mode: str | None = None) -> float:
        """Dollars a month in `mode` (None: the row's own, the cheaper)."""
        mode = mode or self.mode
        billed = self.hourly(mode)
        average = sum(billed) / len(billed) if billed else 0.0
        return monthly_cost(average, self.storage_gb, regions, mode=mode)


_ORDER = (
    schema.BOTTLE_HEARTBEATS,
    schema.BOTTLES,
    schema.BOTTLE_ACTIONS,
    schema.USER_HOURLY_REPORTS,
    schema.USER_DAILY_REPORTS,
    schema.NOTIFICATIONS,
    schema.LEASES,
)

Load = list[tuple[str, UnitCost, float]]  # (kind of work, RU per unit, units per second)


def minute_load(
    measured: Measured,
    settings: Settings,
    hour: int,
    minute: int,
    actions_partitions: int,
    *,
    variant: Variant = TODAY,
) -> Load:
    """The work under way in one minute of the day, as units per second."""
    heartbeat = measured.heartbeat
    if variant.heartbeat_insert:
        kept = measured.heartbeat.base.get(schema.BOTTLE_HEARTBEATS, 0.0) if variant.keep_last_heard else 0.0
        heartbeat = UnitCost({schema.BOTTLE_HEARTBEATS: HEARTBEAT_INSERT_RU + kept})
    load: Load = [
        (HEARTBEATS, heartbeat, HEARTBEATS_PER_SECOND / variant.heartbeats_per_write),
        (EVENTS, measured.opened, OPENED_PER_SECOND),
        (EVENTS, measured.closed, CLOSED_PER_SECOND),
        (FEED, measured.actions_feed, CHANGES_PER_SECOND),
        # The actions feed: a run per physical partition every minute; the tally: a run per partition an hour.
        (FEED, measured.consumer_run, actions_partitions / 60 + REPORTS_PARTITIONS / 3600),
    ]
    minutes = variant.minutes(settings)
    if measured.tally and (minute - TALLY_FIRST_MINUTE) % 60 < minutes:
        of_hour = tally_of_hour(measured.tally, hour, rollup=variant.rollups(settings))
        tally = tally_at_scale(of_hour, settings, by_in=variant.reports_by_in)
        load.append((TALLY, tally, CHANGES_PER_SECOND * 60 / minutes))
        if variant.heartbeat_insert:  # each heartbeat read by the tally, not each bottle's ring once an hour
            reads = UnitCost({schema.BOTTLE_HEARTBEATS: HEARTBEATS_PER_SECOND * 3600 - BOTTLES})
            load.append((TALLY, reads, 1 / (minutes * 60)))
    for kind in KINDS:
        every = SWEEP_MINUTES[kind]
        found = _found_per_sweep(kind, hour)
        span = min(variant.sweep_minutes(kind, found, settings), every)  # a sweep's work, within its schedule
        if minute % every >= span:
            continue
        if kind in measured.swept:
            load.append((CHECKS, swept_at_scale(measured, kind, settings), found / (span * 60)))
        if kind in measured.sweep_run:
            load.append((CHECKS, measured.sweep_run[kind], 1 / (span * 60)))
    return load


def _found_per_sweep(kind: str, hour: int) -> float:
    if kind == "late_dose":
        morning = hour == MORNING_HOUR
        return ASSUMED_RATES[f"late doses found by a sweep in {'the morning hour' if morning else 'any other hour'}"]
    per_second = ASSUMED_RATES[
        "bottles left open per second" if kind == "left_open" else "bottles going silent per second"
    ]
    return per_second * SWEEP_MINUTES[kind] * 60


def tally_at_scale(measured: UnitCost, settings: Settings, *, by_in: bool = False) -> UnitCost:
    """The tally's RU per change with its queries counted as the design scale pages them (the benchmark's fleet
    fills a page or two a pass, so its query count per change says little): a pass reads every heartbeat document
    in full pages of REPORTS_PAGE_SIZE, each page one sorted query over every physical partition, and two more to
    end each of REPORTS_PARTITIONS ranges; each page reads its users' reports one user a query (in the measured
    base: no fan-out), or with `by_in` one `$in` per CLAUSES_PER_QUERY of the page's users on each report
    collection the pass reads (the hourly reports', and the daily reports' in a roll-up hour)."""
    pages_per_hour = BOTTLES / settings.reports_page_size + 2 * REPORTS_PARTITIONS
    per_change = pages_per_hour / (CHANGES_PER_SECOND * 3600)
    users_per_page = settings.reports_page_size * USERS / BOTTLES
    chunks = math.ceil(users_per_page / CLAUSES_PER_QUERY)
    queries: dict[str, dict[int, float]] = {}
    for name, by_reach in measured.queries.items():
        if ALL in by_reach:
            queries[name] = {ALL: per_change}
    if by_in:
        read = {name for name in REPORTS if measured.base.get(name)} | {
            name for name, by_reach in measured.queries.items() if by_reach and ALL not in by_reach
        }
        for name in read:
            queries[name] = {round(users_per_page / chunks): per_change * chunks}
    return UnitCost(dict(measured.base), queries)


REPORTS = (schema.USER_HOURLY_REPORTS, schema.USER_DAILY_REPORTS)


def swept_at_scale(measured: Measured, kind: str, settings: Settings) -> UnitCost:
    """RU per bottle in trouble a sweep finds beyond its run's fixed cost, its queries as the design scale pages
    them: one more sorted query over every physical partition per CHECK_BATCH_SIZE bottles found."""
    found = measured.swept[kind]
    swept = {name for name, by_reach in measured.sweep_run.get(kind, UnitCost()).queries.items() if ALL in by_reach}
    pages = UnitCost({}, {name: {ALL: 1 / settings.check_batch_size} for name in swept})
    return combine([(UnitCost(dict(found.base), {}), 1.0), (pages, 1.0)])


def unit_costs(measured: Measured, settings: Settings) -> dict[str, UnitCost]:
    """RU per unit of work as the design scale has it: per heartbeat, opened and closed event, report change
    (the actions feed and the tally, over a roll-up block) and bottle in trouble a sweep finds."""
    tally = [tally_at_scale(hour, settings) for hour in measured.tally]
    change = combine([(measured.actions_feed, 1.0), *[(hour, 1 / len(tally)) for hour in tally]])
    return {
        "heartbeat": measured.heartbeat,
        "opened": measured.opened,
        "closed": measured.closed,
        "consumer change": change,
        **{kind: swept_at_scale(measured, kind, settings) for kind in measured.swept},
    }


def tally_of_hour(tally: Sequence[UnitCost], hour: int, *, rollup: str = BLOCK) -> UnitCost:
    """The tally's cost per change in the pass that runs in `hour` (UTC), from the measured hours of a block
    (benchmarks/costs.py measures them with every user's roll-up at the block's end, MEASURED_ROLLUP_HOUR):

    - BLOCK: the block's roll-up hour (the one that writes the most daily reports) at the hours that end a block
      (00, 06, 12, 18 with six-hour blocks), the others in turn;
    - EVERY_HOUR: the roll-up hour at every hour;
    - STAGGERED: every hour the block's average (each pass rolls up a block's share of the users), and in the
      hours whose users' blocks straddle midnight (1 to DAILY_ROLLUP_HOURS - 1) their share of a second roll-up,
      of today's first hours: a daily report written, and that many hourly reports read (the measured roll-up
      read MEASURED_ROLLUP_HOUR of them)."""
    rollup_hour = max(range(len(tally)), key=lambda i: tally[i].base.get(schema.USER_DAILY_REPORTS, 0.0))
    if rollup == EVERY_HOUR:
        return tally[rollup_hour]
    if rollup == BLOCK:
        return tally[(rollup_hour + hour) % len(tally)]
    share = 1 / len(tally)
    average = combine([(cost, share) for cost in tally])
    if not 0 < hour < len(tally):
        return average
    plain = min(tally, key=lambda cost: cost.base.get(schema.USER_DAILY_REPORTS, 0.0))
    extra = combine([(tally[rollup_hour], 1.0), (plain, -1.0)], floor_at_zero=True)
    hourly_reads = extra.base.get(schema.USER_HOURLY_REPORTS, 0.0) * hour / MEASURED_ROLLUP_HOUR
    daily_write = extra.base.get(schema.USER_DAILY_REPORTS, 0.0)
    second = UnitCost({schema.USER_HOURLY_REPORTS: hourly_reads, schema.USER_DAILY_REPORTS: daily_write})
    return combine([(average, 1.0), (second, share)])


def table(measured: Measured, settings: Settings | None = None, variant: Variant = TODAY) -> list[Row]:
    settings = variant.applied(settings or Settings())
    rows = {name: Row(name) for name in _ORDER}
    _storage(rows, measured, settings)
    partitions = {name: physical_partitions(row.storage_gb, 0) for name, row in rows.items()}
    for _ in range(20):  # the partitions price the fan-out, which raises the peak, which adds partitions
        _bill(rows, measured, settings, partitions, variant)
        found = {name: row.partitions for name, row in rows.items()}
        if found == partitions:
            break
        partitions = found
    return [rows[name] for name in _ORDER if rows[name].peak or rows[name].storage_gb]


def _bill(
    rows: dict[str, Row], measured: Measured, settings: Settings, partitions: dict[str, int], variant: Variant
) -> None:
    per_minute: dict[str, list[float]] = {name: [] for name in rows}
    split_at: dict[str, list[dict[str, float]]] = {name: [] for name in rows}
    for hour in range(24):
        for minute in range(60):
            by_collection: dict[str, dict[str, float]] = {name: {} for name in rows}
            actions = partitions[schema.BOTTLE_ACTIONS]
            for kind, cost, rate in minute_load(measured, settings, hour, minute, actions, variant=variant):
                for name in cost.collections:
                    if name not in rows:
                        continue
                    ru = cost.ru(name, partitions[name]) * rate
                    by_collection[name][kind] = by_collection[name].get(kind, 0.0) + ru
            for name, split in by_collection.items():
                per_minute[name].append(sum(split.values()))
                split_at[name].append(split)
    for name, row in rows.items():
        series = per_minute[name]
        at = max(range(len(series)), key=series.__getitem__)
        row.peak, row.average = series[at], sum(series) / len(series)
        row.maximum = autoscale_max(row.peak, row.storage_gb, HEADROOM)
        row.standard = standard_throughput(row.peak * PARTITION_SKEW, row.storage_gb, STANDARD_HEADROOM)
        row.hourly_billed = [
            autoscale_billed(partition_peaks(max(series[h * 60 : h * 60 + 60]), partitions[name], PARTITION_SKEW),
                             row.maximum)
            for h in range(24)
        ]  # fmt: skip
        row.mode = cheaper_mode(row.standard, row.hourly_billed)
        row.partitions = physical_partitions(row.storage_gb, row.standard if row.mode == STANDARD else row.maximum)
        row.billed = max(row.hourly_billed)
        row.billed_average = sum(row.hourly_billed) / 24
        row.by_work = dict(split_at[name][at])
        if row.billed > row.peak * (1 + 1e-9):
            row.by_work = {FLOOR: row.billed}
        row.work = sorted({kind for split in split_at[name] for kind in split}, key=WORK.index)


def notifications_a_day() -> float:
    """Notifications the checks write a day at the design scale: one per bottle a sweep finds (ASSUMED_RATES)."""
    return sum(_found_per_sweep(kind, hour) * (60 // SWEEP_MINUTES[kind]) for kind in KINDS for hour in range(24))


def _storage(rows: dict[str, Row], measured: Measured, settings: Settings) -> None:
    """Data and index stored after a year: bounded collections by their count, growing ones by what a year adds
    until their retention, which the TTL then holds them at."""
    gb = 1e9
    sizes = measured.sizes
    year = 365
    notifications_per_day = notifications_a_day()
    counts = {
        schema.BOTTLE_HEARTBEATS: (BOTTLES, None, "one per bottle, bounded"),
        schema.BOTTLES: (BOTTLES, None, "one per bottle, bounded"),
        schema.BOTTLE_ACTIONS: (
            (OPENED_PER_SECOND + CLOSED_PER_SECOND) * SECONDS_PER_DAY,
            settings.actions_retention_days,
            "",
        ),
        schema.USER_HOURLY_REPORTS: (
            USERS * 24 * measured.hourly_reports_per_user_hour,
            settings.hourly_reports_retention_days,
            "",
        ),
        schema.NOTIFICATIONS: (notifications_per_day, settings.notifications_retention_days, ""),
        schema.USER_DAILY_REPORTS: (USERS, settings.daily_reports_retention_days, ""),
    }
    for name, (per_day_or_total, days, bounded) in counts.items():
        held = per_day_or_total * min(year, days) if days is not None else per_day_or_total
        note = bounded or (
            f"{days} days' worth (TTL)"
            if days is not None and days < year
            else f"a year's worth, growing to {days} days' (TTL)"
        )
        per_document = sizes.get(name, 0.0) + sizes.get(f"{name} index", 0.0)
        rows[name].storage_gb = held * per_document / gb
        rows[name].storage_note = note


def markdown(rows: list[Row]) -> str:
    lines = [
        "| collection | work | throughput to set (the cheaper) | RU/s billed at its busiest hour | average RU/s | "
        "physical partitions after a year | stored after a year (data and index) | $/month on standard | "
        "$/month on autoscale | $/month, 1 region | $/month, 2 regions |",
        "| --- | --- | --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        stored = f"{row.storage_gb:,.0f} GB ({row.storage_note})" if row.storage_note else "a few KB"
        lines.append(
            f"| `{row.collection}` | {'; '.join(row.work) or '-'} | {setting(row)} | {max(row.hourly()):,.0f} | "
            f"{row.average:,.0f} | {row.partitions:,} | {stored} | {row.monthly(1, STANDARD):,.0f} | "
            f"{row.monthly(1, AUTOSCALE_MODE):,.0f} | {row.monthly(1):,.0f} | {row.monthly(2):,.0f} |"
        )
    hour, billed = busiest_hour(rows)
    lines.append(
        f"| **total** | | | **{billed:,.0f}** at {hour:02d}:00 UTC, the account's busiest hour | "
        f"{sum(r.average for r in rows):,.0f} | {sum(r.partitions for r in rows):,} | "
        f"{sum(r.storage_gb for r in rows):,.0f} GB | {monthly(rows, 1, STANDARD):,.0f} | "
        f"{monthly(rows, 1, AUTOSCALE_MODE):,.0f} | **{monthly(rows, 1):,.0f}** | {monthly(rows, 2):,.0f} |"
    )
    split = by_work(rows)
    lines.append(
        "\nThe RU/s at each collection's busiest minute, by work: "
        + "; ".join(
            f"{kind} {split[kind]:,.0f} RU/s ({split[kind] / total(rows):.0%})" for kind in WORK if kind in split
        )
        + f". Each collection takes the cheaper of standard throughput (its busiest minute plus "
        f"{STANDARD_HEADROOM - 1:.0%}, billed every hour) and autoscale (each hour its peak, at least a tenth of "
        f"the maximum, each partition scaling on its own, at {PRICE.autoscale_factor} x the rate): "
        f"{', '.join(f'`{r.collection}`' for r in rows if r.mode == STANDARD) or 'none'} on standard. The "
        "account's busiest hour adds up what every collection bills in the same hour. TTL deletes are not billed "
        "(they use leftover RUs). Two regions bill the throughput and the storage twice. Price: "
        f"${PRICE.standard_per_100_ru_hour:.3f} per 100 RU/s per hour standard, "
        f"${PRICE.autoscale_per_100_ru_hour:.3f} autoscale, ${PRICE.storage_per_gb_month:.2f} per GB-month of "
        "storage (tools/costs/billing.py PRICE: its pages and the date read)."
    )
    return "\n".join(lines)


def setting(row: Row) -> str:
    """The throughput the deployment sets for `row`: standard RU/s, or autoscale's maximum."""
    if row.mode == STANDARD:
        return f"standard {row.standard:,} RU/s"
    return f"autoscale, max {row.maximum:,} RU/s"


def deployment_parameters(rows: list[Row]) -> dict[str, Any]:
    """The infra/main.bicep parameters that deploy the bill's choice: each collection's standard RU/s, or its
    autoscale maximum, and the tally's partitions the bill counts on (the file infra/design-scale.parameters.json
    holds them for the last full run)."""
    return {
        "cosmosStandardThroughputByCollection": {r.collection: r.standard for r in rows if r.mode == STANDARD},
        "cosmosMaxThroughputByCollection": {r.collection: r.maximum for r in rows if r.mode != STANDARD},
        "appSettingOverrides": {"REPORTS_PARTITIONS": str(REPORTS_PARTITIONS)},  # the tally's partitions it bills
    }


@dataclass(frozen=True)
class Reserved:
    """Reserved capacity, a purchase beside the bill (tools.costs.rules.RULES: reserved capacity): the standard RU/s the
    account bills in every hour of the day (an autoscale RU/s counting 1.5), what they cost a month pay as you go,
    and what a reservation of them saves at `discount`."""

    steady: float
    monthly: float

    def saving(self, discount: float) -> float:
        return self.monthly * discount


def reserved(rows: list[Row]) -> Reserved:
    """What a reservation could cover: the least, over the day's hours, of the account's bill in standard RU/s."""
    hours = [row.hourly() for row in rows]
    steady = min(
        sum(reserved_equivalent(row.mode, billed[h]) for row, billed in zip(rows, hours, strict=True))
        for h in range(24)
    )
    return Reserved(steady, monthly_cost(steady, 0.0, mode=STANDARD))


def account_hourly(rows: list[Row]) -> list[float]:
    """RU/s the whole account bills in each hour of the day, every collection in its own mode."""
    hours = [row.hourly() for row in rows]
    return [sum(row[h] for row in hours) for h in range(24)]


def busiest_hour(rows: list[Row]) -> tuple[int, float]:
    """The account's busiest hour (UTC) and what it bills, RU/s: the collections' bills in the same hour, not
    each collection's own busiest hour added up."""
    hourly = account_hourly(rows)
    hour = max(range(len(hourly)), key=hourly.__getitem__)
    return hour, hourly[hour]


def by_work(rows: list[Row]) -> dict[str, float]:
    """Billed RU/s by kind of work (WORK), at each collection's busiest minute, across the collections."""
    found: dict[str, float] = {}
    for row in rows:
        for kind, ru in row.by_work.items():
            found[kind] = found.get(kind, 0.0) + ru
    return found


def total(rows: list[Row]) -> float:
    """The billed RU/s: each collection at its busiest hour."""
    return sum(r.billed for r in rows)


def monthly(rows: list[Row], regions: int = 1, mode: str | None = None) -> float:
    """Dollars a month for Cosmos DB: every collection in `mode` (None: each in its own, the cheaper)."""
    return sum(r.monthly(regions, mode) for r in rows)


def partitions_of(rows: list[Row]) -> dict[str, int]:
    return {row.collection: row.partitions for row in rows}


def alternatives(measured: Measured, settings: Settings | None = None) -> list[list[str]]:
    """The same work run each way of ALTERNATIVES, side by side, as the model bills it (each collection on the
    cheaper of standard and autoscale): whether the app runs it so, the RU/s of the account's busiest hour, the
    monthly price against the app's and in one and two regions, and the collections the alternatives move (each
    at its own busiest hour)."""
    found = []
    today = monthly(table(measured, settings, TODAY), 1)
    for variant in ALTERNATIVES:
        rows = table(measured, settings, variant)
        _hour, billed = busiest_hour(rows)
        by_name = {row.collection: row for row in rows}
        moved = [max(by_name[name].hourly()) if name in by_name else 0.0 for name in MOVED]
        found.append(
            [
                variant.name,
                variant.status,
                f"{billed:,.0f}",
                f"{monthly(rows, 1) / today:.2f}x",
                f"{monthly(rows, 1):,.0f}",
                f"{monthly(rows, 2):,.0f}",
                " / ".join(f"{ru:,.0f}" for ru in moved),
            ]
        )
    return found


MOVED = (
    schema.BOTTLE_HEARTBEATS,
    schema.BOTTLES,
    schema.USER_HOURLY_REPORTS,
    schema.USER_DAILY_REPORTS,
    schema.NOTIFICATIONS,
)
ALTERNATIVES_HEADER = [
    "how",
    "in the app",
    "RU/s at the account's busiest hour",
    "$ vs the app",
    "$/month, 1 region",
    "$/month, 2 regions",
    "heartbeats / bottles / hourly / daily reports / notifications RU/s",
]


GOAL_DOLLARS = 20_000  # the goal: Cosmos DB's dollars a month at the design scale, one region (the earlier goal
# of 200,000 RU/s is retired: the heartbeats alone bill ~172 K under the documented charge of an update)


@dataclass(frozen=True)
class Floor:
    """The floor of the bill with every feature kept, by the model: what the heartbeats alone bill (one replace
    of the heartbeat document each: a heartbeat is one write, docs/architecture.md) in RU/s and in dollars, what
    Cosmos DB costs in all, the cheapest way of ALTERNATIVES that keeps every feature, what the storage alone costs,
    what the bill would be if an account charged an update as its insert half (the first thing a calibration run
    settles), and how many heartbeats a device would have to upload in one request (a contract change) for Cosmos
    DB to cost at most GOAL_DOLLARS."""

    heartbeat_ru: float  # RU of one heartbeat's write
    heartbeats: float  # RU/s the heartbeats alone bill (steady all day)
    heartbeats_monthly: float  # their dollars a month, on standard throughput
    today_monthly: float  # Cosmos DB's dollars a month, the app as it runs
    cheapest: str  # the cheapest way that keeps every feature
    cheapest_monthly: float
    storage_monthly: float  # the storage (data and index) alone, dollars a month
    update_as_insert_monthly: float  # Cosmos DB's dollars if an update cost its insert half alone (calibrate)
    per_write_for_goal: int | None  # heartbeats a write for at most GOAL_DOLLARS (None: not within 6)

    def lines(self) -> list[list[str]]:
        needed = "more than 6" if self.per_write_for_goal is None else f"{self.per_write_for_goal}"
        return [
            [
                "RU of a heartbeat (a replace of a document under 1 KB: 2 x 4.95, and its changed index term)",
                f"{self.heartbeat_ru:.2f}",
            ],
            ["heartbeats a second", f"{HEARTBEATS_PER_SECOND:,.0f}"],
            ["RU/s the heartbeats alone bill", f"{self.heartbeats:,.0f}"],
            ["$ a month the heartbeats alone cost (standard throughput)", f"{self.heartbeats_monthly:,.0f}"],
            ["$ a month Cosmos DB costs (the app)", f"{self.today_monthly:,.0f}"],
            ["$ a month of storage alone (data and index)", f"{self.storage_monthly:,.0f}"],
            [f"the cheapest way keeping every feature: {self.cheapest}", f"{self.cheapest_monthly:,.0f}"],
            [
                "$ a month if an update cost its insert half alone (a calibration run settles it first)",
                f"{self.update_as_insert_monthly:,.0f}",
            ],
            [f"heartbeats a device uploads in one request for at most ${GOAL_DOLLARS:,} a month", needed],
        ]


def floor(measured: Measured, settings: Settings | None = None) -> Floor:
    """The floor with every feature kept, from the model (see Floor)."""
    settings = settings or Settings()
    heartbeat_ru = measured.heartbeat.total()
    kept = [variant for variant in ALTERNATIVES if variant.keeps_every_feature]
    costs = {variant.name: monthly(table(measured, settings, variant)) for variant in kept}
    cheapest = min(costs, key=costs.__getitem__)
    needed = next(
        (
            k
            for k in range(1, 7)
            if monthly(table(measured, settings, Variant("per write", heartbeats_per_write=k))) <= GOAL_DOLLARS
        ),
        None,
    )
    rows = table(measured, settings, TODAY)
    half = dict(measured.heartbeat.base)
    if schema.BOTTLE_HEARTBEATS in half:
        half[schema.BOTTLE_HEARTBEATS] -= write_ru(KB)  # no delete of the old document: its insert half alone
    as_insert = replace(measured, heartbeat=UnitCost(half, dict(measured.heartbeat.queries)))
    heartbeats = heartbeat_ru * HEARTBEATS_PER_SECOND
    return Floor(
        heartbeat_ru=heartbeat_ru,
        heartbeats=heartbeats,
        heartbeats_monthly=monthly_cost(heartbeats * STANDARD_HEADROOM, 0.0, mode=STANDARD),
        today_monthly=costs[TODAY.name],
        cheapest=cheapest,
        cheapest_monthly=costs[cheapest],
        storage_monthly=sum(monthly_cost(0.0, row.storage_gb) for row in rows),
        update_as_insert_monthly=monthly(table(as_insert, settings, TODAY)),
        per_write_for_goal=needed,
    )


FLOOR_HEADER = ["the floor with every feature kept (benchmarks/design_scale.py floor)", "value"]
