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

from minirl.rundir import curves

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
        f"minirl.rundir.curves: error: {tmp_path}: no metrics.jsonl (is this a run directory?)"
    )
    (tmp_path / "metrics.jsonl").write_text("")
    assert curves.main([str(tmp_path)]) == 2
    assert "no complete step logged yet" in capsys.readouterr().err


def test_damaged_lines_are_skipped_and_named(tmp_path: Path) -> None:
    """A 400-digit value, a line nested 100000 deep, a byte that is not UTF-8, a step that is not
    an integer: each line is skipped (the first named in one warning), the rest is drawn."""
    run = write_run(tmp_path / "run", 6)
    good = (run / "metrics.jsonl").read_bytes()
    bad = [
        b'{"step": 7, "reward": ' + b"9" * 400 + b', "success": 0.5}',  # only reward is unusable
        b"[" * 100_000 + b"]" * 100_000,
        b'{"step": 8, "reward": 0.5, "note": "\xff"}',
        b'{"step": "9", "reward": 0.5}',
        b'{"step": 10, "reward": NaN, "success": Infinity}',
        b"9" * 5000,
    ]
    (run / "metrics.jsonl").write_bytes(good + b"\n".join(bad) + b"\n")
    with pytest.warns(UserWarning, match="skipped 4 lines: line 8: nested too deeply") as found:
        assert curves.main([str(run)]) == 0
    assert len(found) == 1 and "\n" not in str(found[0].message)
    rows = curves.read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6, 7, 10]
    steps, rewards = curves.series(rows, ("reward",))
    assert steps == [1, 2, 3, 4, 5, 6]  # 10**400 and NaN are no numbers to draw
    assert curves.series(rows, ("success",))[0] == [1, 2, 3, 4, 5, 6, 7]
    assert all(coloured(p) > 50 for p in panels(run / "curves.png"))


def test_output_must_name_a_png_file(tmp_path: Path, capsys) -> None:
    run = write_run(tmp_path / "run", 3)
    (tmp_path / "pictures").mkdir()
    for output, words in (
        (tmp_path / "pictures", "is a directory"),
        (tmp_path / "curves.jpg", "is not a .png file"),
    ):
        assert curves.main([str(run), "--output", str(output)]) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert lines == [
            f"minirl.rundir.curves: error: --output {output} {words}: name a .png file to write"
        ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pictures", "run"]  # nothing written
    assert not any((tmp_path / "pictures").iterdir())
