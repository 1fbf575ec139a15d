"""The simulated policies: their exact chances against their own dice, and the fast reset."""

from __future__ import annotations

import math
import random

import pytest

import tasks
from minirl.study import simulate


@pytest.mark.parametrize("task", ["gridnav", "fog", "hilo", "house", "icy"])
def test_fresh_is_reset_without_rebuilding_the_instance(task: str) -> None:
    for seed in tasks.EVAL_SEEDS[:15]:
        rng = random.Random(seed)
        for _ in range(2):  # the copy is fresh every time: steps on one leave the next alone
            a, b = tasks.make(task), simulate.fresh(task, seed)
            assert a.reset(seed) == b.observe()
            for _ in range(10):
                action = rng.choice(a.action_words)
                x, y = a.step(action), b.step(action)
                assert (x.observation, x.reward, x.done, x.info) == (
                    y.observation,
                    y.reward,
                    y.done,
                    y.info,
                )
                if x.done:
                    break
                assert a.optimal_actions() == b.optimal_actions()


def test_chance_is_the_frequency_the_policy_plays_with() -> None:
    """`chance` is every study statistic's estimand in the validation: check it against 3000
    sampled next actions in fresh and post-error states, for a policy with every departure
    from the null's model (sticky errors, unequal instances, turn and budget dependence)."""
    policy = simulate.SimPolicy(
        0.55, 0.35, spread=0.8, early=0.7, hard=0.5, hurry=0.6, repeat=0.4, state_sd=0.7, run="r"
    )
    seeds = list(tasks.EVAL_SEEDS[:6])
    played = simulate.episodes("fog", seeds, simulate.SimPolicy(0.5, 0.5), 8, 2, stream=7)
    states = []
    for s, row in zip(seeds, played, strict=True):
        for e in row:
            for j in (0, e.first_error or 0, (e.first_error or 0) + 1):
                if j < len(e.actions):
                    states.append((s, e.actions[:j]))
    assert any(a and simulate.context("fog", s, a, 8).after_error for s, a in states)
    dice = random.Random(0)
    for seed, start in states[:12]:
        budget = len(start) + 1  # one more turn: the one whose action is sampled
        hits = sum(
            simulate.play("fog", seed, policy, budget, dice, start).optimal[-1] for _ in range(3000)
        )
        exact = simulate.chance(simulate.context("fog", seed, start, budget), policy)
        se = math.sqrt(exact * (1 - exact) / 3000) or 1e-9
        assert abs(hits / 3000 - exact) < 4 * se + 1e-9, (seed, start)


def test_a_budget_aware_policy_is_played_at_every_budget() -> None:
    """A policy that reads the turns left cannot be truncated from one long episode."""
    seeds = list(tasks.EVAL_SEEDS[:20])
    hurried = simulate.SimPolicy(0.3, 0.3, hurry=3.0)
    blind = simulate.SimPolicy(0.3, 0.3)
    wins = simulate.wins("gridnav", seeds, hurried, [2, 12], 4)
    cut = simulate.successes(simulate.episodes("gridnav", seeds, hurried, 12, 4), [2, 12])
    assert hurried.budget_aware and not blind.budget_aware
    assert sum(wins[2]) > sum(cut[2])  # at T = 2 both turns are its last two
    assert simulate.wins("gridnav", seeds, blind, [2, 12], 4) == simulate.successes(
        simulate.episodes("gridnav", seeds, blind, 12, 4), [2, 12]
    )


def test_the_same_position_pairs_are_failed_first_errors_the_episode_played_on_from() -> None:
    """sim_results finds a simulated base's pairs as minirl.eval.position finds a model's, and
    scores each run's exact chances in both states."""
    base = simulate.SimPolicy(0.6, 0.45, repeat=0.5)
    study = simulate.sim_results("gridnav", {"base": base, "arm": base.shift(0.5)}, runs=2)
    pairs = study.results.meta.position_pairs
    assert len(pairs) > 50
    for p in pairs:
        before = simulate.fresh("gridnav", p["seed"])
        for action in p["replies"][:-1]:
            assert action in before.optimal_actions()  # no error before the failed one
            before.step(action)
        assert p["error"] == p["replies"][-1] and p["error"] not in p["optimal"]
        assert sorted(before.optimal_actions()) == p["optimal"]
        step = before.step(p["error"])
        assert step.info.get("error") or step.info.get("mistake")  # it failed, not a detour
        assert sorted(before.optimal_actions()) == p["optimal"]  # and left the agent in place
    for label in ("base", "arm-s0", "arm-s1"):
        scores = study.results.checkpoints[label].analysis.position
        truth = study.truth[label]
        assert scores.optimal_pre == truth["pos_pre"] and scores.optimal_post == truth["pos_post"]
    # The sticky base repeats the failed action w.p. 0.5: after it, its chance is halved.
    truth = study.truth["base"]
    q_post = [
        simulate.chance(simulate.context("gridnav", p["seed"], p["replies"], 12), base)
        for p in pairs
    ]
    assert truth["pos_post"] == pytest.approx(q_post)
    assert truth["pos_post"] == pytest.approx([0.5 * 0.45] * len(pairs))


def test_a_run_s_state_noise_differs_by_state_and_not_by_policy() -> None:
    """Two runs' noises are independent draws per kind of state; the same run's is the same for
    every policy it is given to (a shifted copy keeps it), so paired statistics pair."""
    a = simulate.SimPolicy(0.6, 0.6, state_sd=1.0, run="a")
    b = simulate.SimPolicy(0.6, 0.6, state_sd=1.0, run="b")
    draws_a = [a.q(t, e, 0.0, 12 - t, 7) for t in range(1, 9) for e in (False, True)]
    draws_b = [b.q(t, e, 0.0, 12 - t, 7) for t in range(1, 9) for e in (False, True)]
    assert len(set(draws_a)) == 16 and draws_a != draws_b
    assert a.q(3, True, 0.0, 9, 7) == a.q(3, True, 0.0, 9, 7)
    shifted = a.shift(0.4)
    assert simulate.logit(shifted.q(3, False, 0.0, 9, 7)) == pytest.approx(
        simulate.logit(a.q(3, False, 0.0, 9, 7)) + 0.4
    )
