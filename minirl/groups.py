"""A training step's groups: draw instances and budgets, play them, score them, keep the useful.

A group is G episodes of one task instance at one turn budget T (minirl.budgets draws both).
GRPO's advantage compares a group's episodes with each other, so a group whose episodes all earn
the same reward teaches nothing: every advantage in it is 0. Once a policy is decent most groups
tie (all solved, or all failed at a tight T), and most of a step's rollouts then buy no gradient.

Dynamic sampling (DAPO's name; verl calls it filtering groups) keeps a step's groups informative:

    drawn, kept = [], []
    repeat:
        play n new groups, each with its own (instance, T) drawn as usual
        keep the ones whose rewards differ, up to tasks_per_step
    until tasks_per_step are kept, or the step has played max_num_gen_batches * tasks_per_step

The first round plays tasks_per_step groups, as without the option; a later round plays what is
still missing divided by the share of informative groups seen so far, so one more round usually
fills the step. If the bound is reached first, the step trains on the informative groups it has.

What it costs, and what it changes. Extra rollouts (logged as `extra_rollouts_frac`). And the
mix of what is trained on: tight budgets tie more often (an unsolvable T fails every episode), so
under BudgetMix the budgets trained on drift from the budgets drawn. BudgetMix's claim is about
the drawn distribution, so both are logged: `budget_drawn` and `budget_trained` per step, and the
whole run's histograms in summary.json (minirl.trainer), with their total-variation distance.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from minirl.budgets import draw_groups
from minirl.chat import resolve_task_text
from minirl.config import Config
from minirl.engine import DenseDecoder, for_sampling
from minirl.episode import Episode, EpisodeSpec
from minirl.rewards import invalid_penalty_for, score
from minirl.rollout import rollout_in_chunks


@dataclass
class Group:
    """G episodes of one instance at one budget, with the rewards GRPO compares."""

    seed: int
    budget: int
    episodes: list[Episode]
    rewards: list[float]  # outcome reward per episode (minirl.rewards)
    turn_rewards: list[list[float]] | None = None  # per-turn progress, in process mode

    @property
    def informative(self) -> bool:
        """False when every advantage of the group would be 0: its rewards all tie.

        In process mode the advantage is per turn, from each turn's return R_i + (progress to
        go), pooled over the group (minirl.grpo.turn_advantages): it ties when every return does.
        """
        if self.turn_rewards is None:
            values = self.rewards
        else:
            values = [
                reward + sum(turns[k:])
                for reward, turns in zip(self.rewards, self.turn_rewards, strict=True)
                for k in range(len(turns))
            ]
        return any(not math.isclose(v, values[0], abs_tol=1e-9) for v in values)


@dataclass
class StepGroups:
    """What a step played: the groups it trains on, and every group it drew."""

    trained: list[Group]
    drawn: list[Group]
    episodes_per_step: int  # tasks_per_step * G: what a step plays without resampling
    rounds: int = 1

    @property
    def episodes(self) -> list[Episode]:
        return [e for g in self.trained for e in g.episodes]

    @property
    def rewards(self) -> list[float]:
        return [r for g in self.trained for r in g.rewards]

    @property
    def turn_rewards(self) -> list[list[float]] | None:
        if not self.trained or self.trained[0].turn_rewards is None:
            return None
        return [t for g in self.trained for t in (g.turn_rewards or [])]

    def metrics(self) -> dict[str, float | list[int]]:
        """TRL's `frac_reward_zero_std` over the drawn groups, and what resampling spent."""
        played = sum(len(g.episodes) for g in self.drawn)
        return {
            "frac_reward_zero_std": sum(not g.informative for g in self.drawn) / len(self.drawn),
            "extra_rollouts_frac": played / self.episodes_per_step - 1.0,
            "groups_trained": float(len(self.trained)),
            "generated_tokens": float(
                sum(sum(e.loss_mask) for g in self.drawn for e in g.episodes)
            ),
            "budget_drawn": sum(g.budget for g in self.drawn) / len(self.drawn),
            "budget_trained": (
                sum(g.budget for g in self.trained) / len(self.trained)
                if self.trained
                else float("nan")
            ),
            # Per group, for the run's histograms (trackers and curves read only the scalars).
            "budgets_drawn": [g.budget for g in self.drawn],
            "budgets_trained": [g.budget for g in self.trained],
        }


def play(
    policy: PreTrainedModel | DenseDecoder,
    tokenizer: PreTrainedTokenizerBase,
    cfg: Config,
    draws: list[tuple[int, int]],
) -> list[Group]:
    """Play G episodes of each (instance seed, T) together, and score them."""
    g, b, task = cfg.grpo, cfg.budget, cfg.task
    # The tasks' text follows the tokenizer: compact for tiny, natural for a chat model.
    text = resolve_task_text(task.task_text, tokenizer)
    specs = [
        EpisodeSpec(task.task, seed, budget, group)
        for group, (seed, budget) in enumerate(draws)
        for _ in range(g.num_generations)
    ]
    # One batched pass per turn over all of them, generation_batch_size episodes at a time (all
    # of them when unset), so the rollout's KV cache need not grow with the step.
    episodes = rollout_in_chunks(
        policy,
        tokenizer,
        specs,
        g.generation_batch_size,
        engine=g.rollout_engine,
        max_new_tokens=task.max_new_tokens,
        temperature=g.temperature,
        budget_visible=b.budget_visible,
        task_text=text,
        reuse_cache=g.reuse_kv_cache,
    )
    rewards, turn_rewards = score(
        episodes,
        task.reward_mode,
        invalid_penalty_for(task.invalid_penalty, text),
        task.mistake_penalty,
    )
    n = g.num_generations
    return [
        Group(
            seed,
            budget,
            episodes[i * n : (i + 1) * n],
            rewards[i * n : (i + 1) * n],
            None if turn_rewards is None else turn_rewards[i * n : (i + 1) * n],
        )
        for i, (seed, budget) in enumerate(draws)
    ]


def play_groups(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    cfg: Config,
    rng: random.Random,
) -> StepGroups:
    """This step's groups: tasks_per_step of them, or with dynamic sampling, the informative."""
    g, want = cfg.grpo, cfg.task.tasks_per_step
    # One sampling copy of the policy (minirl.engine) serves every round of the step.
    policy = for_sampling(model, g.rollout_engine)
    bound = want * (g.max_num_gen_batches if g.dynamic_sampling else 1)
    drawn: list[Group] = []
    kept: list[Group] = []
    rounds = 0
    count = want
    while True:
        rounds += 1
        new = play(policy, tokenizer, cfg, draw_groups(cfg, rng, count))
        drawn += new
        if not g.dynamic_sampling:
            kept = new
            break
        kept += [group for group in new if group.informative][: want - len(kept)]
        room = bound - len(drawn)
        if len(kept) == want or room <= 0:
            break
        # What is missing, scaled by the share of informative groups so far (at least 1 in
        # len(drawn) + 1, so a step that has found none still asks for more than it misses).
        share = max(sum(grp.informative for grp in drawn), 1) / (len(drawn) + 1)
        count = min(room, math.ceil((want - len(kept)) / share))
    return StepGroups(
        trained=kept,
        drawn=drawn,
        episodes_per_step=want * g.num_generations,
        rounds=rounds,
    )
