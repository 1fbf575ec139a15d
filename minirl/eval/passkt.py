"""Pass@(K,T): the chance that at least one of K independent episodes succeeds within T turns.

Breadth K is how many episodes we may sample; depth T is the turn budget of each. For one task
instance we run n >= K episodes at budget T and count the c that succeed. The unbiased estimate of
pass@K from those n draws is

    pass@K = 1 - C(n - c, K) / C(n, K)

(the chance that a random K-subset of the n episodes holds no success). The naive alternative,
1 - (1 - c/n)^K, is biased low for K > 1: it treats the estimated rate as the true one. The ratio
of binomials overflows long before n = 10,000, so we use its product form

    C(n - c, K) / C(n, K) = prod_{i = n-c+1}^{n} (1 - K / i),

which only multiplies numbers in [0, 1]. Per-instance estimates are averaged over instances into a
K x T grid, each cell with the standard error of that mean and a bootstrap interval over instances.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np


def _check_count(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from c successes in n episodes: 1 - C(n-c, k) / C(n, k)."""
    for name, value in (("n", n), ("c", c), ("k", k)):
        _check_count(name, value)
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if k > n:
        raise ValueError(f"k={k} needs at least k episodes per instance, but n={n}")
    if c > n:
        raise ValueError(f"c={c} successes cannot exceed n={n} episodes")
    if n - c < k:  # every k-subset holds a success
        return 1.0
    failures_only = 1.0
    for i in range(n - c + 1, n + 1):
        failures_only *= 1.0 - k / i
    return 1.0 - failures_only


@dataclass
class Cell:
    """One entry of the grid: mean pass@K at budget T over instances, and its uncertainty."""

    k: int
    t: int
    mean: float
    stderr: float  # std over instances / sqrt(instances)
    ci_low: float  # bootstrap percentile interval over instances
    ci_high: float
    instances: int


@dataclass
class PassKTGrid:
    """The K x T grid; `cells[(k, t)]` is one Cell."""

    ks: list[int]
    ts: list[int]
    n: int
    cells: dict[tuple[int, int], Cell]

    def mean(self, k: int, t: int) -> float:
        return self.cells[(k, t)].mean

    def rows(self) -> list[dict]:
        """One flat dict per cell, K-major: the table written to results.jsonl."""
        return [asdict(self.cells[(k, t)]) for k in self.ks for t in self.ts]


def pass_at_kt(
    successes: Mapping[int, Sequence[int]],
    n: int,
    ks: Sequence[int],
    *,
    confidence: float = 0.95,
    bootstrap: int = 1000,
    seed: int = 0,
) -> PassKTGrid:
    """Average pass@K over instances for every (K, T).

    `successes[t][i]` is how many of the n episodes on instance i succeeded within t turns; every
    T must list the same instances in the same order (the bootstrap resamples instances jointly).
    """
    if not successes:
        raise ValueError("no budgets T given")
    if not ks:
        raise ValueError("no K given")
    ts = sorted(successes)
    sizes = {len(successes[t]) for t in ts}
    if len(sizes) != 1 or 0 in sizes:
        raise ValueError(f"every T needs the same, non-zero number of instances, got {sizes}")
    instances = sizes.pop()
    for k in ks:
        if k > n:
            raise ValueError(f"K={k} exceeds n={n} episodes per instance")
    rng = np.random.default_rng(seed)
    resample = rng.integers(0, instances, size=(bootstrap, instances))
    alpha = (1 - confidence) / 2
    cells = {}
    for k in ks:
        for t in ts:
            per_instance = np.array([pass_at_k(n, int(c), k) for c in successes[t]])
            mean = float(per_instance.mean())
            stderr = (
                float(per_instance.std(ddof=1) / math.sqrt(instances)) if instances > 1 else 0.0
            )
            if bootstrap > 0:
                means = per_instance[resample].mean(axis=1)
                low, high = np.quantile(means, [alpha, 1 - alpha])
            else:
                low = high = mean
            cells[(k, t)] = Cell(k, t, mean, stderr, float(low), float(high), instances)
    return PassKTGrid(list(ks), ts, n, cells)
