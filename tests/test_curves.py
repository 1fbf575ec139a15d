"""Training curves: drawn from metrics.jsonl alone, for a finished, a killed or a TRL run.

The metrics here are made up with known shapes (reward rising, entropy falling), so the test can
check the numbers drawn (the moving average against a brute-force one) and that the PNG shows
lines in each panel, not a blank canvas.
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest

from minirl import curves

STEPS = 40


def metrics_line(step: int, trl: bool = False) -> dict:
    line = {
        "step": step,
        "reward": step / STEPS,
        "success": step / STEPS,
        "invalid_rate": 0.1 * (step % 3 == 0),
        "entropy": 1.0 - step / (2 * STEPS),
        "turns": 8 - step / 10,
        "budget": 4 + step % 9,
        "zero_std_frac": 0.5,
    }
    if trl:  # TRL names this one differently
        line["frac_reward_zero_std"] = line.pop("zero_std_frac")
    return line


def write_run(run: Path, steps: int, torn: bool = False, trl: bool = False) -> Path:
    run.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(metrics_line(s, trl)) + "\n" for s in range(1, steps + 1))
    if torn:  # killed while writing its last line
        text += '{"step": 99, "rew'
    (run / "metrics.jsonl").write_text(text)
    return run


def panels(path: Path) -> list[np.ndarray]:
    """The PNG cut into its 2 x 3 panels."""
    pixels = matplotlib.image.imread(path)[..., :3]
    h, w = pixels.shape[0] // 2, pixels.shape[1] // 3
    return [pixels[r * h : (r + 1) * h, c * w : (c + 1) * w] for r in range(2) for c in range(3)]


def coloured(panel: np.ndarray) -> int:
    """Pixels of a drawn line: saturated colour (axes, text and grid are grey)."""
    return int((panel.max(axis=-1) - panel.min(axis=-1) > 0.3).sum())


def test_moving_average_matches_brute_force() -> None:
    values = [float(v) for v in np.random.default_rng(0).normal(size=50)]
    for window in (1, 3, 7):
        brute = [np.mean(values[max(0, i - window + 1) : i + 1]) for i in range(len(values))]
        assert curves.moving_average(values, window) == pytest.approx(brute)


def test_a_finished_run_gets_six_drawn_panels(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", STEPS)
    (run / "summary.json").write_text("{}")
    path = curves.write_curves(run)
    assert path == run / "curves.png"
    for i, panel in enumerate(panels(path)):
        assert coloured(panel) > 200, f"panel {i} has no line"
    steps, values = curves.series(curves.read_metrics(run / "metrics.jsonl"), ("reward",))
    assert steps == list(range(1, STEPS + 1)) and values[-1] == 1.0


def test_a_killed_trl_run_is_drawn_from_what_it_logged(tmp_path: Path) -> None:
    run = write_run(tmp_path / "killed", 5, torn=True, trl=True)
    rows = curves.read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5]  # the torn line is dropped
    assert curves.series(rows, ("zero_std_frac", "frac_reward_zero_std"))[1] == [0.5] * 5
    path = curves.main([str(run), "--output", str(tmp_path / "c.png")])
    assert path == 0 and all(coloured(p) > 50 for p in panels(tmp_path / "c.png"))


def test_bad_directories_fail_in_one_line(tmp_path: Path, capsys) -> None:
    assert curves.main([str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"minirl.curves: error: {tmp_path}: no metrics.jsonl (is this a run directory?)"
    )
    (tmp_path / "metrics.jsonl").write_text("")
    assert curves.main([str(tmp_path)]) == 2
    assert "no complete step logged yet" in capsys.readouterr().err
