"""The study's verdict rules, on hand-made results."""

from __future__ import annotations

import math

import pytest

from minirl.eval.passkt import Cell
from minirl.eval.results import (
    Analysis,
    CheckpointResult,
    DecisionQuality,
    EvalMeta,
    EvalResults,
    Rate,
    Recovery,
)
from minirl.study.claims import budget_dependence, robustness, where_rl_helps


def entry(
    pass1: dict[int, float],
    stderr: float = 0.01,
    step: float = 0.5,
    recovery: float = 0.3,
    count: int = 400,
) -> CheckpointResult:
    return CheckpointResult(
        path=None,
        grid=[Cell(1, t, m, stderr, m, m, 100) for t, m in pass1.items()],
        analysis=Analysis(
            decision=DecisionQuality(optimal=Rate(step, count), valid=Rate(1.0, count)),
            recovery=Recovery(no_error=Rate(math.nan, 0), after_error=Rate(recovery, count)),
            horizon={"5-6": Rate(recovery, count)},
            efficiency={},
            invalid_rate=0.0,
        ),
        seconds=0.0,
    )


def results(**checkpoints: CheckpointResult) -> EvalResults:
    ts = sorted({c.t for e in checkpoints.values() for c in e.grid})
    meta = EvalMeta(
        task="gridnav",
        model="tiny",
        quant="nf4",
        seeds=[],
        n=1,
        ks=[1],
        ts=ts,
        seed=0,
        budget_visible=True,
        mode="visible",
        temperature=1.0,
        max_new_tokens=4,
        analysis_budget=ts[-1],
        minirl_version="test",
        device="cpu",
    )
    return EvalResults(meta, dict(checkpoints))


def test_budget_dependence_rule() -> None:
    base = entry({2: 0.05, 8: 0.40})
    grows = results(base=base, rl=entry({2: 0.06, 8: 0.60}))
    verdict = budget_dependence(grows, {"rl": ["rl"]}).verdicts["rl"]
    assert verdict.shown and "+0.010" in verdict.text and "+0.200" in verdict.text
    flat = results(base=base, rl=entry({2: 0.25, 8: 0.60}))
    assert not budget_dependence(flat, {"rl": ["rl"]}).verdicts["rl"].shown
    none = results(base=base, rl=entry({2: 0.05, 8: 0.41}))
    text = budget_dependence(none, {"rl": ["rl"]}).verdicts["rl"].text
    assert text.startswith("not shown: at the largest evaluated T=8")


def test_where_rl_helps_rule() -> None:
    base = entry({8: 0.4}, step=0.50, recovery=0.30)
    recovers = results(base=base, rl=entry({8: 0.6}, step=0.51, recovery=0.45))
    assert where_rl_helps(recovers, {"rl": ["rl"]}).verdicts["rl"].shown
    uniform = results(base=base, rl=entry({8: 0.6}, step=0.65, recovery=0.45))
    assert not where_rl_helps(uniform, {"rl": ["rl"]}).verdicts["rl"].shown


def test_robustness_rule_uses_regret() -> None:
    r = results(
        base=entry({2: 0.1, 8: 0.3}),
        generous=entry({2: 0.10, 8: 0.80}),
        tight=entry({2: 0.40, 8: 0.50}),
        budgetmix=entry({2: 0.35, 8: 0.75}),
    )
    out = robustness(r, {"generous": ["generous"], "tight": ["tight"], "budgetmix": ["budgetmix"]})
    table = out.table
    assert table["budgetmix"].regret == pytest.approx(0.05)  # 0.40 - 0.35 at T=2
    assert table["generous"].regret == pytest.approx(0.30)
    assert table["tight"].worst == pytest.approx(0.40) and table["tight"].worst_t == 2
    assert out.verdict.shown
    worse = results(
        base=r.checkpoints["base"],
        generous=r.checkpoints["generous"],
        tight=r.checkpoints["tight"],
        budgetmix=entry({2: 0.05, 8: 0.45}),
    )
    arms = {"generous": ["generous"], "tight": ["tight"], "budgetmix": ["budgetmix"]}
    assert not robustness(worse, arms).verdict.shown
