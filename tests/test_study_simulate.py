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
    policy = simulate.SimPolicy(0.55, 0.35, spread=0.8, early=0.7, hard=0.5, hurry=0.6, repeat=0.4)
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
