"""The lifecycle run's screen: one page of what a run found, ending with its verdict (docs/lifecycle.md,
"Reading the screen")."""

import itertools
from collections import Counter

from tools.lifecycle.result import RE_READ_BOUND, LifecycleResult, Sample
from tools.lifecycle.run import MAX_SKEW
from tools.simulate.scoring import KINDS


def describe(result: LifecycleResult) -> str:
    """The screen: the run and its changes, the store (splits, throttling, re-reads, report lag), the reports and
    the archive against their source, the notifications and the morning peak, then the verdict line."""
    failures = result.failures()
    verdict = "verdict: PASS" if not failures else "verdict: FAIL: " + "; ".join(failures)
    sections = (run_lines(result), store_lines(result), source_lines(result), notification_lines(result))
    return "\n".join([line for section in sections for line in [*section, ""]] + [verdict])


def run_lines(result: LifecycleResult) -> list[str]:
    """The run's size, its requests, its changes, its killed workers and where its wall time went."""
    return [
        f"Lifecycle: {result.days:g} days, {result.bottles} bottles of {result.users} users (a quarter at the start),"
        f" {result.workers} queue workers (clocks skewed up to {MAX_SKEW.seconds // 60} min), {result.seconds:.0f} s",
        f"requests: {result.tally.requests}  statuses: {dict(sorted(result.tally.statuses.items()))}  events stored:"
        f" {result.tally.stored}  duplicates: {result.tally.duplicates}  expired: {result.tally.expired}",
        "changes: " + ", ".join(f"{kind} {n}" for kind, n in sorted(result.changes.items())),
        f"workers killed mid-run: {result.kills}  failed deliveries (redelivered or poisoned): {result.redeliveries}"
        f"  poisoned: {result.poisoned}",
        "wall time: "
        + ", ".join(f"{name} {sec:.0f} s" for name, sec in sorted(result.step_seconds.items(), key=lambda x: -x[1])),
    ]


def store_lines(result: LifecycleResult) -> list[str]:
    """The splits and request units per collection, the throttling, the re-reads against their bound, the lag."""
    by_collection = Counter(s.collection for s in result.splits)
    mid_page = sum(s.mid_page for s in result.splits)
    lines = [f"splits: {len(result.splits)} ({mid_page} while a report worker read the partition)"]
    for name in sorted(result.partitions):
        ru = result.request_units.get(name, 0.0)
        peak = hourly_peak(result.samples, name)
        lines.append(
            f"  {name:<22} {result.partitions[name]:>3} partitions  {by_collection.get(name, 0):>3} splits"
            f"  {ru:>12,.0f} RU  peak {peak:>9,.0f} RU/h"
        )
    lines.append(f"throttled operations: {result.throttled} (in {result.throttle_episodes} episodes)")
    lines.append(
        f"bottle actions re-read: {result.re_reads} (documents the actions' feed readers received more than once,"
        f" after splits and kills); bound: {result.re_read_floor} ({RE_READ_BOUND})"
    )
    lines.append(lag_line(result.samples))
    return lines


def source_lines(result: LifecycleResult) -> list[str]:
    """The hourly and daily reports against their source (the first five that differ), then the archive's check."""
    lines = []
    for label, unit, check in (("hourly", "hour", result.hourly_check), ("daily", "day", result.daily_check)):
        since = f" from {check.since:%Y-%m-%d %H}:00" if check.since else ""
        verdict = "all match" if not check.mismatches else f"{len(check.mismatches)} differ"
        lines.append(f"{label} reports against the source ({check.user_hours} user-{unit}s{since}): {verdict}")
        lines += [f"  {m}" for m in check.mismatches[:5]]
    if result.archive_check is not None:
        lines.append(result.archive_check.describe())
    return lines


def notification_lines(result: LifecycleResult) -> list[str]:
    """Each kind's score and sends, the first episodes missed or unexpected, the morning peak, the duplicates."""
    lines = ["notifications     injected  notified  matched  precision  recall  sent"]
    for kind in KINDS:
        s = result.scores[kind]
        lines.append(
            f"  {kind:<15} {s.expected:>8}  {s.notified:>8}  {s.matched:>7}  {s.precision:>9.3f}  {s.recall:>6.3f}"
            f"  {result.notifications_sent.get(kind, 0):>4}"
        )
    for label, items in (("missed", result.misses), ("unexpected", result.extras)):
        lines += [f"  {label}: {e.kind} {e.bottle_id} episode {e.episode_start:%Y-%m-%d %H:%M:%S}" for e in items[:5]]
    drain = result.peak
    lines.append(
        f"morning peak: up to {result.peak_late_doses} late doses due between two checks; the largest backlog a"
        f" check run met: {drain.largest_backlog} (a run may send {drain.cap}), drained in up to {drain.runs_to_drain}"
        " runs"
    )
    lines.append(
        f"late-dose notifications: sent once {drain.sent_once}, sent again after a kill between send and mark (same"
        f" notification_id, the consumer drops it) {drain.resent_after_kill}, never sent {drain.never_sent}"
    )
    lines.append(f"duplicate notifications sent: {len(result.duplicates)}")
    lines += [f"  {d}" for d in result.duplicates[:5]]
    return lines


def lag_line(samples: list[Sample]) -> str:
    """The actions' report lag at the dispatches: how many were caught up, and the worst against its bound."""
    caught_up = sum(s.report_lag_minutes == 0 for s in samples)
    line = f"actions' report lag: 0 at {caught_up} of {len(samples)} dispatches"
    if caught_up == len(samples):
        return line
    over = [s for s in samples if s.report_lag_minutes > s.lag_bound_minutes]
    worst = (
        max(over, key=lambda s: s.report_lag_minutes - s.lag_bound_minutes)
        if over
        else max(samples, key=lambda s: s.report_lag_minutes)
    )
    return (
        f"{line}; {'over its bound' if over else 'the most'}: {worst.report_lag_minutes:.1f} min at"
        f" {worst.at:%Y-%m-%d %H:%M}, bound {worst.lag_bound_minutes:.0f} ({worst.disrupted_by or 'not disrupted'};"
        " the bound: the time since the last dispatch nothing disrupted)"
    )


def hourly_peak(samples: list[Sample], collection: str) -> float:
    """The most request units the collection was metered in one simulated hour (between report dispatches,
    scaled to an hour)."""
    peak = 0.0
    for before, after in itertools.pairwise(samples):
        hours = (after.at - before.at).total_seconds() / 3600
        if hours > 0:
            spent = after.request_units.get(collection, 0.0) - before.request_units.get(collection, 0.0)
            peak = max(peak, spent / hours)
    return peak
