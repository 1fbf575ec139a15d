"""Error recovery, measured the way single-step quality is: in fixed states, against matched ones.

Why not P(success | an error) over each checkpoint's own episodes: a policy that errs less has a
different, selected set of erring episodes. On a fully observed task where an error-free episode
always succeeds, that rate is just (S - P0) / (1 - P0), S the success rate and P0 the error-free
share, so a policy with a better single step and no recovery skill at all moves it (lesson 7
shows this on simulated policies). The fix is the one single-step quality already uses: ask every
checkpoint in the *same* states.

1. Post-error states. From base-policy episodes (sampled once, shared by every compared
   checkpoint), take each episode's first error: the first turn j whose action was not
   oracle-optimal. The post-error state at position 1 is the conversation just after it (replies
   1..j); at position i it is the base's own conversation i - 1 replies later, so the next few
   actions after an error are scored, each in a fixed state: a policy that gets back on track one
   move later than it should is seen at position 2, and no checkpoint chooses its own states.
2. Kinds. Each state is labelled by what its first error was:
     invalid      the reply named no action (or two);
     avoidable    the action failed, and the history could have told (a known wall, a
                  contradicted guess, a known-empty drawer: the task's info["error"]);
     unavoidable  the action failed, and nothing seen so far could have told;
     detour       the action worked but was not on a shortest path (every non-optimal move of a
                  fully observed task that does not bump).
3. Matched fresh states. A post-error state differs from a random fresh state (one with no error
   behind it) in more than the error: it is later in the episode, farther from the goal, and may
   allow more optimal actions. Each post-error state is therefore matched to fresh states of the
   base's episodes with the same *key*: turn, oracle distance to the goal (rounded) and number of
   optimal actions (`match_key`, capped where states grow rare). Same-instance fresh states come
   first. Exact matching on instance as well is impossible on gridnav: an error-free prefix of
   j - 1 actions is at distance L - j + 1 from the goal, and a post-error state at the same turn
   is one or two steps farther, so matches come from other instances with the same key: those
   whose base error rate per turn is closest (errors come more often from hard instances, and a gain
   that is larger on hard instances would otherwise pass for recovery). A post-error state with
   no match leaves the comparison (the report counts them).
4. Measures. Every checkpoint samples its next action in every post-error state and every
   matched fresh state (the same scale as single-step quality), and plays `samples`
   continuations from each post-error state to the end of its budget (success within the turns
   left; descriptive).

A policy with no recovery skill acts in a post-error state as it does in a fresh state with the
same key; minirl.study.claims tests the difference, paired over the shared states.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from transformers import PreTrainedModel, PreTrainedTokenizerBase

import tasks
from minirl.engine import DenseDecoder, for_sampling
from minirl.episode import Episode, EpisodeSpec
from minirl.eval.analysis import error_free, first_error, replay, state_at
from minirl.eval.results import Rate, StateRecovery
from minirl.eval.sampler import seeded
from minirl.rollout import rollout

KINDS: tuple[str, ...] = ("invalid", "avoidable", "unavoidable", "detour")
# Where the key stops distinguishing: late turns, long distances and many optimal actions are
# rare in fresh states, and a cap keeps them matchable (a turn-7 state matches turns >= 6).
TURN_CAP, DISTANCE_CAP, OPTIMAL_CAP = 6, 8, 3

Key = tuple[int, int, int]


def match_key(turn: int, distance: float, optimal: int) -> Key:
    """What a post-error state and its fresh matches share: turn, distance, optimal actions."""
    near = DISTANCE_CAP if distance != distance or distance > DISTANCE_CAP else round(distance)
    return min(turn, TURN_CAP), near, min(optimal, OPTIMAL_CAP)


def covariates(state: EpisodeSpec, task_text: str = "compact") -> dict:
    """A state's turn (1-based, of the next action), oracle distance and optimal-action count."""
    env = replay(state, task_text)
    return {
        "turn": len(state.replies) + 1,
        "distance": float(env.distance()),
        "optimal": len(env.optimal_actions()),
    }


def match(
    post: list[tuple[int, Key]],
    fresh: list[tuple[int, Key]],
    per_state: int,
    hardness: dict[int, float] | None = None,
) -> list[list[int]]:
    """For each (instance, key) of `post`, up to `per_state` indices into `fresh` with its key.

    Fresh states of the same instance come first; then those of the instances closest in
    `hardness` (the base's error rate on the instance, so that a post-error state, which
    comes more often from a hard instance, is not compared with easy ones); ties keep `fresh`'s
    order (the caller shuffles it once with its own seed). A fresh state may serve several
    post-error states.
    """
    by_key: dict[Key, list[int]] = {}
    for i, (_, key) in enumerate(fresh):
        by_key.setdefault(key, []).append(i)
    hard = hardness or {}
    found = []
    for instance, key in post:
        here = hard.get(instance, 0.0)
        ranked = sorted(
            by_key.get(key, []),
            key=lambda i: (fresh[i][0] != instance, abs(hard.get(fresh[i][0], 0.0) - here)),
        )
        found.append(ranked[:per_state])
    return found


def hardness(turns: dict[int, list[bool]]) -> dict[int, float]:
    """Each instance's share of non-optimal actions over every turn of the base's episodes.

    The matching's tie-breaker, keyed by instance (seed). Per turn, not per episode: an instance's
    8 or so episodes give 30 to 60 turns, so hard instances are told apart from easy ones far more
    surely than by their few successes (a noisy measure leaves the matched instances easier than
    the post-error states' own, and a gain on hard instances then passes for recovery).
    """
    return {seed: 1 - sum(flags) / len(flags) for seed, flags in turns.items() if flags}


def turn_flags(episodes: list[Episode]) -> dict[int, list[bool]]:
    """Per instance, whether each turn of each of its episodes was oracle-optimal."""
    flags: dict[int, list[bool]] = {}
    for e in episodes:
        flags.setdefault(e.seed, []).extend(t.optimal for t in e.turns)
    return flags


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


@dataclass
class RecoveryStates:
    """The fixed states of the recovery measure, drawn once from base episodes."""

    post: list[EpisodeSpec] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)  # of each post-error state's first error
    after: list[int] = field(default_factory=list)  # position: actions since the first error
    post_covariates: list[dict] = field(default_factory=list)
    matched: list[EpisodeSpec] = field(default_factory=list)  # fresh states matched to them
    matched_covariates: list[dict] = field(default_factory=list)
    matches: list[list[int]] = field(default_factory=list)  # per post state: into `matched`
    # Per instance (seed): the base's share of non-optimal actions in these episodes (`hardness`)
    hardness: dict[int, float] = field(default_factory=dict)


def pick(found: list[list[int]], count: int, rng: random.Random) -> list[int]:
    """Up to `count` post-error candidates, drawn at random among those with a match first, then
    (if too few have one) among the others, which enter the descriptive rates only."""
    matched = [k for k, m in enumerate(found) if m]
    alone = [k for k, m in enumerate(found) if not m]
    picks = rng.sample(matched, min(count, len(matched)))
    picks += rng.sample(alone, min(count - len(picks), len(alone)))
    return sorted(picks)


def recovery_states(
    episodes: list[Episode],
    count: int,
    seed: int = 0,
    task_text: str = "compact",
    horizon: int = 1,
    per_state: int = 2,
) -> RecoveryStates:
    """Up to `count` post-error states at positions 1..horizon, each with its fresh matches.

    Candidates are every (episode, position) whose state exists (the episode went on); `count`
    of them are drawn (`pick`: those with a fresh match first) with an RNG of their own, so the
    same episodes and seed always give the same states.
    """
    rng = random.Random(seed)
    pool = [(e, j) for e in episodes for j in range(e.turns_used) if error_free(e, j)]
    rng.shuffle(pool)
    pool_covariates = [covariates(state_at(e, j), task_text) for e, j in pool]
    fresh = [(e.seed, match_key(**c)) for (e, _), c in zip(pool, pool_covariates, strict=True)]
    candidates = []
    for e in episodes:
        j = first_error(e)  # 1-based turn of the first error, or None
        for i in range(1, horizon + 1) if j is not None else ():
            if j + i - 1 < e.turns_used:  # the episode went on: the state exists
                candidates.append((e, j, i))
    states = [state_at(e, j + i - 1) for e, j, i in candidates]
    post_covariates = [covariates(s, task_text) for s in states]
    keys = [(s.seed, match_key(**c)) for s, c in zip(states, post_covariates, strict=True)]
    error_rate = hardness(turn_flags(episodes))
    found = match(keys, fresh, per_state, error_rate)
    picks = pick(found, count, rng)
    chosen = sorted({i for k in picks for i in found[k]})
    index = {i: n for n, i in enumerate(chosen)}
    return RecoveryStates(
        post=[states[k] for k in picks],
        kinds=[error_kind(candidates[k][0], candidates[k][1] - 1, task_text) for k in picks],
        after=[candidates[k][2] for k in picks],
        post_covariates=[post_covariates[k] for k in picks],
        matched=[state_at(*pool[i]) for i in chosen],
        matched_covariates=[pool_covariates[i] for i in chosen],
        matches=[[index[i] for i in found[k]] for k in picks],
        hardness=error_rate,
    )


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
