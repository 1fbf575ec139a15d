"""The paired, clustered, two-level bootstrap behind every uncertainty and verdict of the study.

What the arms share, and what varies:
- Every arm is evaluated on the same held-out instances, and asked in the same fixed states
  (fresh and post-error), which belong to instances. Differences between arms are therefore
  *paired*: an instance that is hard for base is hard for the RL arm too, and resampling the
  instances once per replicate, for all arms together, keeps that pairing.
- Episodes of one instance, and states drawn from one instance, are not independent of each
  other, so the unit of resampling is the instance (a *cluster*): a replicate draws I instances
  with replacement and takes every episode and state of each, as many times as it was drawn.
- A trained arm is several runs, one per training seed, and their spread is part of the
  uncertainty: a replicate also draws each arm's R runs with replacement (the second level).

A replicate is a weight vector w over instances (how often each was drawn) and, per arm, v over
runs. A run's rate under w is sum_i w_i x_i / sum_i w_i m_i (x successes of m trials in the
instance's episodes or states), an arm's is the v-weighted mean of its runs' rates. Replicate 0
is the point estimate (all weights 1). Every statistic is a function of these arrays, so the
same replicates give its standard error (their std), its 95% interval (percentiles) and a
one-sided p-value for "the statistic is positive" from the normal approximation,
p = 1 - Phi(value / se). Why not the share of replicates <= 0: it cannot go below 1 / (B + 1),
and Holm's first step over the study's ~36 tests needs p < 0.05 / 36 = 0.0014.

Why by hand: scipy.stats.bootstrap resamples one flat sample; it has no clusters, no pairing of
several statistics through shared draws, and no second level.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from minirl.eval.results import CheckpointResult, EvalResults


@dataclass
class Units:
    """One run's counts per unit: the instances' episodes and the fixed states."""

    successes: dict[int, np.ndarray]  # T -> [I] successes of n episodes
    fresh: np.ndarray  # [S_f] optimal replies of m, fresh states
    post_optimal: np.ndarray  # [S_p] optimal next replies of m, post-error states
    post_success: np.ndarray  # [S_p] continuations of m that succeeded


@dataclass
class Design:
    """What every run shares: the instances, and the instance each fixed state belongs to."""

    n: int  # episodes per instance and T
    m: int  # samples per state
    ts: list[int]
    instances: int
    fresh_instance: np.ndarray  # [S_f] index of the state's instance
    post_instance: np.ndarray  # [S_p]
    post_kind: list[str]


def design(results: EvalResults) -> Design:
    index = {s: i for i, s in enumerate(results.meta.seeds)}
    return Design(
        n=results.meta.n,
        m=max(results.meta.decision_samples, 1),
        ts=list(results.meta.ts),
        instances=len(results.meta.seeds),
        fresh_instance=np.array([index[s["seed"]] for s in results.meta.decision_states], int),
        post_instance=np.array([index[s["seed"]] for s in results.meta.post_error_states], int),
        post_kind=[s["kind"] for s in results.meta.post_error_states],
    )


def units(entry: CheckpointResult) -> Units:
    if not entry.successes or not entry.analysis.decision.optimal_counts:
        raise ValueError(
            "these results hold no per-instance counts (written before the second edition of "
            "the study): evaluate again"
        )
    post = entry.analysis.from_errors
    return Units(
        successes={t: np.array(c, float) for t, c in entry.successes.items()},
        fresh=np.array(entry.analysis.decision.optimal_counts, float),
        post_optimal=np.array(post.optimal_counts if post else [], float),
        post_success=np.array(post.success_counts if post else [], float),
    )


@dataclass
class Draws:
    """B + 1 replicates (row 0 = the point estimate): instance weights and per-arm run weights."""

    instances: np.ndarray  # [B + 1, I]
    runs: dict[str, np.ndarray]  # arm -> [B + 1, R]


def draws(instances: int, runs: dict[str, int], replicates: int, seed: int = 0) -> Draws:
    rng = np.random.default_rng(seed)

    def counts(size: int) -> np.ndarray:
        drawn = rng.multinomial(size, np.full(size, 1 / size), size=replicates)
        return np.vstack([np.ones(size), drawn]).astype(float)

    return Draws(counts(instances), {arm: counts(r) for arm, r in runs.items()})


def rate(x: np.ndarray, trials: float, where: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Per replicate: sum_u w[where[u]] x_u / (trials * sum_u w[where[u]]) (NaN if no units)."""
    if x.size == 0:
        return np.full(weights.shape[0], math.nan)
    w = weights[:, where]  # [B + 1, U]
    total = w.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (w @ x) / (trials * total)


def measures(u: Units, d: Design, w: np.ndarray, kind: str | None = None) -> dict[str, np.ndarray]:
    """One run's rates under every replicate: pass1@T, step (fresh), post_step, post_success."""
    everyone = np.arange(d.instances)
    out = {f"pass1@{t}": rate(u.successes[t], d.n, everyone, w) for t in d.ts}
    out["step"] = rate(u.fresh, d.m, d.fresh_instance, w)
    post = np.array([kind is None or k == kind for k in d.post_kind], bool)
    out["post_step"] = rate(u.post_optimal[post], d.m, d.post_instance[post], w)
    out["post_success"] = rate(u.post_success[post], d.m, d.post_instance[post], w)
    return out


def arm_measures(
    runs: list[Units], d: Design, draw: Draws, arm: str, kind: str | None = None
) -> dict[str, np.ndarray]:
    """An arm's rates per replicate: its runs' rates, averaged with the run weights."""
    per_run = [measures(u, d, draw.instances, kind) for u in runs]
    v = draw.runs[arm]  # [B + 1, R]
    return {
        key: (v * np.stack([r[key] for r in per_run], axis=1)).sum(axis=1) / v.sum(axis=1)
        for key in per_run[0]
    }


def empirical_logit(p: np.ndarray, trials: float) -> np.ndarray:
    """log(p / (1 - p)), with p kept half a trial away from 0 and 1 so it stays finite."""
    eps = 0.5 / max(trials, 1.0)
    q = np.clip(p, eps, 1 - eps)
    return np.log(q / (1 - q))


@dataclass
class Estimate:
    """A statistic's point estimate, standard error, 95% interval and one-sided p (> 0)."""

    value: float
    se: float
    low: float
    high: float
    p: float  # bootstrap p-value of "the statistic is positive"

    @classmethod
    def of(cls, stat: np.ndarray) -> Estimate:
        reps = stat[1:][~np.isnan(stat[1:])]
        if math.isnan(stat[0]) or reps.size < 2:
            return cls(math.nan, math.nan, math.nan, math.nan, math.nan)
        low, high = np.percentile(reps, [2.5, 97.5])
        se = float(reps.std(ddof=1))
        value = float(stat[0])
        if se > 0:
            p = 0.5 * math.erfc(value / se / math.sqrt(2))
        else:  # no spread at all: certain, one way or the other (or exactly 0: no evidence)
            p = 0.0 if value > 0 else 1.0 if value < 0 else 0.5
        return cls(value, se, float(low), float(high), p)

    def text(self) -> str:
        if math.isnan(self.value):
            return "n/a"
        return f"{self.value:+.3f} ± {self.se:.3f}"


def holm(pvalues: list[float]) -> list[float]:
    """Holm's step-down adjustment: controls the chance of any false "shown" among them all.

    The i-th smallest of m p-values is multiplied by (m - i + 1), and the adjusted values are
    made non-decreasing; a NaN stays NaN and does not count towards m.
    """
    valid = sorted((p, i) for i, p in enumerate(pvalues) if not math.isnan(p))
    adjusted = [math.nan] * len(pvalues)
    running = 0.0
    for rank, (p, i) in enumerate(valid):
        running = max(running, min(1.0, (len(valid) - rank) * p))
        adjusted[i] = running
    return adjusted
