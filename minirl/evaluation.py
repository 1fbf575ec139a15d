"""Held-out success at a few turn budgets: the before/after number every training run reports.

For each budget T, one episode is played on each held-out instance (seeds from
`tasks.EVAL_SEEDS`, disjoint from training seeds), sampling at the training temperature. The
success rate is an estimate of pass@1 at budget T, with a binomial standard error
sqrt(p (1 - p) / n). The fuller Pass@(K,T) grid belongs to minirl.passkt.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

import tasks
from minirl.rollout import Episode, EpisodeSpec, rollout


@dataclass
class BudgetResult:
    """Success and behaviour of one model at one budget on the held-out instances."""

    budget: int
    n: int
    success: float
    stderr: float
    mean_turns: float
    invalid_rate: float
    optimal_rate: float


def summarize(budget: int, episodes: list[Episode]) -> BudgetResult:
    n = len(episodes)
    p = sum(e.success for e in episodes) / n
    turns = [t for e in episodes for t in e.turns]
    return BudgetResult(
        budget=budget,
        n=n,
        success=p,
        stderr=math.sqrt(p * (1 - p) / n),
        mean_turns=sum(e.turns_used for e in episodes) / n,
        invalid_rate=sum(not t.valid for t in turns) / max(1, len(turns)),
        optimal_rate=sum(t.optimal for t in turns) / max(1, len(turns)),
    )


def held_out_seeds(n: int) -> list[int]:
    return list(tasks.EVAL_SEEDS[:n])


def evaluate_success(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    task: str,
    budgets: list[int],
    n_seeds: int,
    *,
    max_new_tokens: int,
    temperature: float,
    budget_visible: bool,
    seed: int = 1234,
    batch_size: int = 256,
) -> dict[int, BudgetResult]:
    """Success per budget on the first n_seeds held-out instances.

    The sampling RNG is re-seeded from `seed` and restored afterwards, so an evaluation neither
    depends on nor disturbs the training run's random stream (which keeps resumes exact).
    """
    saved = torch.get_rng_state()
    torch.manual_seed(seed)
    results = {}
    try:
        for budget in budgets:
            specs = [EpisodeSpec(task, s, budget) for s in held_out_seeds(n_seeds)]
            episodes: list[Episode] = []
            for i in range(0, len(specs), batch_size):
                episodes += rollout(
                    model,
                    tokenizer,
                    specs[i : i + batch_size],
                    max_new_tokens=max_new_tokens,
                    temperature=temperature,
                    budget_visible=budget_visible,
                )
            results[budget] = summarize(budget, episodes)
    finally:
        torch.set_rng_state(saved)
    return results


def as_json(results: dict[int, BudgetResult]) -> dict[str, dict]:
    return {str(t): asdict(r) for t, r in results.items()}
