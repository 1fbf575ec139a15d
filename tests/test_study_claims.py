"""The study's statistics by hand, on simulated results files shaped like an evaluation's."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest

from minirl.study import simulate
from minirl.study.bootstrap import holm
from minirl.study.claims import adjust, analyse_results

BASE = simulate.SimPolicy(0.6, 0.6)


def small(arms: dict[str, simulate.SimPolicy], seed: int = 0) -> simulate.SimStudy:
    return simulate.sim_results(
        "gridnav", arms, runs=2, instances=12, n=2, fresh_states=40, post_states=30, seed=seed
    )


def logit(p: float, trials: int) -> float:
    q = min(max(p, 0.5 / trials), 1 - 0.5 / trials)
    return math.log(q / (1 - q))


def test_the_point_estimates_are_the_rates_of_the_results_file() -> None:
    study = small({"base": BASE, "fixed-T12": BASE.shift(1.0), "budgetmix": BASE.shift(0.5)})
    res = study.results
    found = analyse_results("gridnav", res, study.arms, replicates=50)
    fresh, post = len(res.meta.decision_states), len(res.meta.post_error_states)

    def mean(arm: str, get) -> float:  # an arm's rate: the mean of its runs' rates
        labels = study.arms.get(arm, ["base"])
        return float(np.mean([get(res.checkpoints[label]) for label in labels]))

    def step(c):
        return c.analysis.decision.optimal.rate

    def post_step(c):
        return c.analysis.from_errors.optimal.rate

    for arm in ("fixed-T12", "budgetmix"):
        row = found.where[arm]
        assert row.step.value == pytest.approx(mean(arm, step) - mean("base", step))
        expected = (
            logit(mean(arm, post_step), 2 * post)
            - logit(mean("base", post_step), 2 * post)
            - logit(mean(arm, step), 2 * fresh)
            + logit(mean("base", step), 2 * fresh)
        )
        assert row.test.estimate.value == pytest.approx(expected)
        for t in res.meta.ts:
            cell = mean(arm, lambda c, t=t: c.cell(1, t).mean)
            assert found.pass1[arm][t].value == pytest.approx(cell)
    lead = np.mean(
        [found.pass1["budgetmix"][t].value - found.pass1["fixed-T12"][t].value for t in res.meta.ts]
    )
    assert found.robust["fixed-T12"].lead.value == pytest.approx(lead)
    # The oracle's ceiling per T is never below what any arm reached.
    for t, (ceiling, _) in found.ceiling.items():
        assert all(found.pass1[a][t].value <= ceiling + 1e-9 for a in found.pass1)


def test_an_arm_identical_to_its_comparison_has_zero_statistics_and_no_verdict() -> None:
    study = small({"base": BASE, "fixed-T12": BASE.shift(0.8), "budgetmix": BASE})
    res = study.results
    # Make fixed-T4 a copy of base and budgetmix a copy of fixed-T12, run for run.
    study.arms["fixed-T4"] = ["fixed-T4-s0", "fixed-T4-s1"]
    for r, mix in enumerate(study.arms["budgetmix"]):
        res.checkpoints[f"fixed-T4-s{r}"] = copy.deepcopy(res.checkpoints["base"])
        res.checkpoints[mix] = copy.deepcopy(res.checkpoints[f"fixed-T12-s{r}"])
    found = analyse_results("gridnav", res, study.arms, replicates=100)
    tests = adjust({"gridnav": found})
    copy_of_base = found.budget["fixed-T4"]
    assert all(g.value == 0 and g.se == 0 for g in copy_of_base.gap.values())
    assert all(v == pytest.approx(0.0, abs=1e-12) for v in copy_of_base.null.values())
    assert copy_of_base.test.estimate.value == pytest.approx(0.0, abs=1e-12)
    assert found.where["fixed-T4"].test.estimate.value == pytest.approx(0.0)
    same = found.robust["fixed-T12"]
    # Its runs are resampled apart from fixed-T12's (two arms' seeds are independent), so the
    # lead has a spread around an exact 0: p = 1/2.
    assert same.lead.value == 0 and same.test.p == 0.5 and not same.test.shown
    assert not any(t.shown for t in (copy_of_base.test, found.where["fixed-T4"].test))
    # adjust() is Holm over every test of the study, in order.
    assert [t.adjusted for t in tests] == pytest.approx(holm([t.p for t in tests]), nan_ok=True)
    assert all(t.detectable > 0 for t in tests if t.estimate.se > 0)
