"""The evaluation sampler: n episodes per held-out instance at every turn budget T.

Every evaluation in minirl plays its episodes here, through the same batched `rollout` that
training uses: the Pass@(K,T) grid (minirl.eval.passkt), the behaviour analyses
(minirl.eval.analysis), and the before/after success every training run reports
(`held_out_success`). Two modes:

- budget visible: the model reads "turns left: k", so an episode at budget T is a different
  episode from one at T' and every T is rolled out separately (cost grows with sum(T));
- budget hidden: the model never sees T, so the first t turns of an episode played at T_max are
  distributed exactly like an episode played at budget t. One rollout at T_max, truncated to every
  t <= T_max, gives all budgets (cost grows with max(T)). An episode succeeds at budget t iff it
  succeeded within its first t turns.

Sampling is re-seeded from `seed` before each sweep (and the global RNG restored afterwards,
`seeded`), so every compared checkpoint plays the same instances, in the same order, from the same
seed, and an evaluation in the middle of training neither depends on nor disturbs the training
run's random stream (which keeps resumes exact).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable, Iterator, Sequence

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

import tasks
from minirl.chat import resolve_task_text
from minirl.config import Config
from minirl.engine import DenseDecoder, for_sampling
from minirl.episode import Episode, EpisodeSpec, turn_rates
from minirl.rollout import rollout


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Sample from torch's global RNG seeded with `seed`, then put the caller's state back.

    On CUDA the sampling draws from the GPU's generator, not the CPU's, so both are saved and
    restored (`fork_rng`); restoring only the CPU state would let an evaluation shift the
    training run's random stream there.
    """
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield


def truncate(episode: Episode, t: int) -> Episode:
    """The episode as it would have ended under budget t (<= its own); tokens dropped if t < own.

    Valid only when the budget was hidden from the model; the token fields are emptied because
    evaluation never trains on them and keeping n * |T| copies would waste memory.
    """
    if t > episode.budget:
        raise ValueError(f"cannot extend an episode of budget {episode.budget} to {t}")
    if t == episode.budget:
        return episode  # nothing to cut; keep its tokens (the decision states need them)
    turns = episode.turns[:t]
    return dataclasses.replace(
        episode,
        budget=t,
        turns=turns,
        success=episode.success and episode.turns_used <= t,
        input_ids=[],
        loss_mask=[],
        logprobs=[],
        turn_index=[],
    )


def specs_for(task: str, seeds: Sequence[int], n: int, budget: int) -> list[EpisodeSpec]:
    """n episodes per instance, instance-major; `group` is the instance's index."""
    return [EpisodeSpec(task, s, budget, group=i) for i, s in enumerate(seeds) for _ in range(n)]


def sweep(
    policy: PreTrainedModel | DenseDecoder,
    tokenizer: PreTrainedTokenizerBase,
    task: str,
    ts: Sequence[int],
    seeds: Sequence[int],
    n: int,
    *,
    budget_visible: bool,
    task_text: str = "compact",
    seed: int = 0,
    max_new_tokens: int = 4,
    temperature: float = 1.0,
    batch_size: int = 512,
    engine: str = "auto",
    on_batch: Callable[[int], None] | None = None,
) -> dict[int, list[Episode]]:
    """Episodes for every T in `ts`: `result[t][i * n + j]` is episode j on instance seeds[i].

    `policy` is the model or its dense copy; with a model, `engine` picks the sampler (see
    minirl.rollout), and a dense copy is made once for the whole sweep.
    `on_batch(episodes_done)` is called after each rollout batch with the running total of
    episodes played (for a progress bar).
    """
    if not ts:
        raise ValueError("no turn budgets T given")
    if min(ts) < 1:
        raise ValueError(f"turn budgets must be >= 1, got {min(ts)}")
    if n < 1 or not seeds:
        raise ValueError("need n >= 1 episodes on at least one instance")
    rollout_budgets = sorted(set(ts)) if budget_visible else [max(ts)]
    played: dict[int, list[Episode]] = {}
    done = 0
    policy = for_sampling(policy, engine)
    with seeded(seed):
        for budget in rollout_budgets:
            specs = specs_for(task, seeds, n, budget)
            episodes: list[Episode] = []
            for start in range(0, len(specs), batch_size):
                episodes += rollout(
                    policy,
                    tokenizer,
                    specs[start : start + batch_size],
                    max_new_tokens=max_new_tokens,
                    temperature=temperature,
                    budget_visible=budget_visible,
                    task_text=task_text,
                )
                done += len(specs[start : start + batch_size])
                if on_batch is not None:
                    on_batch(done)
            played[budget] = episodes
    if budget_visible:
        return {t: played[t] for t in sorted(set(ts))}
    longest = played[max(ts)]
    return {t: [truncate(e, t) for e in longest] for t in sorted(set(ts))}


def episodes_to_play(ts: Sequence[int], n_seeds: int, n: int, budget_visible: bool) -> int:
    """How many episodes `sweep` will roll out (the progress bar's total)."""
    budgets = len(set(ts)) if budget_visible else 1
    return budgets * n_seeds * n


def success_counts(episodes_by_t: dict[int, list[Episode]], n: int) -> dict[int, list[int]]:
    """Per T, the number of successes among each instance's n episodes (instance order kept)."""
    counts = {}
    for t, episodes in episodes_by_t.items():
        counts[t] = [
            sum(e.success for e in episodes[i : i + n]) for i in range(0, len(episodes), n)
        ]
    return counts


# ---- the before/after number of every training run --------------------------------------------


@dataclasses.dataclass
class BudgetResult:
    """Success and behaviour of one model at one budget on the held-out instances."""

    budget: int
    n: int
    success: float
    stderr: float  # binomial: sqrt(p (1 - p) / n)
    mean_turns: float
    invalid_rate: float
    optimal_rate: float


def summarize(budget: int, episodes: list[Episode]) -> BudgetResult:
    n = len(episodes)
    p = sum(e.success for e in episodes) / n
    rates = turn_rates(episodes)
    return BudgetResult(
        budget=budget,
        n=n,
        success=p,
        stderr=math.sqrt(p * (1 - p) / n),
        mean_turns=sum(e.turns_used for e in episodes) / n,
        invalid_rate=rates["invalid_rate"],
        optimal_rate=rates["optimal_rate"],
    )


def held_out_episodes(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    task: str,
    budgets: list[int],
    instances: int,
    *,
    max_new_tokens: int,
    temperature: float,
    budget_visible: bool,
    task_text: str = "compact",
    seed: int = 1234,
    batch_size: int = 256,
    engine: str = "auto",
) -> dict[int, list[Episode]]:
    """One episode on each of the first `instances` held-out instances, at each budget."""
    return sweep(
        model,
        tokenizer,
        task,
        budgets,
        list(tasks.EVAL_SEEDS[:instances]),
        1,
        budget_visible=budget_visible,
        task_text=task_text,
        seed=seed,
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        batch_size=batch_size,
        engine=engine,
    )


def held_out_success(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    task: str,
    budgets: list[int],
    instances: int,
    *,
    max_new_tokens: int,
    temperature: float,
    budget_visible: bool,
    task_text: str = "compact",
    seed: int = 1234,
    batch_size: int = 256,
) -> dict[int, BudgetResult]:
    """Pass@1 at each budget: one episode on each of the first `instances` held-out instances."""
    played = held_out_episodes(
        model,
        tokenizer,
        task,
        budgets,
        instances,
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        budget_visible=budget_visible,
        task_text=task_text,
        seed=seed,
        batch_size=batch_size,
    )
    return {t: summarize(t, played[t]) for t in budgets}


def run_success(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, cfg: Config
) -> dict[str, dict]:
    """A training run's before/after numbers: held-out success at its tight, middle and generous
    budgets, as summary.json stores them ({"T": BudgetResult fields})."""
    return run_evaluation(model, tokenizer, cfg)[0]


def run_evaluation(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, cfg: Config
) -> tuple[dict[str, dict], dict[int, list[Episode]]]:
    """`run_success`'s numbers and the episodes they came from (the viewer keeps a few)."""
    played = held_out_episodes(
        model,
        tokenizer,
        cfg.task.task,
        cfg.eval_budgets(),
        cfg.grpo.eval_seeds,
        max_new_tokens=cfg.task.max_new_tokens,
        temperature=cfg.grpo.temperature,
        budget_visible=cfg.budget.budget_visible,
        task_text=resolve_task_text(cfg.task.task_text, tokenizer),
        engine=cfg.grpo.rollout_engine,
    )
    results = {str(t): dataclasses.asdict(summarize(t, e)) for t, e in played.items()}
    return results, played
