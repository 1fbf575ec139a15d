"""Where does RL help? Behaviour analyses that go beyond the success rate.

- Single-step decision quality: the rate of oracle-optimal actions on one fixed set of *fresh*
  states: states whose history holds no error. The states are sampled once from the *base*
  policy's episodes (a state is the conversation up to some turn, kept as its exact token ids,
  plus the replies that led there) and every checkpoint is asked for the next action in those
  same states, so a difference in the rate is a difference in the models, not in the states they
  happen to reach.
- Error recovery is measured the same way, from fixed post-error states: minirl.eval.recovery.
  What this module still reports, `error_recovery`, is P(success | at least one error) over a
  checkpoint's *own* episodes. It is descriptive only: a policy that errs less has a different,
  selected set of erring episodes, so the rate moves with single-step quality alone (lesson 7
  shows it on simulated policies) and no verdict reads it.
- Long-horizon resilience: success by bucket of the instance's optimal solution length.
- Turn efficiency: mean turns used by the successful episodes.

An *error* is any turn whose action was not oracle-optimal (an invalid reply, a wall bump, a
detour; it includes each task's narrower `mistake`). All the rates are computed from the episodes
of minirl.eval.sampler, and the single-step replies are sampled by the same rollout, started from
the fixed states; rates come with the count they are computed from, since a rate over 3 episodes
means little. The result types are in minirl.eval.results.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable

from transformers import PreTrainedModel, PreTrainedTokenizerBase

import tasks
from minirl.engine import DenseDecoder, for_sampling
from minirl.episode import Episode, EpisodeSpec
from minirl.eval.results import DecisionQuality, Efficiency, Rate, Recovery
from minirl.eval.sampler import seeded
from minirl.rollout import rollout

# ---- single-step decision quality --------------------------------------------------------------


def state_at(episode: Episode, j: int) -> EpisodeSpec:
    """The state just before reply j (0-based) of a full episode, as a spec that starts there.

    A state is the instance, the budget, the replies that led there and the conversation's exact
    token ids up to the next reply, so a model asked there reads what the base policy read.
    """
    if not episode.turn_index:
        raise ValueError("sample states from full episodes, not truncated ones")
    start = episode.turn_index.index(j)  # first token of reply j
    return EpisodeSpec(
        task=episode.task,
        seed=episode.seed,
        budget=episode.budget,
        replies=tuple(t.reply for t in episode.turns[:j]),
        prompt_ids=tuple(episode.input_ids[:start]),
    )


def sample_states(
    episodes: list[Episode],
    count: int,
    seed: int = 0,
    where: Callable[[Episode, int], bool] | None = None,
) -> list[EpisodeSpec]:
    """`count` states drawn uniformly from the (episode, turn) pairs of the given episodes.

    `where(episode, j)` keeps only some turns (`error_free`: the fresh states of single-step
    quality). Uses its own RNG, so the same episodes and seed always give the same states.
    """
    candidates = [
        (e, j) for e in episodes for j in range(e.turns_used) if where is None or where(e, j)
    ]
    if not candidates:
        raise ValueError("the episodes have no turns to sample states from")
    rng = random.Random(seed)
    picks = rng.sample(candidates, min(count, len(candidates)))
    return [state_at(episode, j) for episode, j in picks]


def error_free(episode: Episode, j: int) -> bool:
    """True when every action before turn j was optimal: a *fresh* state, with no error behind it.

    Single-step quality is measured on these, and recovery on the states just after a first
    error (minirl.eval.recovery), so the two are rates of the same kind on disjoint states.
    """
    return all(t.optimal for t in episode.turns[:j])


def replay(state: EpisodeSpec, task_text: str = "compact") -> tasks.Env:
    """The environment in the state's position (the tasks are deterministic given the seed)."""
    env = tasks.make(state.task, text=task_text)
    env.reset(state.seed)
    for reply in state.replies:
        env.step(reply)
    return env


def decision_quality(
    model: PreTrainedModel | DenseDecoder,
    tokenizer: PreTrainedTokenizerBase,
    states: list[EpisodeSpec],
    *,
    samples: int = 4,
    max_new_tokens: int = 4,
    temperature: float = 1.0,
    task_text: str = "compact",
    seed: int = 0,
    batch_size: int = 512,
    engine: str = "auto",
) -> DecisionQuality:
    """Optimal- and valid-action rates of `samples` sampled replies in each fixed state.

    Each state is played for exactly one turn by the ordinary rollout, so the reply is sampled
    from the very conversation the base policy had reached, and judged by the oracle there.
    """
    queries = [s for s in states for _ in range(samples)]
    optimal, valid = [], []
    policy = for_sampling(model, engine)  # one dense copy for every batch (minirl.engine)
    with seeded(seed):
        for start in range(0, len(queries), batch_size):
            played = rollout(
                policy,
                tokenizer,
                queries[start : start + batch_size],
                max_new_tokens=max_new_tokens,
                temperature=temperature,
                task_text=task_text,
                max_turns=1,
            )
            optimal += [e.turns[0].optimal for e in played]
            valid += [e.turns[0].valid for e in played]
    per_state = [sum(optimal[i : i + samples]) for i in range(0, len(optimal), samples)]
    return DecisionQuality(Rate.of(optimal), Rate.of(valid), optimal_counts=per_state)


# ---- error recovery, horizon, efficiency -------------------------------------------------------


def first_error(episode: Episode) -> int | None:
    """1-based turn of the first non-optimal action, or None if every action was optimal."""
    for j, turn in enumerate(episode.turns, start=1):
        if not turn.optimal:
            return j
    return None


def error_recovery(episodes: list[Episode]) -> Recovery:
    """P(success | no error), P(success | >= 1 error), and P(success | first error at turn j)."""
    firsts = [first_error(e) for e in episodes]
    by_turn: dict[int, list[bool]] = {}
    for e, j in zip(episodes, firsts, strict=True):
        if j is not None:
            by_turn.setdefault(j, []).append(e.success)
    pairs = list(zip(episodes, firsts, strict=True))
    return Recovery(
        no_error=Rate.of([e.success for e, j in pairs if j is None]),
        after_error=Rate.of([e.success for e, j in pairs if j is not None]),
        by_first_error_turn={j: Rate.of(v) for j, v in sorted(by_turn.items())},
    )


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


def turn_efficiency(episodes: list[Episode]) -> Efficiency:
    """Mean turns used, and the mean excess over the optimal length, on successful episodes."""
    won = [e for e in episodes if e.success]
    if not won:
        return Efficiency(mean_turns=math.nan, mean_excess=math.nan, count=0)
    return Efficiency(
        mean_turns=sum(e.turns_used for e in won) / len(won),
        mean_excess=sum(e.turns_used - e.optimal_length for e in won) / len(won),
        count=len(won),
    )
