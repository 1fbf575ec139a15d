"""The reference implementations, wrapped to the assignments' plain-Python signatures.

The graders use these instead of your files when MINIRL_REFERENCE=1 is set, which is how CI checks
that every grader passes a correct implementation (and fails the stubs).
"""

from __future__ import annotations

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
