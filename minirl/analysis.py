"""Where does RL help? Behaviour analyses that go beyond the success rate.

- Single-step decision quality: the rate of oracle-optimal actions on one fixed set of states.
  The states are sampled once from the *base* policy's episodes (a state is the conversation up
  to some turn, kept as its exact token ids, plus the replies that led there) and every checkpoint
  is asked for the next action in those same states, so a difference in the rate is a difference
  in the models, not in the states they happen to reach.
- Error recovery: an *error* is any turn whose action was not oracle-optimal (an invalid reply, a
  wall bump, a detour; it includes each task's narrower `mistake`). We report P(success | at least
  one error) and P(success | first error at turn j), against P(success | no error).
- Long-horizon resilience: success by bucket of the instance's optimal solution length.
- Turn efficiency: mean turns used by the successful episodes.

All of them are computed from the episodes of minirl.sweep; rates come with the count they are
computed from, since a rate over 3 episodes means little.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

import tasks
from minirl.rollout import Episode, generation_config, left_pad


@dataclass
class Rate:
    """A proportion and the number of cases it is computed from (rate is NaN when count is 0)."""

    rate: float
    count: int

    @classmethod
    def of(cls, outcomes: list[bool]) -> Rate:
        return cls(sum(outcomes) / len(outcomes) if outcomes else math.nan, len(outcomes))


# ---- single-step decision quality --------------------------------------------------------------


@dataclass
class DecisionState:
    """A state met by the base policy: the task instance and the exact conversation so far."""

    task: str
    seed: int
    budget: int
    replies: list[str]  # the replies that led here; replaying them rebuilds the env's state
    prompt_ids: list[int]  # the conversation's token ids up to the assistant's next reply


def sample_states(episodes: list[Episode], count: int, seed: int = 0) -> list[DecisionState]:
    """`count` states drawn uniformly from all (episode, turn) pairs of the given episodes.

    Uses its own RNG, so the same episodes and seed always give the same states.
    """
    candidates = [(e, j) for e in episodes for j in range(e.turns_used)]
    if not candidates:
        raise ValueError("the episodes have no turns to sample states from")
    rng = random.Random(seed)
    picks = rng.sample(candidates, min(count, len(candidates)))
    states = []
    for episode, j in picks:
        if not episode.turn_index:
            raise ValueError("sample states from full episodes, not truncated ones")
        start = episode.turn_index.index(j)  # first token of reply j
        states.append(
            DecisionState(
                task=episode.task,
                seed=episode.seed,
                budget=episode.budget,
                replies=[t.reply for t in episode.turns[:j]],
                prompt_ids=episode.input_ids[:start],
            )
        )
    return states


def replay(state: DecisionState) -> tasks.Env:
    """The environment in the state's position (the tasks are deterministic given the seed)."""
    env = tasks.make(state.task)
    env.reset(state.seed)
    for reply in state.replies:
        env.step(reply)
    return env


@torch.no_grad()
def decision_quality(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    states: list[DecisionState],
    *,
    samples: int = 4,
    max_new_tokens: int = 4,
    temperature: float = 1.0,
    seed: int = 0,
    batch_size: int = 512,
) -> dict[str, Rate]:
    """Optimal- and valid-action rates of `samples` sampled replies in each fixed state."""
    config = generation_config(tokenizer, max_new_tokens, temperature)
    device = next(model.parameters()).device
    eos = config.eos_token_id
    queries = [s for s in states for _ in range(samples)]
    optimal, valid = [], []
    saved = torch.get_rng_state()
    torch.manual_seed(seed)
    was_training = model.training
    model.eval()
    try:
        for start in range(0, len(queries), batch_size):
            chunk = queries[start : start + batch_size]
            ids, attention = left_pad([q.prompt_ids for q in chunk], tokenizer.pad_token_id)
            out = model.generate(
                input_ids=ids.to(device),
                attention_mask=attention.to(device),
                generation_config=config,
            )
            for row, state in enumerate(chunk):
                sampled = out.sequences[row, ids.shape[1] :].tolist()
                reply = sampled[: sampled.index(eos)] if eos in sampled else sampled
                info = replay(state).step(tokenizer.decode(reply, skip_special_tokens=True)).info
                optimal.append(bool(info["optimal"]))
                valid.append(bool(info["valid"]))
    finally:
        torch.set_rng_state(saved)
        if was_training:
            model.train()
    return {"optimal": Rate.of(optimal), "valid": Rate.of(valid)}


# ---- error recovery, horizon, efficiency -------------------------------------------------------


def first_error(episode: Episode) -> int | None:
    """1-based turn of the first non-optimal action, or None if every action was optimal."""
    for j, turn in enumerate(episode.turns, start=1):
        if not turn.optimal:
            return j
    return None


def error_recovery(episodes: list[Episode]) -> dict:
    """P(success | no error), P(success | >= 1 error), and P(success | first error at turn j)."""
    firsts = [first_error(e) for e in episodes]
    by_turn: dict[int, list[bool]] = {}
    for e, j in zip(episodes, firsts, strict=True):
        if j is not None:
            by_turn.setdefault(j, []).append(e.success)
    pairs = list(zip(episodes, firsts, strict=True))
    return {
        "no_error": Rate.of([e.success for e, j in pairs if j is None]),
        "after_error": Rate.of([e.success for e, j in pairs if j is not None]),
        "by_first_error_turn": {j: Rate.of(v) for j, v in sorted(by_turn.items())},
    }


def horizon_bucket(optimal_length: int) -> str:
    """Buckets of two lengths each (1-2, 3-4, ...), wide enough to hold a few instances each."""
    low = 2 * ((max(optimal_length, 1) - 1) // 2) + 1
    return f"{low}-{low + 1}"


def success_by_horizon(episodes: list[Episode]) -> dict[str, Rate]:
    """Success rate per bucket of optimal solution length, shortest first."""
    buckets: dict[str, list[bool]] = {}
    for e in sorted(episodes, key=lambda e: e.optimal_length):
        buckets.setdefault(horizon_bucket(e.optimal_length), []).append(e.success)
    return {b: Rate.of(v) for b, v in buckets.items()}


def turn_efficiency(episodes: list[Episode]) -> dict[str, float]:
    """Mean turns used, and the mean excess over the optimal length, on successful episodes."""
    won = [e for e in episodes if e.success]
    if not won:
        return {"mean_turns": math.nan, "mean_excess": math.nan, "count": 0}
    return {
        "mean_turns": sum(e.turns_used for e in won) / len(won),
        "mean_excess": sum(e.turns_used - e.optimal_length for e in won) / len(won),
        "count": len(won),
    }
