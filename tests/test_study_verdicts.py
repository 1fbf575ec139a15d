"""The verdict rules against simulated policies whose skills are known (minirl.study.validate).

At the study's sizes (60 instances, n = 4, 200 fresh and 200 post-error states, 2 samples each,
3 training seeds): a rule must not say "shown" for a policy that lacks the skill, and must say it,
most of the time, for one that has it. `python -m minirl.study.validate --reps 100` measures the
rates the report quotes; here a few simulated studies check that they hold.
"""

from __future__ import annotations

import numpy as np
import pytest

from minirl.study import simulate
from minirl.study.claims import ALPHA, analyse_results
from minirl.study.validate import Sizes, Skills, verdict_rates


@pytest.mark.slow
def test_each_rule_separates_the_skill_it_names_from_the_others() -> None:
    rates = verdict_rates("fog", Skills(), reps=8, replicates=200)
    # No skill, no verdict: a single-step gain is neither recovery nor a need for turns, and
    # two identical arms are not ahead of each other (at most 1 of 8 at the unadjusted 5%).
    assert rates.false_shown == {
        "recovery, single-step-only arm": pytest.approx(0.0, abs=0.125),
        "budget dependence, single-step-only arm": pytest.approx(0.0, abs=0.125),
        "robustness, BudgetMix = fixed-T12": pytest.approx(0.0, abs=0.125),
    }
    # The skill is found, even at Bonferroni's 0.05 / 36, most of the time.
    assert rates.power["recovery, recovery-only arm"] >= 0.625
    assert rates.power["budget dependence, recovery-only arm"] >= 0.5
    assert rates.power["robustness, BudgetMix ahead everywhere"] >= 0.875


def test_the_old_success_after_an_error_rewards_a_single_step_gain() -> None:
    """Issue 17's finding 1, on a policy with no recovery skill at all."""
    base = simulate.SimPolicy(0.6, 0.6)
    study = simulate.sim_results(
        "gridnav", {"base": base, "fixed-T12": base.shift(0.8)}, instances=60, seed=3
    )
    res = study.results
    after = [res.checkpoints[r].analysis.recovery.after_error.rate for r in study.arms["fixed-T12"]]
    old_gain = np.mean(after) - res.checkpoints["base"].analysis.recovery.after_error.rate
    assert old_gain > 0.1  # "success after an error" rose: the old rule said "recovery shown"
    found = analyse_results("gridnav", res, study.arms, replicates=400)
    recovery = found.where["fixed-T12"].test
    assert recovery.p > ALPHA  # the new rule does not: post-error minus fresh log-odds is ~0
    assert abs(recovery.estimate.value) < 2.5 * recovery.estimate.se


def test_the_rules_are_checked_at_the_sizes_given(monkeypatch: pytest.MonkeyPatch) -> None:
    """The report checks its rules at its own study's sizes, not at the committed study's."""
    played: list[tuple[int, int, tuple[int, ...]]] = []
    real = simulate.sim_results

    def recording(task: str, arms: dict, **sizes: object) -> simulate.SimStudy:
        study = real(task, arms, **sizes)
        meta = study.results.meta
        played.append((len(meta.seeds), meta.n, tuple(meta.ts)))
        assert {len(study.arms[a]) for a in study.arms if a != "base"} == {sizes["runs"]}
        return study

    monkeypatch.setattr(simulate, "sim_results", recording)
    toy = Sizes(runs=2, instances=5, n=2, ts=(2, 4), fresh_states=10, post_states=10)
    rates = verdict_rates("fog", Skills(), reps=1, replicates=50, sizes=toy)
    assert played == [(5, 2, (2, 4))] * 2  # the two simulated studies of the one replicate
    assert rates.reps == 1 and len(rates.false_shown) == len(rates.power) == 3
