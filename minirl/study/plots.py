"""The study's own plots, one pair per task (the per-task evaluation plots: minirl.eval.plots).

- gap_<task>.png: Pass@(1,T) of each RL arm minus base, against T, with a ±1 stderr band; the
  null (what the arm's single-step gain alone buys at T, dashed); and the oracle's success at T
  on a second axis (no policy can do better, so a gap cannot exist where it is 0);
- where_<task>.png: per RL arm, the change against base in the optimal-action rate on random
  fresh states, on the post-error states and on their matched fresh states (the same scale), and
  in success from the post-error states, with ±1 stderr bars.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen before pyplot loads)

from minirl.study.claims import TaskFindings  # noqa: E402


def gap_plot(task: str, found: TaskFindings, path: Path) -> Path:
    ts = found.results.meta.ts
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for arm, row in found.budget.items():
        mean = [row.gap[t].value for t in ts]
        se = [row.gap[t].se for t in ts]
        (line,) = ax.plot(ts, mean, marker="o", label=f"{arm} − base")
        ax.fill_between(
            ts,
            [m - e for m, e in zip(mean, se, strict=True)],
            [m + e for m, e in zip(mean, se, strict=True)],
            color=line.get_color(),
            alpha=0.15,
        )
        ax.plot(ts, [row.null[t] for t in ts], linestyle="--", color=line.get_color(), alpha=0.8)
    ax.plot([], [], linestyle="--", color="black", label="null: single-step gain only")
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xlabel("turn budget T at evaluation")
    ax.set_ylabel("gap in Pass@(1,T)")
    twin = ax.twinx()
    twin.plot(
        ts,
        [found.ceiling[t][0] for t in ts],
        color="gray",
        linestyle=":",
        label="oracle's success within T",
    )
    twin.set_ylim(0, 1.05)
    twin.set_ylabel("oracle's success within T", color="gray")
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
    measures = {
        "optimal rate,\nrandom fresh": lambda r: r.step,
        "optimal rate,\npost-error": lambda r: r.matched_post,
        "optimal rate,\nmatched fresh": lambda r: r.matched_fresh,
        "success from\npost-error": lambda r: r.post_success,
    }
    rows = found.where
    fig, ax = plt.subplots(figsize=(7, 3.6))
    width = 0.8 / max(1, len(rows))
    for i, (arm, row) in enumerate(rows.items()):
        xs = [m + (i - (len(rows) - 1) / 2) * width for m in range(len(measures))]
        picked = [pick(row) for pick in measures.values()]
        values = [0.0 if math.isnan(e.value) else e.value for e in picked]
        errors = [0.0 if math.isnan(e.se) else e.se for e in picked]
        ax.bar(xs, values, width, yerr=errors, capsize=3, label=arm)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(measures)), list(measures), fontsize=8)
    ax.set_ylabel("change against base")
    ax.set_title(f"Where does RL help? {task}: the same states for every arm", fontsize=10)
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
