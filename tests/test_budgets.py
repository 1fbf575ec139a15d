"""Budget samplers: ranges, exact probabilities, empirical frequencies, seeding, errors."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from minirl.budgets import BUDGET_DISTRIBUTIONS, MODES, budget_probabilities, sample_budgets

RANGE = {"budget": 8, "budget_min": 4, "budget_max": 12}


def test_choices_are_listed() -> None:
    assert MODES == ("fixed", "budgetmix")
    assert set(BUDGET_DISTRIBUTIONS) == {"uniform", "long", "short"}


def test_fixed_gives_every_group_the_budget() -> None:
    out = sample_budgets(50, mode="fixed", rng=random.Random(0), **RANGE)
    assert out == [8] * 50
    assert sample_budgets(0, mode="fixed", rng=random.Random(0), **RANGE) == []


def test_probabilities_by_hand() -> None:
    # Range 2..4: uniform 1/3 each; long weights 2,3,4 of 9; short weights 1/2,1/3,1/4 of 13/12.
    assert budget_probabilities(2, 4, "uniform") == pytest.approx({2: 1 / 3, 3: 1 / 3, 4: 1 / 3})
    assert budget_probabilities(2, 4, "long") == pytest.approx({2: 2 / 9, 3: 3 / 9, 4: 4 / 9})
    assert budget_probabilities(2, 4, "short") == pytest.approx({2: 6 / 13, 3: 4 / 13, 4: 3 / 13})
    assert budget_probabilities(5, 5) == {5: 1.0}


@pytest.mark.parametrize("distribution", BUDGET_DISTRIBUTIONS)
def test_budgetmix_frequencies_match(distribution: str) -> None:
    n = 20_000
    out = sample_budgets(
        n, mode="budgetmix", distribution=distribution, rng=random.Random(123), **RANGE
    )
    counts = Counter(out)
    probs = budget_probabilities(4, 12, distribution)
    assert set(counts) == set(range(4, 13))  # in range, and every value hit
    chi2 = sum((counts[t] - n * p) ** 2 / (n * p) for t, p in probs.items())
    # 9 values -> 8 degrees of freedom; 26.12 is the p = 0.001 critical value.
    assert chi2 < 26.12


def test_long_and_short_tilt_the_right_way() -> None:
    mean = {
        d: sum(t * p for t, p in budget_probabilities(4, 12, d).items())
        for d in BUDGET_DISTRIBUTIONS
    }
    assert mean["uniform"] == pytest.approx(8.0)
    assert mean["short"] < mean["uniform"] < mean["long"]


def test_same_seed_same_budgets() -> None:
    def draw(seed: int) -> list[int]:
        return sample_budgets(200, mode="budgetmix", rng=random.Random(seed), **RANGE)

    assert draw(7) == draw(7)
    assert draw(7) != draw(8)


def test_errors() -> None:
    rng = random.Random(0)
    with pytest.raises(ValueError, match="fixed"):
        sample_budgets(4, mode="mixed", rng=rng, **RANGE)
    with pytest.raises(ValueError, match="uniform"):
        sample_budgets(4, mode="budgetmix", distribution="normal", rng=rng, **RANGE)
    with pytest.raises(ValueError, match="budget must be >= 1"):
        sample_budgets(4, mode="fixed", budget=0, budget_min=4, budget_max=12, rng=rng)
    with pytest.raises(ValueError, match="budget_min must be >= 1"):
        sample_budgets(4, mode="budgetmix", budget=8, budget_min=0, budget_max=12, rng=rng)
    with pytest.raises(ValueError, match="budget_min must be <= budget_max"):
        sample_budgets(4, mode="budgetmix", budget=8, budget_min=9, budget_max=5, rng=rng)
    with pytest.raises(ValueError, match="num_groups"):
        sample_budgets(-1, mode="fixed", rng=rng, **RANGE)
    with pytest.raises(ValueError, match="long"):
        budget_probabilities(4, 12, "geometric")
