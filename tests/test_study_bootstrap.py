"""The study's bootstrap against brute force, and Holm's adjustment by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from minirl.study.bootstrap import (
    Design,
    Estimate,
    Units,
    arm_measures,
    draws,
    empirical_logit,
    holm,
    rate,
)


def test_a_replicate_is_the_rate_of_the_resampled_clusters() -> None:
    """Weights over instances = taking every unit of a drawn instance as often as it was drawn."""
    rng = np.random.default_rng(0)
    where = np.array([0, 0, 1, 2, 2, 2, 3])  # the instance each state belongs to
    x = rng.integers(0, 3, size=where.size).astype(float)  # optimal of 2 samples per state
    d = draws(4, {"arm": 1}, replicates=50, seed=1)
    got = rate(x, 2, where, d.instances)
    assert got[0] == pytest.approx(x.sum() / (2 * x.size))  # row 0 is the point estimate
    for b in range(1, 51):
        drawn = np.repeat(np.arange(4), d.instances[b].astype(int))  # the resampled instances
        units = np.concatenate([x[where == i] for i in drawn])
        expected = units.sum() / (2 * units.size) if units.size else math.nan
        assert got[b] == pytest.approx(expected, nan_ok=True)


def test_an_arm_is_the_mean_of_its_resampled_runs_and_shares_the_instance_draws() -> None:
    d = Design(
        n=2,
        m=1,
        ts=[4],
        instances=3,
        fresh_instance=np.array([0, 1, 2]),
        post_instance=np.array([0, 2]),
        post_kind=["avoidable", "detour"],
    )

    def run(wins: list[int], fresh: list[int]) -> Units:
        return Units(
            {4: np.array(wins, float)},
            np.array(fresh, float),
            np.array([1.0, 0.0]),
            np.array([1.0, 1.0]),
        )

    runs = [run([2, 0, 1], [1, 0, 1]), run([0, 0, 2], [0, 0, 0])]
    draw = draws(3, {"base": 1, "rl": 2}, replicates=40, seed=2)
    got = arm_measures(runs, d, draw, "rl")
    for b in range(41):
        w, v = draw.instances[b], draw.runs["rl"][b]
        per_run = [(w * r.successes[4]).sum() / (2 * w.sum()) for r in runs]
        assert got["pass1@4"][b] == pytest.approx(np.dot(v, per_run) / v.sum())
    # One kind keeps only its states.
    only = arm_measures(runs, d, draw, "rl", kind="detour")
    assert only["post_success"][0] == pytest.approx(1.0)
    assert only["post_step"][0] == pytest.approx(0.0)


def test_estimate_and_empirical_logit() -> None:
    stat = np.concatenate([[0.3], np.random.default_rng(0).normal(0.3, 0.1, 4000)])
    e = Estimate.of(stat)
    assert e.value == 0.3 and e.se == pytest.approx(0.1, rel=0.05)
    assert e.low == pytest.approx(0.3 - 1.96 * 0.1, abs=0.02)
    assert e.p == pytest.approx(0.5 * math.erfc(3 / math.sqrt(2)), rel=0.2)  # 1 - Phi(3)
    assert math.isnan(Estimate.of(np.full(5, math.nan)).value)
    # Half a trial from 0 and 1: finite, and symmetric.
    assert empirical_logit(np.array([0.0, 1.0, 0.5]), 10) == pytest.approx(
        [-math.log(19), math.log(19), 0.0]
    )


def test_holm_by_hand() -> None:
    # Sorted: 0.01 x 3 = 0.03; 0.03 x 2 = 0.06; 0.04 x 1 = 0.04 -> kept monotone at 0.06.
    got = holm([0.01, 0.04, 0.03, math.nan])
    assert got[:3] == pytest.approx([0.03, 0.06, 0.06]) and math.isnan(got[3])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])


def test_detectable_effect_and_the_planned_standard_errors() -> None:
    from minirl.study.power import detectable, plan

    # One one-sided test at 5% with 80% power: (1.645 + 0.842) SE.
    assert detectable(0.1, 1) == pytest.approx(0.2487, abs=1e-3)
    # Bonferroni over 36 tests, two-sided: z(1 - 0.05 / 72) = 3.197.
    assert detectable(0.1, 36, two_sided=True) == pytest.approx(0.1 * (3.197 + 0.842), abs=1e-3)
    sizes = dict(n=4, ts=[2, 4, 8, 12], fresh_states=200, post_states=200, samples=2, seeds=3)
    small, large = plan(instances=60, family=36, **sizes), plan(instances=240, family=36, **sizes)
    for a, b in zip(small, large, strict=True):
        if a.statistic.startswith("recovery"):  # set by the number of states, not instances
            assert b.se == a.se
        else:
            assert b.se < a.se
    # Recovery's SE by hand: deff 1.3, p = 0.5, 400 samples per state set, and the seed spread.
    var_f = 1.3 / (200 * 2 * 0.25)
    seed = (0.05 / 0.25) ** 2 / 3
    recovery = next(p for p in small if p.statistic.startswith("recovery"))
    assert recovery.se == pytest.approx(math.sqrt(2 * (2 * var_f) + 2 * seed))
