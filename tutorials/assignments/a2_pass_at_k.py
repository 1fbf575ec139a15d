"""Assignment 2: the unbiased pass@k estimator (lesson 6).

Implement `pass_at_k`. Grade it with:

    python -m pytest tutorials/assignments/test_a2.py
"""

from __future__ import annotations


def pass_at_k(n: int, c: int, k: int) -> float:
    """The chance that k episodes drawn without replacement from n, of which c succeeded, hold
    at least one success: 1 - C(n - c, k) / C(n, k).

    It must be exact to about 1e-9 for n up to 10,000 (the binomials themselves overflow a float),
    return exactly 1.0 when n - c < k, and raise ValueError for k < 1, k > n, c > n or any
    negative input.
    """
    raise NotImplementedError("assignment 2: implement pass_at_k")
