"""Turn budgets: how many turns T each group of episodes may take.

A training step draws a batch of task instances; each instance becomes a group of G episodes, and
the whole group shares one budget T so its group-normalised advantage compares like with like.

- ``fixed``: every group gets ``T = budget``.
- ``budgetmix``: each group draws ``T`` from ``[budget_min, budget_max]`` (inclusive) with
  ``P(T) = w(T) / sum_T' w(T')``, where ``w(T) = 1`` (``uniform``), ``w(T) = T`` (``long``: more
  long budgets) or ``w(T) = 1 / T`` (``short``: more short budgets).

The samplers take an explicit ``random.Random`` so a run's budgets follow from its seed alone.
``draw_groups`` draws one training step's groups, (instance seed, T) pairs, from that generator;
both training backends draw through it, so from the same seed they play the same instances at
the same budgets.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

import tasks

if TYPE_CHECKING:
    from minirl.config import Config

MODES: tuple[str, ...] = ("fixed", "budgetmix")
BUDGET_DISTRIBUTIONS: tuple[str, ...] = ("uniform", "long", "short")


def _check_range(budget_min: int, budget_max: int) -> None:
    if budget_min < 1:
        raise ValueError(f"budget_min must be >= 1 turn, got {budget_min}")
    if budget_min > budget_max:
        raise ValueError(
            f"budget_min must be <= budget_max, got budget_min={budget_min} > "
            f"budget_max={budget_max}"
        )


def budget_probabilities(
    budget_min: int, budget_max: int, distribution: str = "uniform"
) -> dict[int, float]:
    """Return ``{T: P(T)}`` for every T in ``[budget_min, budget_max]``; the values sum to 1."""
    if distribution not in BUDGET_DISTRIBUTIONS:
        raise ValueError(
            f"unknown budget distribution {distribution!r}; choose one of {BUDGET_DISTRIBUTIONS}"
        )
    _check_range(budget_min, budget_max)
    values = range(budget_min, budget_max + 1)
    if distribution == "uniform":
        weights = [1.0 for _ in values]
    elif distribution == "long":
        weights = [float(t) for t in values]
    else:
        weights = [1.0 / t for t in values]
    total = sum(weights)
    return {t: w / total for t, w in zip(values, weights, strict=True)}


def sample_budgets(
    num_groups: int,
    *,
    mode: str,
    budget: int,
    budget_min: int,
    budget_max: int,
    distribution: str = "uniform",
    rng: random.Random,
) -> list[int]:
    """Return one turn budget per group (each group's G episodes all use it).

    Only the arguments the mode uses are validated, so a ``fixed`` run may leave the BudgetMix
    range at whatever its config defaults are.
    """
    if mode not in MODES:
        raise ValueError(f"unknown budget mode {mode!r}; choose one of {MODES}")
    if num_groups < 0:
        raise ValueError(f"num_groups must be >= 0, got {num_groups}")
    if mode == "fixed":
        if budget < 1:
            raise ValueError(f"budget must be >= 1 turn, got {budget}")
        return [budget] * num_groups
    probs = budget_probabilities(budget_min, budget_max, distribution)
    # One rng.choices call per batch keeps the draw sequence a simple function of the seed.
    return rng.choices(list(probs), weights=list(probs.values()), k=num_groups)


def draw_groups(cfg: Config, rng: random.Random, count: int | None = None) -> list[tuple[int, int]]:
    """Groups to play: (training instance seed, turn budget T) for each of `count` (default
    tasks_per_step, one step's worth; dynamic sampling draws its replacements here too)."""
    t, b = cfg.task, cfg.budget
    count = t.tasks_per_step if count is None else count
    seeds = [rng.choice(tasks.TRAIN_SEEDS) for _ in range(count)]
    budgets = sample_budgets(
        count,
        mode=b.mode,
        budget=b.budget,
        budget_min=b.budget_min,
        budget_max=b.budget_max,
        distribution=b.budget_distribution,
        rng=rng,
    )
    return list(zip(seeds, budgets, strict=True))


def tally_budgets(
    tally: dict | None, drawn: list[int], trained: list[int]
) -> dict[str, dict[str, int] | float]:
    """Add one step's group budgets to a run's histograms of budgets drawn and trained on.

    Returns ``{"drawn": {T: groups}, "trained": {T: groups}, "total_variation": d}`` (T as a
    string, as JSON keeps it), where d = 1/2 sum_T |P_drawn(T) - P_trained(T)| is how far the
    budgets trained on drift from the drawn distribution (0 without dynamic sampling).
    """
    tally = tally or {"drawn": {}, "trained": {}}
    counts = {"drawn": dict(tally["drawn"]), "trained": dict(tally["trained"])}
    for name, budgets in (("drawn", drawn), ("trained", trained)):
        for budget in budgets:
            counts[name][str(budget)] = counts[name].get(str(budget), 0) + 1
    totals = {name: sum(c.values()) for name, c in counts.items()}
    keys = set(counts["drawn"]) | set(counts["trained"])
    distance = (
        0.5
        * sum(
            abs(
                counts["drawn"].get(k, 0) / totals["drawn"]
                - counts["trained"].get(k, 0) / totals["trained"]
            )
            for k in keys
        )
        if totals["drawn"] and totals["trained"]
        else 0.0
    )
    return {**counts, "total_variation": distance}
