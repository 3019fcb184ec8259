"""The simulation as a picture: for a few users, each bottle's scheduled slots, doses taken and the
notifications sent, over the simulated days."""

from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tools.simulation_result import SimulationResult

MARKERS = {
    "late_dose": ("X", "#d62728", "late dose"),
    "left_open": ("s", "#ff7f0e", "left open"),
    "silent": ("v", "#9467bd", "silent"),
}


def draw(result: "SimulationResult", path: Path, users: int = 4) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.dates import AutoDateLocator, ConciseDateFormatter, date2num

    plan = result.plan
    chosen_users = sorted({b.user_id for b in plan.bottles})[:users]
    rows = sorted((b for b in plan.bottles if b.user_id in chosen_users), key=lambda b: (b.user_id, b.bottle_id))
    row_of = {b.bottle_id: i for i, b in enumerate(rows)}
    slots, doses = defaultdict(list), defaultdict(list)
    for bottle_id, at in plan.slots:
        if bottle_id in row_of:
            slots[bottle_id].append(at)
    for bottle_id, at in plan.doses:
        if bottle_id in row_of:
            doses[bottle_id].append(at)

    figure, axis = plt.subplots(figsize=(14, 0.45 * len(rows) + 2.2))
    for bottle_id, row in row_of.items():
        xs = [date2num(t) for t in slots[bottle_id]]
        axis.scatter(xs, [row] * len(xs), marker="|", s=260, color="#bbbbbb", zorder=1)
        xs = [date2num(t) for t in doses[bottle_id]]
        axis.scatter(xs, [row] * len(xs), marker="o", s=22, color="#2ca02c", zorder=2)
    for kind, (marker, colour, label) in MARKERS.items():
        points = [
            (date2num(_utc(n["episode_start"])), row_of[n["bottle_id"]])
            for n in result.notifications
            if n.get("kind") == kind and n.get("bottle_id") in row_of
        ]
        if points:
            axis.scatter(
                [x for x, _ in points],
                [y for _, y in points],
                marker=marker,
                s=70,
                color=colour,
                label=f"{label} notification",
                zorder=3,
            )
    axis.scatter([], [], marker="|", s=260, color="#bbbbbb", label="scheduled dose")
    axis.scatter([], [], marker="o", s=22, color="#2ca02c", label="dose taken")
    axis.set_yticks(range(len(rows)), [f"{b.user_id} / {b.bottle_id} ({_schedule(b.schedule)})" for b in rows])
    axis.set_ylim(-1, len(rows))
    axis.invert_yaxis()
    axis.set_xlim(date2num(plan.start), date2num(plan.end))
    locator = AutoDateLocator()
    axis.xaxis.set_major_locator(locator)
    axis.xaxis.set_major_formatter(ConciseDateFormatter(locator))
    axis.grid(axis="x", color="#eeeeee")
    axis.set_xlabel("simulated time (UTC)")
    summary = "  ".join(f"{k}: precision {s.precision:.2f} recall {s.recall:.2f}" for k, s in result.scores.items())
    axis.set_title(f"Doses against schedule, with notifications (first {len(chosen_users)} users)\n{summary}")
    axis.legend(loc="upper center", bbox_to_anchor=(0.5, -0.6 / (0.45 * len(rows) + 2.2)), ncol=5, frameon=False)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def _schedule(schedule: dict[str, Any]) -> str:
    if "every_hours" in schedule:
        return f"every {schedule['every_hours']} h"
    return f"{' '.join(schedule['times'])} {schedule['timezone']}"


def _utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
