"""The whole study at toy size, and its bad flags."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # evaluate.py is a script at the repo root, not part of the package
import evaluate  # noqa: E402


@pytest.mark.slow
def test_toy_study_writes_every_section_and_plot_from_the_data(tmp_path, monkeypatch) -> None:
    """The full pipeline at toy size: 4 arms x 2 seeds x 2 tasks, 2 steps each, the control
    base alone, then the report."""
    from minirl.tiny import TinyRecipe, ensure_tiny

    monkeypatch.setenv("MINIRL_CACHE", str(tmp_path / "cache"))
    model = ensure_tiny(
        TinyRecipe(max_steps=4, tasks=(("gridnav", 1.0), ("hilo", 1.0))), progress=False
    ).path
    out = tmp_path / "study"
    flags = [
        "--study",
        "--model",
        str(model),
        "--control",
        str(model),
        "--tasks",
        "gridnav,hilo",
        "--seeds",
        "0,1",
        "--max_steps",
        "2",
        "--tasks_per_step",
        "2",
        "--num_generations",
        "2",
        "--k",
        "1,2",
        "--t",
        "2,4",
        "--n",
        "2",
        "--instances",
        "4",
        "--decision_states",
        "8",
        "--recovery_states",
        "8",
        "--state_episodes",
        "2",
        "--validation_reps",
        "1",
        "--output",
        str(out),
    ]
    assert evaluate.main(flags) == 0
    report = (out / "report.md").read_text()
    # The report names the commit study.json recorded when the study started.
    commit = json.loads((out / "study.json").read_text())["commit"]
    assert commit and f"at commit {commit}." in report
    for section in (
        "## What the study shows",
        "## Power, and the rules on simulated truths",
        "## 0. Did RL move the policy",
        "## Verdicts at a glance",
        "## 1. Budget dependence",
        "## 2. Where RL helps",
        "## 3. BudgetMix robustness",
        "## 4. Process supervision",
    ):
        assert section in report
    # One glance row per test: per task 3 budget, 4 recovery, 1 robustness, 1 process.
    glance = report.split("## Verdicts at a glance")[1].split("## 1.")[0]
    assert sum(line.startswith(("| gridnav |", "| hilo |")) for line in glance.splitlines()) == 18
    for task in ("gridnav", "hilo"):
        assert report.count(f"### {task}") == 4  # gate, budget, where, robustness
        runs = sorted(p.name for p in (out / task / "runs").iterdir())
        arms = ["budgetmix", "fixed-T12", "fixed-T4", "process"]
        assert runs == [f"{arm}-s{seed}" for arm in arms for seed in (0, 1)]
        for run in runs:  # every arm really trained its 2 steps
            summary = json.loads((out / task / "runs" / run / "summary.json").read_text())
            assert summary["steps"] == 2
        # The base row of the budget table is the base grid of results.json, to 3 decimals.
        res = json.loads((out / task / "results.json").read_text())
        base = {c["t"]: c["mean"] for c in res["checkpoints"]["base"]["grid"] if c["k"] == 1}
        section = report.split("## 1. Budget dependence")[1].split(f"### {task}")[1]
        row = next(line for line in section.splitlines() if line.startswith("| base Pass@"))
        assert [float(x.split("±")[0]) for x in row.split("|")[2:-1]] == [
            round(base[t], 3) for t in (2, 4)
        ]
        # Every arm was asked in the same post-error and matched fresh states (this toy base
        # replies nonsense, so no fresh state reaches a later turn, and nothing is matched).
        states = res["meta"]["post_error_states"]
        assert len(states) <= 8
        for entry in res["checkpoints"].values():
            errors = entry["analysis"]["from_errors"]
            assert errors is None or len(errors["optimal_counts"]) == len(states)
        # The control base was evaluated alone, on the same instances.
        control = json.loads((out / task / "control" / "results.json").read_text())
        assert list(control["checkpoints"]) == ["base"]
        assert control["meta"]["seeds"] == res["meta"]["seeds"]
    for link in re.findall(r"\]\(([^)]+)\)", report):  # every linked file exists
        assert (out / link).is_file(), link
        if link.endswith(".png"):
            assert (out / link).read_bytes()[:4] == b"\x89PNG"
    assert {"gap_gridnav.png", "where_hilo.png"} <= {p.name for p in out.iterdir()}
    first = json.loads((out / "study.json").read_text())["timings"]
    # A second invocation reuses the finished runs and evaluations, and keeps their seconds.
    assert evaluate.main(flags) == 0
    timings = json.loads((out / "study.json").read_text())["timings"]
    assert timings["gridnav/budgetmix-s1"]["status"] == "reused"
    assert timings["measured_seconds"] == first["total_seconds"]  # the time of the measurement
    rerun = (out / "report.md").read_text()
    minutes = first["total_seconds"] / 60
    assert f"The invocation that measured it took {minutes:.1f} minutes" in rerun
    for part in ("hilo/evaluation", "hilo/control"):
        assert timings[part] == {"seconds": first[part]["seconds"], "status": "reused"}
    assert os.environ["MINIRL_CACHE"] == str(tmp_path / "cache")


def test_bad_study_flags_exit_2(capsys) -> None:
    assert evaluate.main(["--study", "--tasks", "chess"]) == 2
    assert "--tasks 'chess'" in capsys.readouterr().err
    assert evaluate.main(["--study", "--tight", "12", "--generous", "4"]) == 2
