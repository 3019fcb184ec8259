"""What a simulation run found: the device traffic's tally, the scores per kind, the report check. Shared by
the simulator that fills it and the chart that draws it."""

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tools.archive_truth import ArchiveCheck
from tools.fleet import Expected, Plan, Request


@dataclass
class Tally:
    requests: int = 0
    sent: int = 0
    stored: int = 0
    duplicates: int = 0
    expired: int = 0  # heartbeats older than the heartbeat window: accepted, not kept
    rejected: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    latencies: list[float] = field(default_factory=list)

    def record(self, request: Request, status: int, body: Any, seconds: float) -> None:
        self.requests += 1
        self.sent += request.event_count
        self.statuses[status] += 1
        self.latencies.append(seconds)
        if status == 202:
            self.stored += body["stored"]
            self.duplicates += body["duplicates"]
            self.expired += body["expired"]
        elif 400 <= status < 500:
            self.rejected += request.event_count


@dataclass
class Score:
    expected: int
    notified: int
    matched: int

    @property
    def precision(self) -> float:
        return self.matched / self.notified if self.notified else 1.0

    @property
    def recall(self) -> float:
        return self.matched / self.expected if self.expected else 1.0


@dataclass
class ReportCheck:
    """The hourly reports against the source counted directly (tools/report_truth.py)."""

    user_hours: int  # user-hours compared
    since: datetime | None  # from this hour on (older hours' heartbeats may have left the window)
    mismatches: list[str]


@dataclass
class SimulationResult:
    plan: Plan
    tally: Tally
    scores: dict[str, Score]
    misses: list[Expected]
    extras: list[Expected]
    queue_messages: int
    notifications: list[dict[str, Any]]
    device_seconds: float
    timer_seconds: dict[str, float]
    timer_runs: Counter[str]
    commands_per_event: float
    daily_report: dict[str, Any] | None
    report_check: ReportCheck
    settings_used: str
    store_lines: list[str] = field(default_factory=list)  # what the Cosmos-faithful store did, when it was the store
    archive_check: ArchiveCheck | None = None  # the archive against the source, when the run had one

    def failures(self) -> list[str]:
        """Why the run fails, if it does: the source's checks that found a difference."""
        reasons = []
        if self.report_check.mismatches:
            reasons.append(f"{len(self.report_check.mismatches)} hourly reports differ from the source")
        if self.archive_check is not None and not self.archive_check.ok:
            reasons.append(f"the archive differs from the source in {len(self.archive_check.problems)} ways")
        return reasons
