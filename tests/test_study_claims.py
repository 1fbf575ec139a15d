"""The study's statistics by hand, on simulated results files shaped like an evaluation's."""

from __future__ import annotations

import copy
import math
from types import SimpleNamespace

import numpy as np
import pytest

from minirl.study import simulate
from minirl.study.bootstrap import TURN_BUCKETS, Design, Units, design, draws, holm, t_sf
from minirl.study.claims import (
    ALPHA,
    adjust,
    analyse_results,
    pair_buckets,
    position_gain,
    slope,
)

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

    def pair_logits(label: str) -> tuple[np.ndarray, np.ndarray]:
        scores = res.checkpoints[label].analysis.position
        pre, post = np.array(scores.optimal_pre), np.array(scores.optimal_post)
        assert pre.min() > 0.01 and post.max() < 0.99  # no clip: plain log-odds below
        return np.log(pre / (1 - pre)), np.log(post / (1 - post))

    d = design(res)
    base_pre, base_post = pair_logits("base")
    assert len(res.meta.position_pairs) > 10
    b_post, b_matched = rates("base")
    for arm in ("fixed-T12", "fixed-T4", "budgetmix", "process"):
        per_run, gains = [], []
        for label in study.arms[arm]:
            r_post, r_matched = rates(label)
            per_run.append(
                logit(r_post, trials)
                - logit(b_post, trials)
                - (logit(r_matched, trials) - logit(b_matched, trials))
            )
            arm_pre, arm_post = pair_logits(label)
            ones = np.ones(d.instances)
            gains.append(gain_by_hand(arm_pre - base_pre, arm_post - base_post, d, ones))
        assert found.where[arm].matched.value == pytest.approx(np.mean(per_run))
        assert found.where[arm].test.estimate.value == pytest.approx(np.mean(gains))
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


def gain_by_hand(d_pre: np.ndarray, d_post: np.ndarray, d: Design, weights: np.ndarray) -> float:
    """The same-position gain under one replicate's instance weights, with the turn levels from
    a weighted least-squares fit of D_before on instance dummies and turn-bucket dummies."""
    pre_b, post_b = pair_buckets(d)
    levels = sorted(set(pre_b.tolist()))
    instances = weights.size
    weight = weights[d.pair_instance]
    x = np.hstack(
        [
            (d.pair_instance[:, None] == np.arange(instances)).astype(float),
            (pre_b[:, None] == np.array(levels[1:])).astype(float),
        ]
    )
    keep = weight > 0
    root = np.sqrt(weight[keep])[:, None]
    coef = np.linalg.lstsq(x[keep] * root, d_pre[keep] * root[:, 0], rcond=None)[0]
    g = np.zeros(len(TURN_BUCKETS))
    g[levels[1:]] = coef[instances:]
    return float(np.average(d_post - d_pre - (g[post_b] - g[pre_b]), weights=weight))


def _pair_units(logits_pre: np.ndarray, logits_post: np.ndarray) -> Units:
    empty = np.zeros(0)
    sigmoid = 1 / (1 + np.exp(-np.stack([logits_pre, logits_post])))
    return Units({}, empty, empty, empty, empty, sigmoid[0], sigmoid[1])


def test_the_same_position_gain_by_hand_and_against_a_fixed_effects_fit() -> None:
    """recovery = mean_i [(D_after - D_before) - (g(after) - g(before))], g the arm's gain by turn
    bucket net of the instance: 0 for any gain by instance and turn bucket, c for +c after every
    error, and per replicate the weighted least-squares fit with instance dummies."""
    rng = np.random.default_rng(0)
    pairs, instances = 60, 8
    d = SimpleNamespace(
        pair_instance=rng.integers(0, instances, pairs), pair_turn=rng.integers(1, 9, pairs)
    )
    pre_b, post_b = pair_buckets(d)
    base_pre, base_post = rng.uniform(-2, 2, pairs), rng.uniform(-2, 2, pairs)
    base = _pair_units(base_pre, base_post)
    w = draws(instances, 30, seed=1)
    by_instance, by_turn = rng.uniform(-1, 1, instances), rng.uniform(-1, 1, len(TURN_BUCKETS))
    blind_pre = base_pre + by_instance[d.pair_instance] + by_turn[pre_b]
    blind_post = base_post + by_instance[d.pair_instance] + by_turn[post_b]
    blind = position_gain(_pair_units(blind_pre, blind_post), base, d, w)
    assert np.abs(blind).max() < 1e-9  # a history-blind gain, whatever its instance and turn
    # A plain mean per turn bucket would read the instance gain as a turn effect here: the
    # buckets hold the instances in unequal shares.
    recovering = position_gain(_pair_units(blind_pre, blind_post + 0.4), base, d, w)
    assert recovering == pytest.approx(np.full(w.shape[0], 0.4))
    # Any arm, any replicate: against a weighted least-squares fit with instance dummies.
    # (Log-odds within +-4.6, the clip's: no chance here is clipped.)
    arm_pre, arm_post = base_pre + rng.uniform(-2, 2, pairs), base_post + rng.uniform(-2, 2, pairs)
    gain = position_gain(_pair_units(arm_pre, arm_post), base, d, w)
    for r in (0, 7, 19):
        by_hand = gain_by_hand(arm_pre - base_pre, arm_post - base_post, d, w[r])
        assert gain[r] == pytest.approx(by_hand, abs=1e-8)
    # Without the turn correction: the plain weighted mean of D_after - D_before.
    plain = position_gain(_pair_units(arm_pre, arm_post), base, d, w, by_turn=False)
    change = (arm_post - base_post) - (arm_pre - base_pre)
    assert plain[3] == pytest.approx(np.average(change, weights=w[3, d.pair_instance]))


def test_sparse_turn_buckets_pool_with_an_earlier_one() -> None:
    """Turns 1 and 6+ hold enough pairs; turns 2-5 too few: they read turn 1's level."""
    turns = np.array([1] * 12 + [2, 3, 4, 5] + [7] * 12)
    d = SimpleNamespace(pair_instance=np.zeros(turns.size, int), pair_turn=turns)
    pre, post = pair_buckets(d)
    assert pre.tolist() == [0] * 16 + [4] * 12
    assert post.tolist() == [0] * 15 + [4] * 13  # turn 5's state after its error is at turn 6
