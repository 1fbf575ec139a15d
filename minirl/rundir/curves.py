"""Training curves as a picture: RUN_DIR/metrics.jsonl -> RUN_DIR/curves.png.

    python -m minirl.rundir.curves runs/budgetmix-gridnav     # any run directory, a killed one too

Six panels against the training step: reward, success, invalid-reply rate, policy entropy,
turns used next to the budget T drawn, and the fraction of groups whose rewards all tie (they
teach nothing). Each panel shows the raw per-step value faintly and a moving average over a tenth
of the run boldly: one step of 64 episodes is noisy, the trend is what to read.

Both backends write metrics.jsonl with these keys (TRL names the last one frac_reward_zero_std).
The trainer draws the curves at the end of every run; this command draws them on demand, from
whatever metrics.jsonl holds, so a run killed mid-way (even mid-line) still gets its picture.
A line is read only if it is a JSON object with an integer step (minirl.infra.readback: UTF-8, no
overflowing numbers, not nested without end); a value is drawn only if it is a finite number.
Other lines are skipped, and a warning names the first of them (a torn last line is expected and
skipped quietly).
"""

from __future__ import annotations

import math
import sys
import warnings
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
    """The lines of a metrics.jsonl that are metrics: JSON objects with an integer step >= 0.

    A killed run's torn last line goes quietly; any other line that is not metrics goes with a
    warning naming it, so a damaged file still draws what it holds.
    """
    from minirl.infra.errors import DataError
    from minirl.infra.readback import parse_json

    rows, skipped = [], []
    lines = Path(path).read_bytes().split(b"\n")
    while lines and not lines[-1].strip():
        lines.pop()
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            row = parse_json(raw.decode("utf-8"), f"line {number}")
        except UnicodeDecodeError:
            skipped.append(f"line {number} is not UTF-8")
            continue
        except DataError as err:
            skipped.append(str(err))
            continue
        step = row.get("step") if isinstance(row, dict) else None
        if isinstance(step, int) and not isinstance(step, bool) and 0 <= step < 2**63:
            rows.append(row)
        else:
            skipped.append(f"line {number} is not a step's metrics (no integer 'step')")
    torn = len(skipped) == 1 and skipped[0].startswith(f"line {len(lines)}")
    if skipped and not torn:
        warnings.warn(f"{path}: skipped {len(skipped)} lines: {skipped[0]}", stacklevel=2)
    return rows


def number(value: object) -> float | None:
    """A metric as a float, or None when it is not a finite number (a bool, a string, 1e400)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        x = float(value)
    except OverflowError:  # a 400-digit integer
        return None
    return x if math.isfinite(x) else None


def series(rows: list[dict], keys: tuple[str, ...]) -> tuple[list[float], list[float]]:
    """(steps, values) of the first key in `keys` that the rows hold; the last value per step."""
    for key in keys:
        by_step = {
            row["step"]: number(row.get(key)) for row in rows if number(row.get(key)) is not None
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
    if not metrics.is_file():
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
    fig.savefig(path, dpi=100, format="png")
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    from minirl.config import CurvesArgs
    from minirl.infra.cli import ArgParser, run_cli
    from minirl.infra.errors import ConfigError
    from minirl.infra.validation import check_fields

    parser = ArgParser(
        CurvesArgs,
        prog="minirl.rundir.curves",
        description=__doc__.split("\n")[0],
        allow_abbrev=False,
    )
    parser.add_argument("run_dir", help="A run directory holding metrics.jsonl.")
    args, rest = parser.parse_args_into_dataclasses(args=argv)

    def work() -> int:
        check_fields(args)
        output = Path(args.output) if args.output else None
        if output is not None and (output.is_dir() or output.suffix.lower() != ".png"):
            # matplotlib would write <directory>.png beside it, or a PNG under another name.
            what = "is a directory" if output.is_dir() else "is not a .png file"
            raise ConfigError(f"--output {args.output} {what}: name a .png file to write")
        try:
            path = write_curves(rest.run_dir, args.output or None)
        except ValueError as err:  # nothing to draw in that directory: say which and why
            raise ConfigError(str(err)) from err
        print(f"wrote {path}")
        return 0

    return run_cli("minirl.rundir.curves", work, lambda: "nothing was written")


if __name__ == "__main__":
    sys.exit(main())
