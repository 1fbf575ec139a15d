"""PNG plots of an evaluation: what a table of numbers hides, a picture shows.

- heatmap_<checkpoint>.png: the Pass@(K,T) grid, K down, T across, each cell annotated;
- passkt_curves.png: Pass@(K,T) against T, one panel per K, one line (with stderr band) per
  checkpoint; the budget dependence of RL's gain is the gap between the lines as T grows. The
  K = 1 panel also draws the open-loop yardstick (dashed, with its band): what the best policy
  that never reads an observation wins at each T (minirl.eval.openloop);
- behaviour.png: single-step optimal-action rate, P(success | an error), and success by horizon,
  side by side per checkpoint; the "where does RL help" question in one figure.

Inputs are the typed results of minirl.eval.results, which `load_results` reads back from a
results.json, so plots can be redrawn from a saved file without re-running anything. matplotlib's
Agg backend needs no display.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen before pyplot loads)

from minirl.eval.openloop import Yardstick  # noqa: E402
from minirl.eval.passkt import Cell  # noqa: E402
from minirl.eval.results import CheckpointResult, Rate  # noqa: E402


def slug(name: str) -> str:
    """A file-name-safe form of a checkpoint label."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "checkpoint"


def _grid(entry: CheckpointResult) -> tuple[list[int], list[int], dict[tuple[int, int], Cell]]:
    cells = {(c.k, c.t): c for c in entry.grid}
    ks = sorted({k for k, _ in cells})
    ts = sorted({t for _, t in cells})
    return ks, ts, cells


def heatmap(entry: CheckpointResult, title: str, path: Path) -> Path:
    ks, ts, cells = _grid(entry)
    values = [[cells[(k, t)].mean for t in ts] for k in ks]
    fig, ax = plt.subplots(figsize=(1.0 + 0.6 * len(ts), 1.4 + 0.5 * len(ks)))
    image = ax.imshow(values, vmin=0.0, vmax=1.0, cmap="viridis", aspect="auto", origin="lower")
    for i, row in enumerate(values):
        for j, v in enumerate(row):
            ax.text(
                j,
                i,
                f"{v:.2f}",
                ha="center",
                va="center",
                fontsize=7,
                color="black" if v > 0.6 else "white",
            )
    ax.set_xticks(range(len(ts)), [str(t) for t in ts])
    ax.set_yticks(range(len(ks)), [str(k) for k in ks])
    ax.set_xlabel("turn budget T (interaction depth)")
    ax.set_ylabel("K (episodes sampled)")
    ax.set_title(title, fontsize=9)
    fig.colorbar(image, ax=ax, label="Pass@(K,T)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def curves(
    entries: dict[str, CheckpointResult],
    title: str,
    path: Path,
    open_loop: dict[int, Yardstick] | None = None,
) -> Path:
    ks = _grid(next(iter(entries.values())))[0]
    fig, axes = plt.subplots(1, len(ks), figsize=(3.2 * len(ks), 3.0), sharey=True, squeeze=False)
    for ax, k in zip(axes[0], ks, strict=True):
        for name, entry in entries.items():
            _, ts, cells = _grid(entry)
            mean = [cells[(k, t)].mean for t in ts]
            err = [cells[(k, t)].stderr for t in ts]
            (line,) = ax.plot(ts, mean, marker="o", markersize=3, label=name)
            ax.fill_between(
                ts,
                [m - e for m, e in zip(mean, err, strict=True)],
                [m + e for m, e in zip(mean, err, strict=True)],
                color=line.get_color(),
                alpha=0.2,
            )
        if k == 1 and open_loop:  # one sequence, one episode: comparable with Pass@(1,T) only
            ts = sorted(open_loop)
            mean = [open_loop[t].success for t in ts]
            err = [open_loop[t].stderr for t in ts]
            (blind,) = ax.plot(ts, mean, "k--", linewidth=1.2, label="open-loop best")
            ax.fill_between(
                ts,
                [m - e for m, e in zip(mean, err, strict=True)],
                [m + e for m, e in zip(mean, err, strict=True)],
                color="black",
                alpha=0.1,
            )
            ax.legend(handles=[blind], fontsize=7, loc="upper left")
        ax.set_title(f"K = {k}", fontsize=9)
        ax.set_xlabel("turn budget T")
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("Pass@(K,T)")
    axes[0][-1].legend(fontsize=7, loc="lower right")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _bars(ax: plt.Axes, groups: list[str], series: dict[str, list[float]], ylabel: str) -> None:
    width = 0.8 / max(1, len(series))
    for i, (name, values) in enumerate(series.items()):
        xs = [g + (i - (len(series) - 1) / 2) * width for g in range(len(groups))]
        shown = [0.0 if math.isnan(v) else v for v in values]
        bars = ax.bar(xs, shown, width, label=name)
        for bar, v in zip(bars, values, strict=True):
            ax.text(
                bar.get_x() + bar.get_width() / 2,
                bar.get_height() + 0.01,
                "n/a" if math.isnan(v) else f"{v:.2f}",
                ha="center",
                fontsize=6,
            )
    ax.set_xticks(range(len(groups)), groups, fontsize=7)
    ax.set_ylim(0, 1.1)
    ax.set_ylabel(ylabel)
    ax.grid(axis="y", alpha=0.3)


def behaviour(entries: dict[str, CheckpointResult], title: str, path: Path) -> Path:
    names = list(entries)
    analyses = {n: entries[n].analysis for n in names}
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.4))
    quality = {
        n: [
            a.decision.optimal.rate,
            a.recovery.no_error.rate,
            a.recovery.after_error.rate,
        ]
        for n, a in analyses.items()
    }
    _bars(
        axes[0],
        ["optimal action\n(fixed states)", "success |\nno error", "success |\n>= 1 error"],
        quality,
        "rate",
    )
    axes[0].set_title("single-step quality vs error recovery", fontsize=9)

    missing = Rate(math.nan, 0)
    turns = sorted({j for a in analyses.values() for j in a.recovery.by_first_error_turn})
    by_turn = {
        n: [a.recovery.by_first_error_turn.get(j, missing).rate for j in turns]
        for n, a in analyses.items()
    }
    _bars(axes[1], [str(j) for j in turns], by_turn, "P(success | first error at turn j)")
    axes[1].set_xlabel("turn j of the first error")
    axes[1].set_title("recovery by when the first error happens", fontsize=9)

    buckets = list(analyses[names[0]].horizon)
    horizon = {n: [a.horizon.get(b, missing).rate for b in buckets] for n, a in analyses.items()}
    _bars(axes[2], buckets, horizon, "success rate")
    axes[2].set_xlabel("optimal solution length")
    axes[2].set_title("long-horizon resilience", fontsize=9)
    axes[2].legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
