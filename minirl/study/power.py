"""Power: how large an effect the study can see, planned before it runs and read after.

The smallest effect a two-sided test at level a detects with probability 1 - b is about
    detectable = (t_{1 - a/2} + t_{1 - b}) * SE,
with SE the statistic's standard error and t Student's quantiles at the test's degrees of
freedom (the normal's z before the run). Holm's adjustment tests the smallest of F p-values at
a / F, so with F tests in the family the level is a / 2F two-sided: conservative, since later
tests get a larger level.

Before running (`plan`), the SEs are predicted from the study's sizes and three assumptions,
stated in the report beside the numbers:
- rates near p = 0.5 (the worst case for a binomial variance, p (1 - p) <= 1/4);
- a design effect for the clustering, deff = 1 + (k - 1) * icc for k correlated units of one
  instance (episodes, or states drawn from its base episodes);
- a spread between training seeds, seed_sd on the rate scale, added for every trained arm as
  seed_sd^2 / R for R seeds (the first edition measured 0.048 between two seeds of guess).
A rate over N units has variance p (1 - p) deff / N; a log-odds rate has variance
deff / (N p (1 - p)), the delta method. After running, the bootstrap's SE replaces the
prediction (`detectable` per test in minirl.study.claims).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

ALPHA = 0.05
POWER = 0.8


def z(p: float) -> float:
    return NormalDist().inv_cdf(p)


def detectable(
    se: float,
    family: int,
    two_sided: bool = True,
    power: float = POWER,
    df: float = math.inf,
) -> float:
    """The smallest true effect found with probability `power` at the family's Bonferroni level
    (Student's t with `df` degrees of freedom, the normal when infinite)."""
    if math.isnan(se) or math.isnan(df) or family < 1:
        return math.nan
    level = ALPHA / family / (2 if two_sided else 1)
    if math.isinf(df):
        return (z(1 - level) + z(power)) * se
    from minirl.study.bootstrap import t_quantile  # the study's t, written by hand there

    return (t_quantile(1 - level, df) + t_quantile(power, df)) * se


@dataclass
class Planned:
    """A statistic's predicted standard error and the effect it could then detect."""

    statistic: str
    se: float
    detectable: float
    scale: str


def plan(
    *,
    instances: int,
    n: int,
    ts: list[int],
    fresh_states: int,
    post_states: int,
    samples: int,
    seeds: int,
    family: int,
    p: float = 0.5,
    icc: float = 0.3,
    seed_sd: float = 0.05,
) -> list[Planned]:
    """Predicted SEs of the three verdict statistics (see the module docstring); for recovery,
    `fresh_states` is the number of matched fresh states."""
    var = p * (1 - p)
    per_state = samples  # samples per state share the state
    # One arm's rate variance on each unit set (binomial with clustering), and the seed spread.
    v_pass = var * (1 + (n - 1) * icc) / (instances * n)
    v_seed = seed_sd**2 / seeds
    # Trained arm: R runs on the same units average their binomial noise only partly (the units
    # are shared), so count it once, conservatively; base has no seed spread.
    gap = math.sqrt(2 * v_pass + v_seed)
    # The growth is the least-squares slope of gap - null over the T list, times its range;
    # the budgets' gaps are taken as independent (conservative: they are positively correlated).
    centred = sum((t - sum(ts) / len(ts)) ** 2 for t in ts)
    growth = gap * (max(ts) - min(ts)) / math.sqrt(centred) if centred else math.nan
    lead = math.sqrt(2 * v_pass + 2 * v_seed)  # BudgetMix against a fixed arm at one T
    deff_state = 1 + (per_state - 1) * icc
    v_logit_f = deff_state / (fresh_states * samples * var)
    v_logit_p = deff_state / (post_states * samples * var)
    seed_logit = (seed_sd / var) ** 2 / seeds  # the seed spread moved to log-odds
    recovery = math.sqrt(2 * (v_logit_f + v_logit_p) + 2 * seed_logit)
    rows = [
        ("budget dependence: growth of gap - null over T", growth, "Pass@1"),
        # No plan for the same-position test, whose chances are exact: its SE is measured.
        ("recovery, were it read on matched states", recovery, "log-odds"),
        ("robustness: BudgetMix's lead over the best fixed arm at one T", lead, "Pass@1"),
    ]
    return [Planned(name, se, detectable(se, family), scale) for name, se, scale in rows]
