"""The Pass@(K,T) estimator against brute force, exact arithmetic and Monte Carlo."""

from __future__ import annotations

import itertools
import math
import random
from fractions import Fraction

import pytest

from minirl.eval.passkt import pass_at_k, pass_at_kt


def brute_force(outcomes: list[int], k: int) -> float:
    """The fraction of all k-subsets of the n outcomes that contain at least one success."""
    subsets = list(itertools.combinations(outcomes, k))
    return sum(any(s) for s in subsets) / len(subsets)


@pytest.mark.parametrize("n", range(1, 9))
def test_matches_enumerating_every_subset(n: int) -> None:
    for c in range(n + 1):
        outcomes = [1] * c + [0] * (n - c)
        for k in range(1, n + 1):
            assert pass_at_k(n, c, k) == pytest.approx(brute_force(outcomes, k), abs=1e-12)


def test_exactly_one_when_every_subset_holds_a_success() -> None:
    assert pass_at_k(10, 8, 3) == 1.0  # n - c = 2 < k
    assert pass_at_k(5, 5, 1) == 1.0
    assert pass_at_k(10_000, 9_999, 2) == 1.0


def test_hand_computed_values() -> None:
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)  # 3 of the 6 pairs hold the success
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10)
    assert pass_at_k(10, 0, 5) == 0.0
    assert pass_at_k(7, 3, 1) == pytest.approx(3 / 7)  # pass@1 is the success rate


@pytest.mark.parametrize(("c", "k"), [(1, 1), (3, 10), (50, 100), (500, 1000), (9000, 900)])
def test_large_n_against_exact_rational_arithmetic(c: int, k: int) -> None:
    n = 10_000
    exact = 1 - Fraction(math.comb(n - c, k), math.comb(n, k))
    assert pass_at_k(n, c, k) == pytest.approx(float(exact), rel=1e-9, abs=1e-12)


def test_large_n_against_monte_carlo() -> None:
    n, c, k, draws = 10_000, 20, 50, 4000
    rng = random.Random(0)
    hits = sum(any(i < c for i in rng.sample(range(n), k)) for _ in range(draws))
    estimate = hits / draws
    p = pass_at_k(n, c, k)
    assert abs(estimate - p) < 4 * math.sqrt(p * (1 - p) / draws)


def test_unbiased_where_the_plug_in_estimate_is_not() -> None:
    """Averaged over many experiments of n draws, the estimator recovers the true pass@k."""
    true_p, n, k, experiments = 0.2, 8, 4, 20_000
    rng = random.Random(1)
    counts = [sum(rng.random() < true_p for _ in range(n)) for _ in range(experiments)]
    unbiased = sum(pass_at_k(n, c, k) for c in counts) / experiments
    plug_in = sum(1 - (1 - c / n) ** k for c in counts) / experiments
    truth = 1 - (1 - true_p) ** k
    assert abs(unbiased - truth) < 0.005
    assert truth - plug_in > 0.03  # the plug-in estimate is biased low


@pytest.mark.parametrize(
    ("n", "c", "k", "message"),
    [
        (4, 1, 5, "k=5 needs at least k episodes"),
        (4, 5, 2, "c=5 successes cannot exceed n=4"),
        (-1, 0, 1, "n must be >= 0"),
        (4, -1, 1, "c must be >= 0"),
        (4, 1, 0, "k must be >= 1"),
        (4, 1.5, 1, "c must be an integer"),
    ],
)
def test_bad_inputs_raise(n: int, c: int, k: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        pass_at_k(n, c, k)


def test_grid_means_stderr_and_interval() -> None:
    # Three instances, n = 4; successes within T = 1 and T = 2.
    successes = {1: [0, 1, 4], 2: [2, 3, 4]}
    grid = pass_at_kt(successes, n=4, ks=[1, 2], bootstrap=2000)
    per_instance = [0.0, pass_at_k(4, 1, 2), 1.0]
    cell = grid.cells[(2, 1)]
    assert cell.mean == pytest.approx(sum(per_instance) / 3)
    mean = cell.mean
    sd = math.sqrt(sum((x - mean) ** 2 for x in per_instance) / 2)
    assert cell.stderr == pytest.approx(sd / math.sqrt(3))
    assert cell.ci_low <= cell.mean <= cell.ci_high
    assert grid.mean(1, 2) == pytest.approx((2 + 3 + 4) / 12)
    assert grid.ts == [1, 2] and grid.ks == [1, 2] and cell.instances == 3
    assert [(r["k"], r["t"]) for r in grid.rows()] == [(1, 1), (1, 2), (2, 1), (2, 2)]


def test_grid_rejects_bad_shapes() -> None:
    with pytest.raises(ValueError, match="no budgets"):
        pass_at_kt({}, n=4, ks=[1])
    with pytest.raises(ValueError, match="K=8 exceeds n=4"):
        pass_at_kt({1: [1]}, n=4, ks=[8])
    with pytest.raises(ValueError, match="same, non-zero number of instances"):
        pass_at_kt({1: [1, 2], 2: [1]}, n=4, ks=[1])
