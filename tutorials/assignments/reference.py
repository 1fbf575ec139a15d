"""The reference implementations, wrapped to the assignments' plain-Python signatures.

The graders use these instead of your files when MINIRL_REFERENCE=1 is set, which is how CI checks
that every grader passes a correct implementation (and fails the stubs).
"""

from __future__ import annotations

import math

import torch

from minirl import budgets, grpo
from minirl.eval import passkt
from tasks import hilo


def group_advantages(
    rewards: list[float], num_generations: int, scale_rewards: str = "group", eps: float = 1e-4
) -> list[float]:
    advantages, _ = grpo.group_advantages(
        torch.tensor(rewards, dtype=torch.float32), num_generations, scale_rewards, eps
    )
    return advantages.tolist()


def pass_at_k(n: int, c: int, k: int) -> float:
    return passkt.pass_at_k(n, c, k)


def budget_probabilities(
    budget_min: int, budget_max: int, distribution: str = "uniform"
) -> dict[int, float]:
    return budgets.budget_probabilities(budget_min, budget_max, distribution)


def optimal_guesses(history: list[tuple[int, str]], n: int) -> set[int]:
    return {int(g) for g in hilo.minimax_guesses(*hilo.belief(history, n))}


def post_error_states(episodes: list[list[bool]]) -> list[tuple[int, int]]:
    from minirl.episode import Episode, Turn
    from minirl.eval.analysis import first_error

    found = []
    for i, optimal in enumerate(episodes):
        e = Episode("gridnav", 0, 0, len(optimal), True, 1)
        e.turns = [Turn("x", "x", True, False, o, 0.0, 0.0, 0.0) for o in optimal]
        j = first_error(e)
        if j is not None and j < e.turns_used:  # the rule of minirl.eval.recovery
            found.append((i, j))
    return found


def recovery_gain(
    base_fresh: list[int],
    arm_fresh: list[int],
    base_post: list[int],
    arm_post: list[int],
    samples: int,
) -> float:
    import numpy as np

    from minirl.study.bootstrap import empirical_logit

    def logit(counts: list[int]) -> float:
        trials = samples * len(counts)
        return float(empirical_logit(np.array([sum(counts) / trials]), trials)[0])

    return logit(arm_post) - logit(base_post) - (logit(arm_fresh) - logit(base_fresh))


def match_states(
    post: list[tuple[int, tuple[int, int, int]]],
    fresh: list[tuple[int, tuple[int, int, int]]],
    per_state: int,
) -> list[list[int]]:
    from minirl.eval.recovery import match

    return match(post, fresh, per_state)


def same_position_deficit(
    before: list[float], after: list[float], instances: list[int]
) -> tuple[float, float]:
    from minirl.eval.position import PairScore
    from minirl.tools.error_probe import summarize

    found = summarize(
        [
            PairScore(g, b, a, math.nan, math.nan)
            for g, b, a in zip(instances, before, after, strict=True)
        ]
    )
    return found.deficit, found.se
