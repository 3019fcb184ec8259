"""The lifecycle run's PNG: above, how far the actions' reports lag behind at each report dispatch against the
verdict's bound (the time since the last dispatch nothing disrupted), with the splits and throttling episodes
marked; below, the request units per second each collection was metered,
averaged between dispatches (simulated seconds), over the run's days."""

import itertools
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tools.lifecycle.result import LifecycleResult


def draw(result: "LifecycleResult", path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples = result.samples
    start = samples[0].at if samples else None
    figure, (lag_axis, ru_axis) = plt.subplots(2, 1, figsize=(14, 7.5), sharex=True, layout="constrained")
    if start is not None:
        first: datetime = start

        def day(moment: datetime) -> float:
            return (moment - first).total_seconds() / 86_400

        days = [day(s.at) for s in samples]
        lag_axis.plot(days, [s.lag_bound_minutes for s in samples], lw=1, color="tab:gray", ls="--", label="bound")
        lag_axis.plot(days, [s.report_lag_minutes for s in samples], lw=1, color="tab:blue", label="lag")
        lag_axis.legend(fontsize=8, loc="upper left", frameon=False)
        for split in result.splits:
            style = "--" if split.mid_page else ":"
            lag_axis.axvline(day(split.at), color="tab:red", lw=0.8, ls=style, alpha=0.6)
        for episode in result.throttle_windows:
            lag_axis.axvspan(day(episode[0]), day(episode[1]), color="tab:orange", alpha=0.25)
        names = sorted({name for s in samples for name in s.request_units})
        for name in names:
            xs, ys = [], []
            for before, after in itertools.pairwise(samples):
                seconds = (after.at - before.at).total_seconds()
                if seconds > 0:
                    xs.append(day(after.at))
                    spent = after.request_units.get(name, 0.0) - before.request_units.get(name, 0.0)
                    ys.append(spent / seconds)
            ru_axis.plot(xs, ys, lw=0.9, label=name)
        ru_axis.legend(fontsize=8, ncol=4, loc="upper left", frameon=False)
    lag_axis.set_ylabel("actions' report lag (minutes)\nand its bound (dashed)")
    lag_axis.set_title(
        f"Lifecycle run: {result.days:g} days, {result.bottles} bottles, {len(result.splits)} splits (red: dashed "
        "mid-page, dotted between runs), throttling episodes in orange",
        fontsize=10,
        loc="left",
    )
    ru_axis.set_ylabel("request units per simulated second")
    ru_axis.set_xlabel("day of the run")
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path
