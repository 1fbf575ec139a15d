"""The study: the verdict rules on hand-made results, and the whole pipeline at toy size."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest

from minirl.study_report import budget_dependence, robustness, where_rl_helps

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # evaluate.py is a script at the repo root, not part of the package
import evaluate  # noqa: E402


def entry(
    pass1: dict[int, float],
    stderr: float = 0.01,
    step: float = 0.5,
    recovery: float = 0.3,
    count: int = 400,
) -> dict:
    rate = {"count": count}
    return {
        "grid": [{"k": 1, "t": t, "mean": m, "stderr": stderr} for t, m in pass1.items()],
        "analysis": {
            "decision": {"optimal": {**rate, "rate": step}},
            "recovery": {"after_error": {**rate, "rate": recovery}},
            "horizon": {"5-6": {**rate, "rate": recovery}},
        },
    }


def results(**checkpoints: dict) -> dict:
    ts = sorted({c["t"] for e in checkpoints.values() for c in e["grid"]})
    return {"meta": {"ts": ts, "analysis_budget": ts[-1]}, "checkpoints": checkpoints}


def test_budget_dependence_rule() -> None:
    base = entry({2: 0.05, 8: 0.40})
    grows = results(base=base, rl=entry({2: 0.06, 8: 0.60}))
    verdict = budget_dependence(grows, {"rl": ["rl"]})["verdicts"]["rl"]
    assert verdict["shown"] and "+0.010" in verdict["text"] and "+0.200" in verdict["text"]
    flat = results(base=base, rl=entry({2: 0.25, 8: 0.60}))
    assert not budget_dependence(flat, {"rl": ["rl"]})["verdicts"]["rl"]["shown"]
    none = results(base=base, rl=entry({2: 0.05, 8: 0.41}))
    text = budget_dependence(none, {"rl": ["rl"]})["verdicts"]["rl"]["text"]
    assert text.startswith("not shown: at the largest evaluated T=8")


def test_where_rl_helps_rule() -> None:
    base = entry({8: 0.4}, step=0.50, recovery=0.30)
    recovers = results(base=base, rl=entry({8: 0.6}, step=0.51, recovery=0.45))
    assert where_rl_helps(recovers, {"rl": ["rl"]})["verdicts"]["rl"]["shown"]
    uniform = results(base=base, rl=entry({8: 0.6}, step=0.65, recovery=0.45))
    assert not where_rl_helps(uniform, {"rl": ["rl"]})["verdicts"]["rl"]["shown"]


def test_robustness_rule_uses_regret() -> None:
    r = results(
        base=entry({2: 0.1, 8: 0.3}),
        generous=entry({2: 0.10, 8: 0.80}),
        tight=entry({2: 0.40, 8: 0.50}),
        budgetmix=entry({2: 0.35, 8: 0.75}),
    )
    out = robustness(r, {"generous": ["generous"], "tight": ["tight"], "budgetmix": ["budgetmix"]})
    table = out["table"]
    assert table["budgetmix"]["regret"] == pytest.approx(0.05)  # 0.40 - 0.35 at T=2
    assert table["generous"]["regret"] == pytest.approx(0.30)
    assert table["tight"]["worst"] == pytest.approx(0.40) and table["tight"]["worst_t"] == 2
    assert out["verdict"]["shown"]
    worse = results(
        base=r["checkpoints"]["base"],
        generous=r["checkpoints"]["generous"],
        tight=r["checkpoints"]["tight"],
        budgetmix=entry({2: 0.05, 8: 0.45}),
    )
    arms = {"generous": ["generous"], "tight": ["tight"], "budgetmix": ["budgetmix"]}
    assert not robustness(worse, arms)["verdict"]["shown"]


@pytest.mark.slow
def test_toy_study_writes_every_section_and_plot_from_the_data(tmp_path, monkeypatch) -> None:
    """The full pipeline at toy size: 4 arms x 2 seeds x 2 tasks, 2 steps each, then the report."""
    from minirl.tiny import TinyRecipe, ensure_tiny

    monkeypatch.setenv("MINIRL_CACHE", str(tmp_path / "cache"))
    model = ensure_tiny(
        TinyRecipe(max_steps=4, tasks=(("gridnav", 1.0), ("guess", 1.0))), progress=False
    ).path
    out = tmp_path / "study"
    flags = [
        "--study",
        "--model",
        str(model),
        "--tasks",
        "gridnav,guess",
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
        "--process",
        "true",
        "--output",
        str(out),
    ]
    assert evaluate.main(flags) == 0
    report = (out / "report.md").read_text()
    # The report names the commit study.json recorded when the study started.
    commit = json.loads((out / "study.json").read_text())["commit"]
    assert commit and f"at commit {commit}, in" in report
    for section in (
        "## 1. Budget dependence",
        "## 2. Where RL helps",
        "## 3. BudgetMix robustness",
        "## 4. Process supervision",
    ):
        assert section in report
    for task in ("gridnav", "guess"):
        assert report.count(f"### {task}") == 3
        runs = sorted(p.name for p in (out / task / "runs").iterdir())
        # The default two training seeds give every arm two runs, labelled by seed.
        arms = ["budgetmix", "fixed-T12", "fixed-T4", "process"]
        assert runs == [f"{arm}-s{seed}" for arm in arms for seed in (0, 1)]
        for run in runs:  # every arm really trained its 2 steps
            summary = json.loads((out / task / "runs" / run / "summary.json").read_text())
            assert summary["steps"] == 2
        # The base row of the budget table is the base grid of results.json, to 3 decimals.
        res = json.loads((out / task / "results.json").read_text())
        base = {c["t"]: c["mean"] for c in res["checkpoints"]["base"]["grid"] if c["k"] == 1}
        section = report.split(f"### {task}")[1]
        row = next(line for line in section.splitlines() if line.startswith("| base Pass@"))
        assert [float(x.split("±")[0]) for x in row.split("|")[2:-1]] == [
            round(base[t], 3) for t in (2, 4)
        ]
    for link in re.findall(r"\]\(([^)]+)\)", report):  # every linked file exists
        assert (out / link).is_file(), link
        if link.endswith(".png"):
            assert (out / link).read_bytes()[:4] == b"\x89PNG"
    assert {"gap_gridnav.png", "where_guess.png"} <= {p.name for p in out.iterdir()}
    # A second invocation reuses the finished runs instead of training them again.
    assert evaluate.main(flags) == 0
    timings = json.loads((out / "study.json").read_text())["timings"]
    assert timings["gridnav/budgetmix-s1"]["status"] == "reused"
    assert os.environ["MINIRL_CACHE"] == str(tmp_path / "cache")


def test_bad_study_flags_exit_2(capsys) -> None:
    assert evaluate.main(["--study", "--tasks", "chess"]) == 2
    assert "--tasks 'chess'" in capsys.readouterr().err
    assert evaluate.main(["--study", "--tight", "12", "--generous", "4"]) == 2
