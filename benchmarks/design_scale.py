"""The design-scale bill: request units per second and storage after a year per collection, from the RU the
benchmarks measured per operation (benchmarks/cost_model.py) and the rates the design names (/work/shared
DESIGN.md: 30 M bottles of 10 M users, a heartbeat per bottle every 30 minutes, ~1.4 K opened/closed events a
second). What the design does not give is an assumption, stated in ASSUMED_RATES and printed with the table.

The design-scale table of docs/costs.md is this module's output for the last full run
(benchmarks/suite.py writes it there and into benchmarks/RESULTS.md).
"""

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from shared.settings import Settings
from shared.store import schema

BOTTLES = 30_000_000
USERS = 10_000_000
HEARTBEATS_PER_SECOND = BOTTLES / 1800  # one per bottle every 30 minutes
OPENED_PER_SECOND = CLOSED_PER_SECOND = 700  # ~1.4 K opened/closed events a second, half each
SECONDS_PER_DAY = 86_400
HEADROOM = 1.2  # the autoscale maximum to set: the estimate plus a fifth, rounded up to 1,000 RU/s

# Rates the design does not give, and what the table assumes for them.
ASSUMED_RATES = {
    "late doses found per second": 100_000 / 300,  # DESIGN: ~100 K bottles in one 5-minute sweep at the peak
    "bottles left open per second": OPENED_PER_SECOND * 0.01,  # one opening in a hundred left open
    "bottles going silent per second": BOTTLES * 0.01 / SECONDS_PER_DAY,  # one bottle in a hundred a day
    "check runs per second": 1 / 60 + 2 / 300,  # left open every minute, silent and late dose every 5 minutes
    # The actions' feed: ~20 physical partitions at this throughput, each run every minute (REPORTS_SCHEDULE);
    # the heartbeat tally: REPORTS_PARTITIONS (64 at this scale), each run once an hour.
    "report partition runs per second": 20 / 60 + 64 / 3600,
}


@dataclass(frozen=True)
class Measured:
    """What the benchmarks measured, per operation, in RU (and the document sizes, in bytes)."""

    heartbeat: Mapping[str, float]  # RU by collection
    opened: Mapping[str, float]
    closed: Mapping[str, float]
    consumer_change: Mapping[str, float]  # per source change (heartbeat or action)
    consumer_run: Mapping[str, float]  # per partition run: leases, empty polls
    swept_in_trouble: Mapping[str, float]  # per bottle in trouble found by a sweep
    sweep_run: Mapping[str, float]  # per check run that finds nobody
    ttl_delete: Mapping[str, float]  # per expired document
    sizes: Mapping[str, float]  # average BSON bytes of a document, by collection
    hourly_reports_per_user_hour: float = 1.0  # user-hours written per user per hour (every user is active)


@dataclass
class Row:
    collection: str
    work: list[str] = field(default_factory=list)
    ru_per_second: float = 0.0
    storage_gb: float = 0.0
    storage_note: str = ""
    by_work: dict[str, float] = field(default_factory=dict)  # RU/s by kind of work (WORK), this collection's

    @property
    def autoscale_max(self) -> int:
        return max(1000, math.ceil(self.ru_per_second * HEADROOM / 1000) * 1000)


# The kinds of work the bill is split by, below the table.
HEARTBEATS, EVENTS, CONSUMER, CHECKS, TTL = (
    "heartbeats",
    "opened/closed events",
    "report consumer",
    "notification checks",
    "TTL deletes",
)
WORK = (HEARTBEATS, EVENTS, CONSUMER, CHECKS, TTL)


def _add(rows: dict[str, Row], ru: Mapping[str, float], rate: float, work: str, kind: str) -> None:
    for collection, per in ru.items():
        row = rows.setdefault(collection, Row(collection))
        row.ru_per_second += per * rate
        row.by_work[kind] = row.by_work.get(kind, 0.0) + per * rate
        if work not in row.work:
            row.work.append(work)


def table(measured: Measured, settings: Settings | None = None) -> list[Row]:
    settings = settings or Settings()
    rows: dict[str, Row] = {name: Row(name) for name in _ORDER}
    changes = HEARTBEATS_PER_SECOND + OPENED_PER_SECOND + CLOSED_PER_SECOND
    trouble = (
        ASSUMED_RATES["late doses found per second"]
        + ASSUMED_RATES["bottles left open per second"]
        + ASSUMED_RATES["bottles going silent per second"]
    )
    runs = ASSUMED_RATES["report partition runs per second"]
    _add(rows, measured.heartbeat, HEARTBEATS_PER_SECOND, f"{HEARTBEATS_PER_SECOND:,.0f} heartbeats/s", HEARTBEATS)
    _add(rows, measured.opened, OPENED_PER_SECOND, f"{OPENED_PER_SECOND:,} opened/s", EVENTS)
    _add(rows, measured.closed, CLOSED_PER_SECOND, f"{CLOSED_PER_SECOND:,} closed/s", EVENTS)
    _add(rows, measured.consumer_change, changes, f"{changes:,.0f} report changes/s", CONSUMER)
    _add(rows, measured.consumer_run, runs, f"{runs:.2f} report partition runs/s", CONSUMER)
    _add(rows, measured.swept_in_trouble, trouble, f"{trouble:,.0f} bottles in trouble/s", CHECKS)
    _add(rows, measured.sweep_run, ASSUMED_RATES["check runs per second"], "check runs", CHECKS)
    # Retention: at steady state as many documents expire as are written; the deletes run in the background.
    actions_per_day = (OPENED_PER_SECOND + CLOSED_PER_SECOND) * SECONDS_PER_DAY
    hourly_per_day = USERS * 24 * measured.hourly_reports_per_user_hour
    notifications_per_day = trouble * SECONDS_PER_DAY  # a notification per bottle found in trouble
    expiring = {
        schema.BOTTLE_ACTIONS: actions_per_day,
        schema.USER_HOURLY_REPORTS: hourly_per_day,
        schema.NOTIFICATIONS: notifications_per_day,
    }
    for collection, per_day in expiring.items():
        ru = measured.ttl_delete.get(collection, 0.0)
        _add(rows, {collection: ru}, per_day / SECONDS_PER_DAY, "TTL deletes", TTL)
    _storage(
        rows,
        measured,
        settings,
        actions_per_day=actions_per_day,
        hourly_per_day=hourly_per_day,
        notifications_per_day=notifications_per_day,
    )
    return [rows[name] for name in _ORDER if rows[name].ru_per_second or rows[name].storage_gb]


_ORDER = (
    schema.BOTTLE_HEARTBEATS,
    schema.BOTTLES,
    schema.BOTTLE_ACTIONS,
    schema.USER_HOURLY_REPORTS,
    schema.USER_DAILY_REPORTS,
    schema.NOTIFICATIONS,
    schema.LEASES,
)


def _storage(
    rows: dict[str, Row],
    measured: Measured,
    settings: Settings,
    *,
    actions_per_day: float,
    hourly_per_day: float,
    notifications_per_day: float,
) -> None:
    """Data (BSON) stored after a year: bounded collections by their count, growing ones by what a year adds
    until their retention, which the TTL then holds it at. Indexes come on top."""
    gb = 1e9
    sizes = measured.sizes
    year = 365
    rows[schema.BOTTLE_HEARTBEATS].storage_gb = BOTTLES * sizes.get(schema.BOTTLE_HEARTBEATS, 0) / gb
    rows[schema.BOTTLE_HEARTBEATS].storage_note = "one per bottle, bounded"
    rows[schema.BOTTLES].storage_gb = BOTTLES * sizes.get(schema.BOTTLES, 0) / gb
    rows[schema.BOTTLES].storage_note = "one per bottle, bounded"
    kept = {
        schema.BOTTLE_ACTIONS: (actions_per_day, settings.actions_retention_days),
        schema.USER_HOURLY_REPORTS: (hourly_per_day, settings.hourly_reports_retention_days),
        schema.NOTIFICATIONS: (notifications_per_day, settings.notifications_retention_days),
        schema.USER_DAILY_REPORTS: (USERS, None),
    }
    for collection, (per_day, days) in kept.items():
        held = min(year, days) if days is not None else year
        rows[collection].storage_gb = per_day * held * sizes.get(collection, 0) / gb
        rows[collection].storage_note = (
            f"{days} days' worth (TTL)" if days is not None and days < year else "a year's worth, growing"
        )


def markdown(rows: list[Row]) -> str:
    lines = [
        "| collection | work at the design scale | RU/s | autoscale max to set | stored after a year |",
        "| --- | --- | ---: | ---: | --- |",
    ]
    for row in rows:
        stored = f"{row.storage_gb:,.0f} GB ({row.storage_note})" if row.storage_note else "a few KB"
        lines.append(
            f"| `{row.collection}` | {'; '.join(row.work) or '-'} | {row.ru_per_second:,.0f} | "
            f"{row.autoscale_max:,} | {stored} |"
        )
    total = sum(r.ru_per_second for r in rows)
    storage = sum(r.storage_gb for r in rows)
    lines.append(f"| **total** | | **{total:,.0f}** | {sum(r.autoscale_max for r in rows):,} | {storage:,.0f} GB |")
    split = by_work(rows)
    lines.append(
        "\nThe same total by work: "
        + "; ".join(f"{kind} {split[kind]:,.0f} RU/s ({split[kind] / total:.0%})" for kind in WORK if kind in split)
        + "."
    )
    return "\n".join(lines)


def by_work(rows: list[Row]) -> dict[str, float]:
    """RU/s by kind of work (WORK), across the collections."""
    found: dict[str, float] = {}
    for row in rows:
        for kind, ru in row.by_work.items():
            found[kind] = found.get(kind, 0.0) + ru
    return found


def total(rows: list[Row]) -> float:
    return sum(r.ru_per_second for r in rows)
