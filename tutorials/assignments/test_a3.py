"""Grader for assignment 3 (BudgetMix budget distribution): exact probabilities and errors."""

from __future__ import annotations

import pytest
from grading import implementation

budget_probabilities = implementation("a3_budgets", "budget_probabilities")


def test_uniform() -> None:
    probs = budget_probabilities(4, 7)
    assert sorted(probs) == [4, 5, 6, 7]
    assert all(p == pytest.approx(0.25) for p in probs.values())


def test_long_is_proportional_to_t() -> None:
    probs = budget_probabilities(2, 4, "long")
    assert probs == pytest.approx({2: 2 / 9, 3: 3 / 9, 4: 4 / 9})


def test_short_is_proportional_to_one_over_t() -> None:
    probs = budget_probabilities(1, 3, "short")
    total = 1 + 1 / 2 + 1 / 3
    assert probs == pytest.approx({1: 1 / total, 2: 0.5 / total, 3: (1 / 3) / total})


@pytest.mark.parametrize("distribution", ["uniform", "long", "short"])
def test_sums_to_one_and_single_budget(distribution: str) -> None:
    assert sum(budget_probabilities(3, 30, distribution).values()) == pytest.approx(1.0)
    assert budget_probabilities(8, 8, distribution) == pytest.approx({8: 1.0})


@pytest.mark.parametrize(
    ("lo", "hi", "dist"), [(0, 4, "uniform"), (5, 4, "uniform"), (2, 4, "zipf")]
)
def test_bad_input_raises(lo: int, hi: int, dist: str) -> None:
    with pytest.raises(ValueError):
        budget_probabilities(lo, hi, dist)
