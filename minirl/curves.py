"""Training curves as a picture: RUN_DIR/metrics.jsonl -> RUN_DIR/curves.png.

    python -m minirl.curves runs/budgetmix-gridnav     # any run directory, a killed one too

Six panels against the training step: reward, success, invalid-reply rate, policy entropy,
turns used next to the budget T drawn, and the fraction of groups whose rewards all tie (they
teach nothing). Each panel shows the raw per-step value faintly and a moving average over a tenth
of the run boldly: one step of 64 episodes is noisy, the trend is what to read.

Both backends write metrics.jsonl with these keys (TRL names the last one frac_reward_zero_std).
The trainer draws the curves at the end of every run; this command draws them on demand, from
whatever metrics.jsonl holds, so a run killed mid-way (even mid-line) still gets its picture.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen before pyplot loads)
from matplotlib.ticker import MaxNLocator  # noqa: E402

# (panel title, [(label, keys that may hold it: minirl's name first, then TRL's)])
PANELS: list[tuple[str, list[tuple[str, tuple[str, ...]]]]] = [
    ("reward", [("reward", ("reward",))]),
    ("success", [("success", ("success",))]),
    ("invalid replies (fraction of turns)", [("invalid rate", ("invalid_rate",))]),
    ("policy entropy (nats per token)", [("entropy", ("entropy",))]),
    ("turns", [("turns used", ("turns",)), ("budget T drawn", ("budget",))]),
    (
        "groups with tied rewards (no signal)",
        [("zero-std groups", ("zero_std_frac", "frac_reward_zero_std"))],
    ),
]


def read_metrics(path: Path) -> list[dict]:
    """The lines of a metrics.jsonl that parse and carry a step; a killed run's torn line goes."""
    rows = []
    for line in Path(path).read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict) and isinstance(row.get("step"), int | float):
            rows.append(row)
    return rows


def series(rows: list[dict], keys: tuple[str, ...]) -> tuple[list[float], list[float]]:
    """(steps, values) of the first key in `keys` that the rows hold; the last value per step."""
    for key in keys:
        by_step = {
            row["step"]: float(row[key]) for row in rows if isinstance(row.get(key), int | float)
        }
        if by_step:
            steps = sorted(by_step)
            return steps, [by_step[s] for s in steps]
    return [], []


def moving_average(values: list[float], window: int) -> list[float]:
    """Mean of the last `window` values at each point (fewer at the start)."""
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def write_curves(run_dir: str | Path, output: str | Path | None = None) -> Path:
    """Draw the curves of the run in `run_dir`; returns the PNG's path. ValueError if no data."""
    run = Path(run_dir)
    metrics = run / "metrics.jsonl"
    if not metrics.exists():
        raise ValueError(f"{run}: no metrics.jsonl (is this a run directory?)")
    rows = read_metrics(metrics)
    if not rows:
        raise ValueError(f"{metrics}: no complete step logged yet")
    window = max(1, len(rows) // 10)
    fig, axes = plt.subplots(2, 3, figsize=(13, 6.5), squeeze=False)
    for ax, (title, lines) in zip(axes.flat, PANELS, strict=True):
        drawn = False
        for label, keys in lines:
            steps, values = series(rows, keys)
            if not steps:
                continue
            few = len(steps) <= 20  # a short run: mark the points themselves
            (raw,) = ax.plot(steps, values, alpha=0.3, linewidth=1, marker="o" if few else None)
            ax.plot(
                steps,
                moving_average(values, window),
                color=raw.get_color(),
                linewidth=2,
                label=f"{label} (mean of {window})" if window > 1 else label,
            )
            drawn = True
        if drawn:
            ax.legend(fontsize=7)
        else:
            ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    last = max(row["step"] for row in rows)
    state = "" if (run / "summary.json").exists() else ", unfinished (no summary.json)"
    fig.suptitle(f"{run.name}: {last} steps{state}", fontsize=11)
    fig.tight_layout()
    path = Path(output) if output else run / "curves.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    from minirl.cli import ArgParser, run_cli
    from minirl.config import CurvesArgs
    from minirl.errors import ConfigError
    from minirl.validation import check_fields

    parser = ArgParser(
        CurvesArgs, prog="minirl.curves", description=__doc__.split("\n")[0], allow_abbrev=False
    )
    parser.add_argument("run_dir", help="A run directory holding metrics.jsonl.")
    args, rest = parser.parse_args_into_dataclasses(args=argv)

    def work() -> int:
        check_fields(args)
        try:
            path = write_curves(rest.run_dir, args.output or None)
        except ValueError as err:  # nothing to draw in that directory: say which and why
            raise ConfigError(str(err)) from err
        print(f"wrote {path}")
        return 0

    return run_cli("minirl.curves", work, lambda: "nothing was written")


if __name__ == "__main__":
    sys.exit(main())
