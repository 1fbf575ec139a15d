"""Assignment 3: the BudgetMix budget distribution (lesson 5).

Implement `budget_probabilities`. Grade it with:

    python -m pytest tutorials/assignments/test_a3.py
"""

from __future__ import annotations


def budget_probabilities(
    budget_min: int, budget_max: int, distribution: str = "uniform"
) -> dict[int, float]:
    """{T: P(T)} for every integer T in [budget_min, budget_max], summing to 1.

    P(T) is proportional to w(T): w = 1 for "uniform", w = T for "long" (long budgets more often),
    w = 1 / T for "short". Raise ValueError when budget_min < 1, budget_min > budget_max, or the
    distribution is unknown.
    """
    raise NotImplementedError("assignment 3: implement budget_probabilities")
