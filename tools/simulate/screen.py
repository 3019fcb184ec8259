"""The simulation's screen: the device traffic, the settings, the timer runs, the notifications' scores, the
reports and the archive against their source, a daily report and the store's lines."""

from typing import Any

from tools.simulate.result import ReportCheck, Score, SimulationResult, Tally


def describe_ingestion(tally: Tally, seconds: float) -> list[str]:
    """The requests' statuses, the events sent and what became of them, the throughput over `seconds` and latency."""
    latencies = sorted(tally.latencies) or [0.0]
    p50, p99 = latencies[len(latencies) // 2], latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    return [
        f"requests: {tally.requests}  statuses: {dict(sorted(tally.statuses.items()))}",
        f"events sent: {tally.sent}  stored: {tally.stored}  duplicates: {tally.duplicates}  "
        f"expired: {tally.expired}  rejected: {tally.rejected}",
        f"throughput: {tally.sent / seconds if seconds else 0:,.0f} events/s over {seconds:.1f} s of requests  "
        f"(latency p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms)",
    ]


def describe(result: SimulationResult) -> str:
    """The screen of an in-process run (the verdict line is the command's)."""
    plan, lines = result.plan, []
    lines.append(
        f"Simulated {len(plan.bottles)} bottles of {len({b.user_id for b in plan.bottles})} users from "
        f"{plan.start:%Y-%m-%d %H:%M} to {plan.end:%Y-%m-%d %H:%M} UTC"
    )
    lines += describe_ingestion(result.tally, result.device_seconds)
    lines.append(f"database commands per event: {result.commands_per_event:.2f}")
    lines.append(result.settings_used)
    runs = ", ".join(
        f"{name} x{count} ({result.timer_seconds[name]:.1f} s)" for name, count in sorted(result.timer_runs.items())
    )
    lines.append(f"timer runs: {runs}")
    lines.append("")
    lines.append("notifications     injected  notified  matched  precision  recall")
    for kind, s in result.scores.items():
        lines.append(
            f"  {kind:<15} {s.expected:>8}  {s.notified:>8}  {s.matched:>7}  {s.precision:>9.3f}  {s.recall:>6.3f}"
        )
    total = Score(*(sum(getattr(s, f) for s in result.scores.values()) for f in ("expected", "notified", "matched")))
    lines.append(
        f"  {'all':<15} {total.expected:>8}  {total.notified:>8}  {total.matched:>7}  "
        f"{total.precision:>9.3f}  {total.recall:>6.3f}"
    )
    lines.append(f"queue messages sent: {result.queue_messages}")
    for label, items in (("missed", result.misses), ("unexpected", result.extras)):
        for item in items[:5]:
            lines.append(f"  {label}: {item.kind} {item.bottle_id} episode {item.episode_start:%Y-%m-%d %H:%M:%S}")
    lines.append("")
    lines += describe_report_check(result.report_check)
    if result.archive_check is not None:
        lines.append(result.archive_check.describe())
    lines += describe_report(result.daily_report)
    if result.store_lines:
        lines += ["", *result.store_lines]
    return "\n".join(lines)


def describe_report_check(check: ReportCheck) -> list[str]:
    """The hourly reports against their source: "all match", or how many differ and the first five."""
    since = f" from {check.since:%Y-%m-%d %H}:00" if check.since else ""
    verdict = "all match" if not check.mismatches else f"{len(check.mismatches)} differ"
    lines = [f"hourly reports against the source ({check.user_hours} user-hours{since}): {verdict}"]
    return lines + [f"  {mismatch}" for mismatch in check.mismatches[:5]]


def describe_report(report: dict[str, Any] | None) -> list[str]:
    """A daily report's totals, then each bottle's (a counter the stored report leaves out is 0)."""
    if report is None:
        return ["daily report: none found"]
    totals = ", ".join(f"{k} {report.get(k, 0)}" for k in ("opened", "closed", "doses", "pills_taken", "heartbeats"))
    lines = [f"daily report {report['_id']}: {totals}"]
    for entry in report.get("bottles", []):
        counts = ", ".join(f"{k} {entry.get(k, 0)}" for k in ("opened", "closed", "doses", "pills_taken", "heartbeats"))
        lines.append(f"  {entry.get('bottle_id')} ({entry.get('medication')}): {counts}")
    return lines
