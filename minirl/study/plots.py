"""The study's own plots, one pair per task (the per-task evaluation plots: minirl.eval.plots).

- gap_<task>.png: Pass@(1,T) of each RL arm minus base, against T, with a ±1 stderr band, and
  the share of instances solvable within T on a second axis (a gap cannot exist where no policy
  can succeed);
- where_<task>.png: per RL arm, the change against base in single-step optimal-action rate, in
  P(success | >= 1 error) and in success on the longest horizons, with ±1 stderr bars.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen before pyplot loads)

from minirl.study.claims import TaskFindings  # noqa: E402


def gap_plot(task: str, found: TaskFindings, path: Path) -> Path:
    gaps = found.budget.gaps
    ts = found.results.meta.ts
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for arm, gap in gaps.items():
        mean = [gap[t][0] for t in ts]
        se = [gap[t][1] for t in ts]
        (line,) = ax.plot(ts, mean, marker="o", label=f"{arm} − base")
        ax.fill_between(
            ts,
            [m - e for m, e in zip(mean, se, strict=True)],
            [m + e for m, e in zip(mean, se, strict=True)],
            color=line.get_color(),
            alpha=0.15,
        )
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xlabel("turn budget T at evaluation")
    ax.set_ylabel("gap in Pass@(1,T)")
    twin = ax.twinx()
    twin.plot(
        ts,
        [found.solvable[t] for t in ts],
        color="gray",
        linestyle=":",
        label="solvable within T",
    )
    twin.set_ylim(0, 1.05)
    twin.set_ylabel("share of instances solvable within T", color="gray")
    handles = ax.get_legend_handles_labels()
    extra = twin.get_legend_handles_labels()
    ax.legend(handles[0] + extra[0], handles[1] + extra[1], fontsize=7, loc="upper left")
    ax.set_title(f"Budget dependence of RL's gain: {task}", fontsize=10)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def where_plot(task: str, found: TaskFindings, path: Path) -> Path:
    deltas = found.where.deltas
    measures = list(next(iter(deltas.values())))
    fig, ax = plt.subplots(figsize=(7, 3.6))
    width = 0.8 / max(1, len(deltas))
    for i, (arm, d) in enumerate(deltas.items()):
        xs = [m + (i - (len(deltas) - 1) / 2) * width for m in range(len(measures))]
        values = [0.0 if math.isnan(d[m][0]) else d[m][0] for m in measures]
        errors = [0.0 if math.isnan(d[m][1]) else d[m][1] for m in measures]
        ax.bar(xs, values, width, yerr=errors, capsize=3, label=arm)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(measures)), [m.replace(", ", ",\n") for m in measures], fontsize=8)
    ax.set_ylabel("change against base")
    ax.set_title(
        f"Where does RL help? {task} (T={found.results.meta.analysis_budget})", fontsize=10
    )
    ax.legend(fontsize=7)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def draw(found: dict[str, TaskFindings], root: Path) -> dict[str, dict[str, str]]:
    """All study plots; returns their paths relative to `root`, per task."""
    names = {}
    for task, f in found.items():
        gap_plot(task, f, root / f"gap_{task}.png")
        where_plot(task, f, root / f"where_{task}.png")
        names[task] = {"gap": f"gap_{task}.png", "where": f"where_{task}.png"}
    return names
