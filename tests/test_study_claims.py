"""The study's statistics by hand, on simulated results files shaped like an evaluation's."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest

from minirl.study import simulate
from minirl.study.bootstrap import holm, t_sf
from minirl.study.claims import ALPHA, adjust, analyse_results, slope

BASE = simulate.SimPolicy(0.6, 0.45)


def small(arms: dict[str, simulate.SimPolicy], seed: int = 0) -> simulate.SimStudy:
    return simulate.sim_results(
        "gridnav",
        arms,
        runs=3,
        instances=16,
        n=2,
        fresh_states=40,
        post_states=30,
        state_episodes=6,
        seed=seed,
    )


def logit(p: float, trials: int) -> float:
    q = min(max(p, 0.5 / trials), 1 - 0.5 / trials)
    return math.log(q / (1 - q))


def test_slope_is_least_squares_over_every_t() -> None:
    ts = [2, 4, 8, 12]
    # A straight line a + b T gives b (T_max - T_min) whatever a; every T counts.
    line = {t: np.array([0.1 + 0.02 * t]) for t in ts}
    assert slope(line)[0] == pytest.approx(0.02 * 10)
    bumped = {t: v + (0.05 if t == 4 else 0) for t, v in line.items()}
    # By hand: T mean 6.5, deviations -4.5, -2.5, 1.5, 5.5; sum of squares 59.
    assert slope(bumped)[0] == pytest.approx(0.2 + 0.05 * -2.5 / 59 * 10)


def test_the_point_estimates_are_the_rates_of_the_results_file() -> None:
    arms = {
        "base": BASE,
        "fixed-T12": BASE.shift(1.0),
        "fixed-T4": BASE.add(early=1.5),
        "budgetmix": BASE.shift(0.5),
        "process": BASE.shift(0.4),
    }
    study = small(arms)
    res = study.results
    found = analyse_results("gridnav", res, study.arms, replicates=50, mix_range=(4, 12))
    post = res.meta.post_error_states
    m = res.meta.decision_samples
    paired = [i for i, s in enumerate(post) if s["matches"]]
    trials = m * len(paired)

    def rates(label: str) -> tuple[float, float]:
        a = res.checkpoints[label].analysis
        on_post = sum(a.from_errors.optimal_counts[i] for i in paired) / trials
        matched = [
            np.mean([a.matched.optimal_counts[f] for f in post[i]["matches"]]) for i in paired
        ]
        return on_post, sum(matched) / trials

    b_post, b_matched = rates("base")
    for arm in ("fixed-T12", "fixed-T4", "budgetmix", "process"):
        per_run = []
        for label in study.arms[arm]:
            r_post, r_matched = rates(label)
            per_run.append(
                logit(r_post, trials)
                - logit(b_post, trials)
                - (logit(r_matched, trials) - logit(b_matched, trials))
            )
        assert found.where[arm].test.estimate.value == pytest.approx(np.mean(per_run))
        for t in res.meta.ts:
            cells = [res.checkpoints[label].cell(1, t).mean for label in study.arms[arm]]
            assert found.pass1[arm][t].value == pytest.approx(np.mean(cells))
    # The budget statistic: each run's excess is corrected by its own gain's deviation from the
    # arm's mean, and those corrections sum to 0, so the mean growth is the slope of the mean
    # gap minus the null.
    for row in found.budget.values():
        excess = {t: np.array([row.gap[t].value - row.null[t]]) for t in res.meta.ts}
        assert row.test.estimate.value == pytest.approx(slope(excess)[0])
    # Robustness by hand: the best fixed arm at each T of BudgetMix's range [4, 12], the lead
    # at the worst of them, and p from the intersection-union and union rules.
    robust = found.robust
    for t, best in robust.best.items():
        assert found.pass1[best][t].value == max(
            found.pass1[a][t].value for a in ("fixed-T12", "fixed-T4")
        )
        lead = found.pass1["budgetmix"][t].value - found.pass1[best][t].value
        assert robust.leads[t].value == pytest.approx(lead)
    assert set(robust.leads) == {4, 8, 12}
    worst = min(robust.leads.values(), key=lambda e: e.value)
    assert robust.test.estimate == worst
    up = max(t_sf(e.value / e.se, e.df) for e in robust.leads.values())
    down = min(t_sf(-e.value / e.se, e.df) for e in robust.leads.values())
    assert robust.test.p == pytest.approx(min(1.0, 2 * min(up, 3 * down)))
    mean = np.mean(
        [found.pass1["process"][t].value - found.pass1["budgetmix"][t].value for t in res.meta.ts]
    )
    assert found.process.estimate.value == pytest.approx(mean)
    # The oracle's ceiling per T is never below what any arm reached.
    for t, (ceiling, _) in found.ceiling.items():
        assert all(found.pass1[a][t].value <= ceiling + 1e-9 for a in found.pass1)


def test_an_arm_identical_to_its_comparison_has_zero_statistics_and_no_verdict() -> None:
    study = small({"base": BASE, "fixed-T12": BASE.shift(0.8), "budgetmix": BASE})
    res = study.results
    # Make fixed-T4 a copy of base and budgetmix a copy of fixed-T12, run for run.
    study.arms["fixed-T4"] = [f"fixed-T4-s{r}" for r in range(3)]
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
    assert found.gate.gains["fixed-T4"].value == 0 and found.gate.gains["fixed-T12"].value > 0
    # BudgetMix = fixed-T12 run for run: its lead over it is exactly 0, with the two arms' run
    # spreads (independent seeds) as its uncertainty.
    assert found.robust.leads[12].value == 0 and found.robust.leads[12].se > 0
    assert not any(t.shown or t.opposite for t in (copy_of_base.test, found.where["fixed-T4"].test))
    # adjust() is Holm over the family: every testable test, in order; the rest are outside.
    family = [t for t in found.tests() if t.testable]
    assert tests == family
    assert [t.adjusted for t in tests] == pytest.approx(holm([t.p for t in tests]), nan_ok=True)
    assert all(math.isnan(t.adjusted) for t in found.tests() if not t.testable)


def test_a_task_rl_did_not_move_leaves_the_family() -> None:
    moved = small({"base": BASE, "fixed-T12": BASE.shift(1.5)}, seed=1)
    still = small({"base": BASE, "fixed-T12": BASE}, seed=2)
    # Every run of "still" is base itself: its single-step gain is 0 with no spread.
    for label in still.arms["fixed-T12"]:
        still.results.checkpoints[label] = copy.deepcopy(still.results.checkpoints["base"])
    found = {
        "moved": analyse_results("gridnav", moved.results, moved.arms, replicates=100),
        "still": analyse_results("gridnav", still.results, still.arms, replicates=100),
    }
    family = adjust(found)
    assert found["moved"].gate.moved and not found["still"].gate.moved
    assert all(not t.testable for t in found["still"].tests())
    assert "did not move" in found["still"].where["fixed-T12"].test.untestable
    assert family and all(t in found["moved"].tests() for t in family)
    assert found["moved"].gate.gains["fixed-T12"].p < ALPHA
