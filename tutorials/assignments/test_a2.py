"""Grader for assignment 2 (pass@k): brute-force enumeration, exact arithmetic, edge cases."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import pytest
from grading import implementation

pass_at_k = implementation("a2_pass_at_k", "pass_at_k")


@pytest.mark.parametrize("n", range(1, 8))
def test_against_every_k_subset(n: int) -> None:
    for c in range(n + 1):
        outcomes = [1] * c + [0] * (n - c)
        for k in range(1, n + 1):
            subsets = list(itertools.combinations(outcomes, k))
            truth = sum(any(s) for s in subsets) / len(subsets)
            assert pass_at_k(n, c, k) == pytest.approx(truth, abs=1e-12)


def test_examples() -> None:
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)
    assert pass_at_k(7, 3, 1) == pytest.approx(3 / 7)
    assert pass_at_k(10, 0, 3) == 0.0
    assert pass_at_k(10, 8, 3) == 1.0  # n - c < k: exactly one


@pytest.mark.parametrize(("c", "k"), [(3, 10), (50, 100), (500, 1000), (9000, 900)])
def test_large_n_is_exact(c: int, k: int) -> None:
    n = 10_000
    truth = 1 - Fraction(math.comb(n - c, k), math.comb(n, k))
    assert pass_at_k(n, c, k) == pytest.approx(float(truth), rel=1e-9, abs=1e-12)


@pytest.mark.parametrize(("n", "c", "k"), [(4, 1, 5), (4, 5, 2), (-1, 0, 1), (4, -1, 1), (4, 1, 0)])
def test_bad_input_raises(n: int, c: int, k: int) -> None:
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)
