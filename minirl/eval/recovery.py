"""Error recovery, measured the way single-step quality is: from fixed post-error states.

Why not P(success | an error) over each checkpoint's own episodes: a policy that errs less has a
different, selected set of erring episodes. On a fully observed task where an error-free episode
always succeeds, that rate is just (S - P0) / (1 - P0), S the success rate and P0 the error-free
share, so a policy with a better single step and no recovery skill at all moves it (lesson 7
shows this on simulated policies). The fix is the one single-step quality already uses: ask every
checkpoint in the *same* states.

1. States. From base-policy episodes (sampled once, shared by every compared checkpoint), take
   each episode's first error: the first turn j whose action was not oracle-optimal. The
   post-error state is the conversation just after it (replies 1..j, the exact token ids up to
   reply j + 1), with T - j turns left. Episodes whose error was their last turn give no state.
2. Kinds. Each state is labelled by what the error was:
     invalid      the reply named no action (or two);
     avoidable    the action failed, and the history could have told (a known wall, a
                  contradicted guess, a known-empty drawer: the task's info["error"]);
     unavoidable  the action failed, and nothing seen so far could have told;
     detour       the action worked but was not on a shortest path (every non-optimal move of a
                  fully observed task that does not bump).
3. Measures. Each checkpoint plays `samples` continuations from every state to the end of its
   budget. Two numbers per state: how many next actions were optimal (the same scale as
   single-step quality, which minirl.eval.analysis measures on *fresh* states, with no error in
   their history), and how many continuations succeeded within the turns left.

A policy that gains only single-step quality gains about equally on fresh and post-error states;
one that has learned to recover gains more after an error. minirl.study.claims tests exactly that
difference of differences, paired over the shared states.
"""

from __future__ import annotations

import random

from transformers import PreTrainedModel, PreTrainedTokenizerBase

import tasks
from minirl.engine import DenseDecoder, for_sampling
from minirl.episode import Episode, EpisodeSpec
from minirl.eval.analysis import first_error, state_at
from minirl.eval.results import Rate, StateRecovery
from minirl.eval.sampler import seeded
from minirl.rollout import rollout

KINDS: tuple[str, ...] = ("invalid", "avoidable", "unavoidable", "detour")


def error_kind(episode: Episode, j: int, task_text: str = "compact") -> str:
    """What turn j (0-based) of the episode was, when it was an error (one of KINDS).

    The tasks are deterministic given the seed, so replaying the replies reproduces the step and
    its info["error"] (set by the hidden-information tasks; the others never report one).
    """
    turn = episode.turns[j]
    if not turn.valid:
        return "invalid"
    env = tasks.make(episode.task, text=task_text)
    env.reset(episode.seed)
    for earlier in episode.turns[:j]:
        env.step(earlier.reply)
    error = env.step(turn.reply).info.get("error")
    if error in ("avoidable", "unavoidable"):
        return error
    return "avoidable" if turn.mistake else "detour"


def post_error_states(
    episodes: list[Episode], count: int, seed: int = 0, task_text: str = "compact"
) -> tuple[list[EpisodeSpec], list[str]]:
    """Up to `count` post-error states (and their kinds), one per erring episode at most.

    Drawn with their own RNG from the episodes whose first error left at least one turn, so the
    same episodes and seed always give the same states.
    """
    candidates = []
    for e in episodes:
        j = first_error(e)  # 1-based turn of the first error, or None
        if j is not None and j < e.turns_used:  # the episode went on after it
            candidates.append((e, j))
    rng = random.Random(seed)
    picks = rng.sample(candidates, min(count, len(candidates)))
    states = [state_at(e, j) for e, j in picks]
    return states, [error_kind(e, j - 1, task_text) for e, j in picks]


def recover(
    model: PreTrainedModel | DenseDecoder,
    tokenizer: PreTrainedTokenizerBase,
    states: list[EpisodeSpec],
    kinds: list[str],
    *,
    samples: int = 2,
    max_new_tokens: int = 4,
    temperature: float = 1.0,
    task_text: str = "compact",
    seed: int = 0,
    batch_size: int = 512,
    engine: str = "auto",
) -> StateRecovery:
    """Play `samples` continuations from each post-error state to the end of its budget."""
    queries = [s for s in states for _ in range(samples)]
    optimal: list[bool] = []
    success: list[bool] = []
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
            )
            optimal += [e.turns[0].optimal for e in played]
            success += [e.success for e in played]
    per_state = range(0, len(queries), samples)
    kind_of = [k for k in kinds for _ in range(samples)]  # one per continuation
    by_kind = {
        kind: Rate.of([won for won, k in zip(success, kind_of, strict=True) if k == kind])
        for kind in KINDS
        if kind in kinds
    }
    return StateRecovery(
        optimal=Rate.of(optimal),
        success=Rate.of(success),
        by_kind=by_kind,
        optimal_counts=[sum(optimal[i : i + samples]) for i in per_state],
        success_counts=[sum(success[i : i + samples]) for i in per_state],
    )
