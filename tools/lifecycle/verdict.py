"""What the lifecycle run judges: the reports against their source over the whole run, the notifications sent
(duplicates among them), and the morning peaks as the late-dose checks met them."""

import json
from collections import Counter, defaultdict
from datetime import datetime, timedelta
from typing import Any

from pymongo.database import Database

from shared.settings import get_settings
from shared.store import schema
from tools.fleet import Plan
from tools.lifecycle.plan import SETTINGS
from tools.lifecycle.result import PeakDrain
from tools.report_truth import COUNTED, complete_from, reported_totals, source_totals
from tools.simulate.result import ReportCheck


def peak_late_doses(plan: Plan) -> int:
    """The most late doses that fall due (their grace ended) between two late-dose checks."""
    grace = {b.bottle_id: b.grace for b in plan.bottles}
    every = timedelta(minutes=15)  # CHECK_LATE_DOSES_SCHEDULE
    due = Counter(
        (e.episode_start + grace[e.bottle_id] - plan.start) // every for e in plan.expected if e.kind == "late_dose"
    )
    return max(due.values(), default=0)


def notifications_sent(host: Any, killed_marks: Counter[Any]) -> tuple[Counter[str], list[str]]:
    """Notifications sent to the queue by kind, and the episodes (bottle, kind, episode) notified more than once:
    under two notification ids, or one id sent again more often than kills between its send and its mark
    explain (`killed_marks`: at least once by design, the consumer drops a repeated notification_id)."""
    by_kind: Counter[str] = Counter()
    seen: dict[tuple[str, str, str], Counter[Any]] = defaultdict(Counter)
    for message in _queued_notifications(host):
        by_kind[message["kind"]] += 1
        seen[(message["bottle_id"], message["kind"], message["episode_start"])][message["notification_id"]] += 1
    duplicates = [
        f"{kind} {bottle} episode {episode} x{sum(ids.values())}"
        for (bottle, kind, episode), ids in seen.items()
        if len(ids) > 1 or any(n - 1 > killed_marks[i] for i, n in ids.items())
    ]
    return by_kind, sorted(duplicates)


def _queued_notifications(host: Any) -> list[dict[str, Any]]:
    """Every message ever sent to the host's notifications queue, parsed."""
    return [json.loads(body) for body in host.queues.get(get_settings().notifications_queue, [])]


def peak_drain(
    late_runs: list[tuple[int, int]], notifications: list[dict[str, Any]], host: Any, killed_marks: Counter[Any]
) -> PeakDrain:
    """The morning peaks as the late-dose check runs met them (`late_runs`: per run, the late-dose messages it
    sent and the late-dose notifications it left pending), and each pushed late-dose notification's sends."""
    largest = max((sent + left for sent, left in late_runs), default=0)
    longest = streak = 0  # a backlog's runs: from the first that sends or leaves some, to the first that leaves none
    for sent, left in late_runs:
        streak = streak + 1 if sent or left else 0
        longest = max(longest, streak)
        streak = streak if left else 0
    sends = Counter(m["notification_id"] for m in _queued_notifications(host) if m["kind"] == "late_dose")
    pushed = [n["_id"] for n in notifications if n["kind"] == "late_dose" and n.get("delivery") != "withheld"]
    return PeakDrain(
        cap=int(SETTINGS["QUEUE_MESSAGES_PER_PARTITION"]),
        largest_backlog=largest,
        runs_to_drain=longest,
        sent_once=sum(1 for i in pushed if sends[i] == 1),
        resent_after_kill=sum(1 for i in pushed if 1 < sends[i] <= 1 + killed_marks[i]),
        never_sent=sum(1 for i in pushed if sends[i] == 0),
    )


class ReportLedger:
    """Every user-hour and user-day compared with the source, over the whole run: a heartbeat ring keeps only its
    window (HEARTBEAT_WINDOW_HOURS), so the reports are compared once a day, for the hours the rings still hold
    and whose events have all arrived and been counted (SETTLED before the comparison), and once at the end for
    the rest. A later comparison of the same hour or day replaces an earlier one."""

    def __init__(self) -> None:
        self.hours: dict[tuple[str, datetime], str | None] = {}
        self.days: dict[tuple[str, datetime], str | None] = {}
        self.since: datetime | None = None

    def compare(self, db: Database[Any], until: datetime) -> None:
        """The hours and days the rings still hold that end by `until`."""
        since = complete_from(db, get_settings().heartbeat_window_hours)
        if since is None:
            return
        self.since = since if self.since is None else min(self.since, since)
        expected, reported = source_totals(db), reported_totals(db)
        for user, hour in expected.keys() | reported.keys():
            if since <= hour and hour + timedelta(hours=1) <= until:
                want, got = expected.get((user, hour)), reported.get((user, hour))
                differs = f"{user} {hour:%Y-%m-%d %H}:00: reported {got}, source {want}"
                self.hours[(user, hour)] = None if want == got else differs
        for (user, day), (want_day, got_day) in _daily(db, expected).items():
            if since <= day and day + timedelta(days=1) <= until:
                differs = f"{user} {day:%Y-%m-%d}: reported {got_day}, source {want_day}"
                self.days[(user, day)] = None if want_day == got_day else differs

    def checks(self) -> tuple[ReportCheck, ReportCheck]:
        """The hourly and the daily reports' check, from every comparison so far."""
        return (
            ReportCheck(len(self.hours), self.since, sorted(m for m in self.hours.values() if m)),
            ReportCheck(len(self.days), self.since, sorted(m for m in self.days.values() if m)),
        )


def _daily(db: Database[Any], hourly: dict[tuple[str, datetime], tuple[int, ...]]) -> dict[Any, tuple[Any, Any]]:
    """Per (user, UTC day): the day's hours from the source summed, and the daily report's totals."""
    expected: dict[tuple[str, datetime], list[int]] = defaultdict(lambda: [0] * len(COUNTED))
    for (user, hour), counts in hourly.items():
        for i, value in enumerate(counts):
            expected[(user, hour.replace(hour=0))][i] += value
    reported = {
        (doc["user_id"], doc["day"]): [doc.get(c, 0) for c in COUNTED] for doc in db[schema.USER_DAILY_REPORTS].find()
    }
    zero = [0] * len(COUNTED)
    return {key: (expected.get(key, zero), reported.get(key, zero)) for key in expected.keys() | reported.keys()}
