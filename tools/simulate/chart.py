"""The simulation as a picture: a row per bottle of a few users, over the simulated days in the bottle's own
local time (its schedule's time zone; UTC for every-N-hours schedules), so that an 08:00 dose sits at 08:00.
Each row shows the scheduled doses, each dose taken on time, late or missed, the notifications the app sent,
the episodes left open and silent as spans, and the hour a DST change skipped."""

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from matplotlib.dates import date2num

from tools.fleet import Bottle, DoseSlot

if TYPE_CHECKING:
    from matplotlib.axes import Axes

    from tools.simulate.result import SimulationResult

DOSE_STYLE = {  # outcome: marker, colour, legend
    "on_time": ("o", "#2ca02c", "dose taken on time"),
    "late": ("o", "#ff9f1c", "dose taken late (line: since it was due)"),
    "missed": ("X", "#d62728", "dose missed (at the time it was due)"),
}
NOTIFICATION_STYLE = {  # kind: colour, legend of the notification, legend of its episode's span
    "late_dose": ("#d62728", "late-dose notification sent", ""),
    "left_open": ("#1f77b4", "left-open notification sent", "left open: from opening (square) to closing"),
    "silent": ("#9467bd", "silent notification sent", "silent: from its last heartbeat until heard from"),
}
SLOT_COLOUR = "#9a9a9a"
DST_HATCH_COLOUR = "#555555"
NOTIFICATION_LANE = -0.3  # above the row's doses (the y axis grows downwards)
LEFT_OPEN_LANE = 0.27  # below them


@dataclass(frozen=True)
class ClockChange:
    at: datetime  # the UTC instant
    before: timedelta  # the UTC offset until then
    after: timedelta  # and from then on


@dataclass(frozen=True)
class Span:
    start: datetime
    end: datetime


@dataclass(frozen=True)
class Episode:
    """A notified episode as the app recorded it: when it began, when the notification went out, and when
    a check saw it end (or the end of the simulation, if none did)."""

    kind: str
    span: Span
    sent: datetime


def zone_of(bottle: Bottle) -> ZoneInfo:
    return ZoneInfo(bottle.schedule.get("timezone", "UTC"))


def wall_clock(moment: datetime, zone: ZoneInfo) -> datetime:
    """What a clock on the wall in `zone` shows at `moment` (naive, for plotting)."""
    return _utc(moment).astimezone(zone).replace(tzinfo=None)


def _x(moment: datetime, zone: ZoneInfo) -> float:
    """Where `moment` goes on the time axis: its wall-clock time in `zone`."""
    return float(date2num(wall_clock(moment, zone)))


def clock_changes(zone: ZoneInfo, start: datetime, end: datetime) -> list[ClockChange]:
    """The zone's UTC offset changes (DST) in [start, end), to the second."""
    changes = []
    step = timedelta(hours=1)
    at = start
    while at < end:
        nxt = min(at + step, end)
        if _offset(zone, at) != _offset(zone, nxt):
            low, high = at, nxt  # the offset changes in (low, high]
            while high - low > timedelta(seconds=1):
                middle = low + (high - low) / 2
                low, high = (middle, high) if _offset(zone, middle) == _offset(zone, low) else (low, middle)
            changes.append(ClockChange(high.replace(microsecond=0), _offset(zone, low), _offset(zone, high)))
        at = nxt
    return changes


def episodes_of(notifications: list[dict[str, Any]], bottle_id: str, end: datetime) -> list[Episode]:
    """The bottle's notified episodes, each spanning from its start to its resolution or `end`."""
    found = []
    for n in notifications:
        if n.get("bottle_id") != bottle_id or n.get("kind") not in NOTIFICATION_STYLE:
            continue
        resolved = n.get("resolved_at")
        span = Span(_utc(n["episode_start"]), _utc(resolved) if resolved is not None else end)
        found.append(Episode(n["kind"], span, _utc(n["created_at"])))
    return sorted(found, key=lambda e: (e.span.start, e.kind))


def chosen_users(result: "SimulationResult", count: int) -> list[str]:
    """Up to `count` users whose bottles between them show as many kinds of thing as there are (late and
    missed doses, each kind of notification, a DST change), then the first users; in user order."""
    plan = result.plan
    users = sorted({b.user_id for b in plan.bottles})
    owner = {b.bottle_id: b.user_id for b in plan.bottles}
    shows: dict[str, set[str]] = {user: set() for user in users}
    for n in result.notifications:
        if n.get("bottle_id") in owner:
            shows[owner[n["bottle_id"]]].add(str(n.get("kind")))
    for slot in plan.slots:
        shows[owner[slot.bottle_id]].add(slot.outcome)
    for bottle in plan.bottles:
        if clock_changes(zone_of(bottle), plan.start, plan.end):
            shows[bottle.user_id].add("dst")
    chosen: list[str] = []
    wanted = set().union(*shows.values()) - {"on_time", "due"}
    while len(chosen) < count and wanted:
        best = max((u for u in users if u not in chosen), key=lambda u: (len(shows[u] & wanted), -users.index(u)))
        if not shows[best] & wanted:
            break
        chosen.append(best)
        wanted -= shows[best]
    chosen += [u for u in users if u not in chosen][: count - len(chosen)]
    return sorted(chosen)


def row_label(bottle: Bottle) -> str:
    schedule = bottle.schedule
    if "every_hours" in schedule:
        when = f"every {schedule['every_hours']} h, UTC"
    else:
        when = f"{' '.join(schedule['times'])} {schedule['timezone']}"
    return f"{bottle.user_id}  {bottle.bottle_id}  ({when})"


def draw(result: "SimulationResult", path: Path, users: int = 4) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plan = result.plan
    chosen = chosen_users(result, users)
    rows = sorted((b for b in plan.bottles if b.user_id in chosen), key=lambda b: (b.user_id, b.bottle_id))
    slots: dict[str, list[DoseSlot]] = {}
    for slot in plan.slots:
        slots.setdefault(slot.bottle_id, []).append(slot)

    figure, axis = plt.subplots(figsize=(16, 0.42 * len(rows) + 3.4), layout="constrained")
    for row, bottle in enumerate(rows):
        zone = zone_of(bottle)
        _draw_window(axis, row, plan.start, plan.end, zone)
        first_of_user = row == 0 or rows[row - 1].user_id != bottle.user_id
        _draw_clock_changes(axis, row, clock_changes(zone, plan.start, plan.end), zone, labelled=first_of_user)
        episodes = episodes_of(result.notifications, bottle.bottle_id, plan.end)
        _draw_episodes(axis, row, episodes, zone)
        _draw_doses(axis, row, slots.get(bottle.bottle_id, []), zone)
    _draw_user_separators(axis, rows)

    axis.set_yticks(range(len(rows)), [row_label(b) for b in rows], fontsize=9)
    axis.set_ylim(len(rows) - 0.5, -0.5)
    zones = [zone_of(b) for b in rows] or [ZoneInfo("UTC")]
    hour = 1 / 24
    _time_axis(axis, min(_x(plan.start, z) for z in zones) - hour, max(_x(plan.end, z) for z in zones) + hour)
    axis.set_xlabel("local time at the bottle (its schedule's time zone; every-N-hours schedules in UTC)")
    axis.set_title(_title(result, chosen, rows), fontsize=11, loc="left")
    figure.legend(handles=_legend_handles(), loc="outside lower center", ncol=4, frameon=False, fontsize=9)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def _draw_window(axis: "Axes", row: int, start: datetime, end: datetime, zone: ZoneInfo) -> None:
    """A thin line over the simulated days, as the bottle's clock shows them."""
    axis.plot([_x(start, zone), _x(end, zone)], [row, row], color="#dddddd", lw=1, zorder=0)


def _draw_clock_changes(axis: "Axes", row: int, changes: list[ClockChange], zone: ZoneInfo, *, labelled: bool) -> None:
    """The hour a change skipped (or repeated), hatched; labelled with the shift when `labelled`."""
    for change in changes:
        before = _x(change.at - timedelta(seconds=1), zone) + 1 / 86400
        after = _x(change.at, zone)
        low, high = min(before, after), max(before, after)
        axis.fill_between(
            [low, high], row - 0.45, row + 0.45, facecolor="none", edgecolor=DST_HATCH_COLOUR, hatch="////", lw=0
        )
        if not labelled:
            continue
        shift = (change.after - change.before).total_seconds() / 3600
        axis.annotate(
            f"DST: clocks {shift:+g} h",
            (high, row - 0.45),
            xytext=(3, 0),
            textcoords="offset points",
            fontsize=7,
            color=DST_HATCH_COLOUR,
            va="top",
        )


def _draw_episodes(axis: "Axes", row: int, episodes: list[Episode], zone: ZoneInfo) -> None:
    for episode in episodes:
        colour = NOTIFICATION_STYLE[episode.kind][0]
        start, end = _x(episode.span.start, zone), _x(episode.span.end, zone)
        if episode.kind == "silent":
            axis.fill_between([start, end], row - 0.3, row + 0.3, color=colour, alpha=0.22, lw=0, zorder=1)
        elif episode.kind == "left_open":  # minutes long: a square marks where it begins
            lane = row + LEFT_OPEN_LANE
            axis.plot([start, end], [lane, lane], color=colour, lw=3, solid_capstyle="butt", zorder=3)
            axis.scatter([start], [lane], marker="s", s=22, color=colour, zorder=3)
        sent = _x(episode.sent, zone)
        axis.scatter([sent], [row + NOTIFICATION_LANE], marker="v", s=46, color=colour, edgecolor="white", zorder=4)


def _draw_doses(axis: "Axes", row: int, slots: list[DoseSlot], zone: ZoneInfo) -> None:
    due = [_x(s.due, zone) for s in slots]
    axis.scatter(due, [row] * len(due), marker="|", s=240, color=SLOT_COLOUR, zorder=2)
    for slot in slots:
        if slot.outcome == "late" and slot.taken is not None:
            when = [_x(slot.due, zone), _x(slot.taken, zone)]
            axis.plot(when, [row, row], color=DOSE_STYLE["late"][1], lw=2, zorder=2)
    for outcome, (marker, colour, _) in DOSE_STYLE.items():
        mine = [s for s in slots if s.outcome == outcome]
        at = [_x(s.taken if s.taken is not None else s.due, zone) for s in mine]
        axis.scatter(at, [row] * len(at), marker=marker, s=40, color=colour, edgecolor="white", lw=0.5, zorder=3)


def _draw_user_separators(axis: "Axes", rows: list[Bottle]) -> None:
    for row in range(1, len(rows)):
        if rows[row].user_id != rows[row - 1].user_id:
            axis.axhline(row - 0.5, color="#bbbbbb", lw=0.8)


def _time_axis(axis: "Axes", start: float, end: float) -> None:
    """Midnights labelled with the day, every 6 hours with the time; no offset label."""
    from matplotlib.dates import DateFormatter, DayLocator, HourLocator

    axis.set_xlim(start, end)
    axis.xaxis.set_major_locator(DayLocator())
    axis.xaxis.set_major_formatter(DateFormatter("00:00\n%a %d %b"))
    axis.xaxis.set_minor_locator(HourLocator(byhour=(6, 12, 18)))
    axis.xaxis.set_minor_formatter(DateFormatter("%H:%M"))
    axis.tick_params(axis="x", which="both", labelsize=8, top=True, labeltop=True)
    axis.grid(axis="x", which="major", color="#cccccc")
    axis.grid(axis="x", which="minor", color="#eeeeee")


def _title(result: "SimulationResult", chosen: list[str], rows: list[Bottle]) -> str:
    plan = result.plan
    every_user = len({b.user_id for b in plan.bottles})
    scores = "   ".join(
        f"{kind.replace('_', ' ')}: precision {s.precision:.2f}, recall {s.recall:.2f}"
        for kind, s in result.scores.items()
    )
    return (
        f"Doses and notifications of {len(chosen)} of {every_user} users ({len(rows)} of {len(plan.bottles)} "
        f"bottles), simulated {plan.start:%d %b %H:%M} to {plan.end:%d %b %Y %H:%M} UTC\n"
        f"Notifications against the injected trouble: {scores}"
    )


def _legend_handles() -> list[Any]:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles: list[Any] = [
        Line2D([], [], marker="|", ls="", markersize=14, color=SLOT_COLOUR, label="dose due (schedule)"),
    ]
    for marker, colour, label in DOSE_STYLE.values():
        handles.append(Line2D([], [], marker=marker, ls="", markersize=7, color=colour, label=label))
    for kind, (colour, sent, span) in NOTIFICATION_STYLE.items():
        handles.append(Line2D([], [], marker="v", ls="", markersize=7, color=colour, label=sent))
        if kind == "left_open":
            handles.append(Line2D([], [], marker="s", markersize=4, lw=3, color=colour, label=span))
        elif span:
            handles.append(Patch(color=colour, alpha=0.22, label=span))
    handles.append(Patch(facecolor="none", edgecolor=DST_HATCH_COLOUR, hatch="////", label="hour skipped (DST)"))
    handles.append(Line2D([], [], color="#dddddd", lw=1, label="the simulated days, in local time"))
    return handles


def _offset(zone: ZoneInfo, moment: datetime) -> timedelta:
    return moment.astimezone(zone).utcoffset() or timedelta(0)


def _utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
