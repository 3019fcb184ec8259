"""What a lifecycle run found (tools/lifecycle/): shared by the run that fills it, the screen and the chart."""

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime

from tools.archive_truth import ArchiveCheck
from tools.fleet import Expected
from tools.simulate.result import ReportCheck, Score, Tally

# What the bound on the actions' re-reads sums (Splitter in tools/lifecycle/splits.py, Watch in faults.py).
RE_READ_BOUND = (
    "written since each split parent's last checkpoint, plus the overlap, and what killed workers had read since theirs"
)


@dataclass
class SplitDone:
    at: datetime
    collection: str
    parent: int
    children: tuple[int, int]
    mid_page: bool  # landed inside a report worker's read of the collection


@dataclass
class Sample:
    """The state at one report dispatch: the actions' report lag, its bound (`LagBound` in tools/lifecycle/lag.py) and
    what disrupted the dispatch ("" when nothing did), and the request units metered so far."""

    at: datetime
    report_lag_minutes: float
    request_units: dict[str, float]
    lag_bound_minutes: float = 0.0
    disrupted_by: str = ""


@dataclass
class PeakDrain:
    """The late-dose notifications through the morning peaks: the most one check run had to send (what it sent
    plus what it left pending), the most consecutive runs one backlog took to drain, and each late-dose
    notification's sends: once, sent again after a kill between its send and its mark (same notification_id:
    the consumer drops it), or never (still pending at the end)."""

    cap: int = 0
    largest_backlog: int = 0
    runs_to_drain: int = 0
    sent_once: int = 0
    resent_after_kill: int = 0
    never_sent: int = 0


@dataclass
class LifecycleResult:
    days: float
    bottles: int
    users: int
    workers: int
    tally: Tally
    splits: list[SplitDone]
    partitions: dict[str, int]
    throttled: int
    throttle_episodes: int
    hourly_check: ReportCheck
    daily_check: ReportCheck
    scores: dict[str, Score]
    misses: list[Expected]
    extras: list[Expected]
    notifications_sent: Counter[str]
    peak_late_doses: int
    duplicates: list[str]
    kills: int
    redeliveries: int
    poisoned: int
    re_reads: int
    re_read_floor: int
    request_units: dict[str, float]
    samples: list[Sample]
    changes: Counter[str]
    throttle_windows: list[tuple[datetime, datetime]]
    seconds: float = 0.0
    step_seconds: dict[str, float] = field(default_factory=dict)
    peak: PeakDrain = field(default_factory=PeakDrain)
    archive_check: ArchiveCheck | None = None  # the archive against the source (tools/archive_truth.py)

    def failures(self) -> list[str]:
        """Why the run fails, if it does: the verdict's reasons."""
        reasons = []
        if self.hourly_check.mismatches:
            reasons.append(f"{len(self.hourly_check.mismatches)} hourly reports differ from the source")
        if self.daily_check.mismatches:
            reasons.append(f"{len(self.daily_check.mismatches)} daily reports differ from the source")
        for kind, s in self.scores.items():
            if s.precision < 1 or s.recall < 1:
                reasons.append(f"{kind}: precision {s.precision:.3f}, recall {s.recall:.3f}")
        if self.duplicates:
            reasons.append(f"{len(self.duplicates)} notifications sent more than once")
        if self.peak.never_sent:
            reasons.append(f"{self.peak.never_sent} late-dose notifications never sent")
        over = [s for s in self.samples if s.report_lag_minutes > s.lag_bound_minutes]
        if over:
            worst = max(over, key=lambda s: s.report_lag_minutes - s.lag_bound_minutes)
            reasons.append(
                f"the actions' reports lagged {worst.report_lag_minutes:.1f} min at {worst.at:%Y-%m-%d %H:%M},"
                f" over the bound of {worst.lag_bound_minutes:.0f} (since the last dispatch nothing disrupted;"
                f" {len(over)} dispatches over it)"
            )
        if self.re_reads > self.re_read_floor:
            reasons.append(
                f"bottle actions re-read {self.re_reads} times, over the bound of {self.re_read_floor}"
                f" ({RE_READ_BOUND})"
            )
        if self.archive_check is not None and not self.archive_check.ok:
            reasons.append(f"the archive differs from the source in {len(self.archive_check.problems)} ways")
        return reasons
