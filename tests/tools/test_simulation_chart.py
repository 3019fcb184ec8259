"""The simulation chart as a person reads it: each bottle in its own local time, the DST change where it falls,
every dose on time, late or missed as the plan made it, and notified episodes as spans."""

import random
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from tools.fleet import Expected, Plan, make_fleet, plan_fleet
from tools.simulate.chart import ClockChange, Span, chosen_users, clock_changes, draw, episodes_of, wall_clock
from tools.simulate.in_process import SIMULATION_START
from tools.simulate.result import ReportCheck, SimulationResult, Tally
from tools.simulate.scoring import score

END = SIMULATION_START + timedelta(days=2)


@pytest.fixture(scope="module")
def plan() -> Plan:
    rng = random.Random(7)
    return plan_fleet(rng, make_fleet(rng, 60, 10), SIMULATION_START, 2)


def notified(expected: Expected, resolved_after: timedelta | None = timedelta(hours=1)) -> dict[str, Any]:
    """The notification the app records for an expected episode."""
    start = expected.episode_start
    return {
        "bottle_id": expected.bottle_id,
        "kind": expected.kind,
        "episode_start": start.replace(tzinfo=None),  # as pymongo returns it
        "created_at": (start + timedelta(minutes=65)).replace(tzinfo=None),
        "resolved_at": None if resolved_after is None else (start + resolved_after).replace(tzinfo=None),
    }


def result_of(plan: Plan, notifications: list[dict[str, Any]]) -> SimulationResult:
    scores, misses, extras = score(plan.expected, notifications)
    return SimulationResult(
        plan=plan,
        tally=Tally(),
        scores=scores,
        misses=misses,
        extras=extras,
        queue_messages=len(notifications),
        notifications=notifications,
        device_seconds=0.0,
        timer_seconds={},
        timer_runs=Counter(),
        commands_per_event=0.0,
        daily_report=None,
        report_check=ReportCheck(0, None, []),
        settings_used="",
    )


@pytest.mark.parametrize(
    ("zone", "changes"),
    [
        ("Europe/Rome", [ClockChange(datetime(2026, 3, 29, 1, 0, tzinfo=UTC), timedelta(hours=1), timedelta(hours=2))]),
        ("Europe/London", [ClockChange(datetime(2026, 3, 29, 1, 0, tzinfo=UTC), timedelta(0), timedelta(hours=1))]),
        ("America/New_York", []),  # its change was on 8 March
        ("UTC", []),
    ],
)
def test_the_dst_change_is_found_where_it_falls_in_the_simulated_days(zone, changes):
    assert clock_changes(ZoneInfo(zone), SIMULATION_START, END) == changes


def test_times_are_shown_as_the_bottles_clock_shows_them():
    rome = ZoneInfo("Europe/Rome")

    assert wall_clock(datetime(2026, 3, 28, 7, 0, tzinfo=UTC), rome) == datetime(2026, 3, 28, 8, 0)
    assert wall_clock(datetime(2026, 3, 30, 6, 0, tzinfo=UTC), rome) == datetime(2026, 3, 30, 8, 0)
    assert wall_clock(datetime(2026, 3, 30, 6, 0), ZoneInfo("UTC")) == datetime(2026, 3, 30, 6, 0)


def test_every_dose_is_on_time_late_or_missed_as_the_plan_injected_it(plan):
    grace = {b.bottle_id: b.grace for b in plan.bottles}
    late_episodes = {(e.bottle_id, e.episode_start) for e in plan.expected if e.kind == "late_dose"}
    by_outcome: dict[str, list[Any]] = {}
    for slot in plan.slots:
        by_outcome.setdefault(slot.outcome, []).append(slot)

    assert {"on_time", "late", "missed"} <= set(by_outcome)
    assert {(s.bottle_id, s.due) for s in by_outcome["late"] + by_outcome["missed"]} == late_episodes
    assert all(s.taken is None for s in by_outcome["missed"])
    assert all(s.taken > s.due + grace[s.bottle_id] for s in by_outcome["late"])
    assert all(abs(s.taken - s.due) < grace[s.bottle_id] for s in by_outcome["on_time"])
    assert all(s.due + timedelta(minutes=20) > plan.end for s in by_outcome.get("due", []))  # jitter past the end


def test_an_episode_spans_from_its_start_to_its_resolution_or_the_end(plan):
    # The plan's expectations are a set: take the first of each kind in a fixed order (`next` over the set picked
    # by hash order, which changes with PYTHONHASHSEED).
    silent = min((e for e in plan.expected if e.kind == "silent"), key=repr)
    left_open = min((e for e in plan.expected if e.kind == "left_open"), key=repr)
    notifications = [notified(silent, resolved_after=None), notified(left_open, timedelta(minutes=12))]

    silent_spans = episodes_of(notifications, silent.bottle_id, plan.end)
    open_spans = episodes_of(notifications, left_open.bottle_id, plan.end)

    assert [(e.kind, e.span) for e in silent_spans] == [("silent", Span(silent.episode_start, plan.end))]
    opened = left_open.episode_start
    assert [(e.kind, e.span) for e in open_spans] == [("left_open", Span(opened, opened + timedelta(minutes=12)))]
    assert open_spans[0].sent == opened + timedelta(minutes=65)


def test_the_users_shown_between_them_show_every_kind_of_trouble(plan):
    result = result_of(plan, [notified(e) for e in sorted(plan.expected, key=str)])
    owner = {b.bottle_id: b.user_id for b in plan.bottles}

    users = chosen_users(result, 4)

    assert len(users) == 4
    kinds = {e.kind for e in plan.expected if owner[e.bottle_id] in users}
    outcomes = {s.outcome for s in plan.slots if owner[s.bottle_id] in users}
    assert kinds == {"late_dose", "left_open", "silent"}
    assert {"late", "missed"} <= outcomes
    zones = {b.schedule.get("timezone") for b in plan.bottles if b.user_id in users}
    assert zones & {"Europe/Rome", "Europe/London"}, "no user with the DST change"


def test_the_chart_is_drawn(plan, tmp_path: Path):
    result = result_of(plan, [notified(e) for e in sorted(plan.expected, key=str)])

    path = draw(result, tmp_path / "charts" / "simulation.png")

    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert path.stat().st_size > 50_000
