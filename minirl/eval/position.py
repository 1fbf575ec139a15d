"""Recovery in the same position: the base's failed first errors, and exact scores around them.

A post-error state is a position where the policy has just erred. Compared with *other* fresh
states, even ones matched on turn, distance and optimal actions (minirl.eval.recovery), it reads
as a deficit for a policy that ignores its history entirely: it is a position where this policy
errs more than in a typical state with the same key (selection). For a *failed* action (a bump
into a wall, "nothing happens", a reply that names no action) there is a perfect match: the same
position one turn earlier, which differs from the post-error state only in the failed attempt the
conversation now shows (and one turn less left). This module finds those pairs and scores them:

    pre   the conversation just before the error (no error behind it)
    post  the conversation just after it: the same position, plus the failed attempt

Detours (a move that worked but was not on a shortest path) change the position, so they make no
pair. Every action the task allows is scored exactly in both states by the model's own
log-probabilities of its reply tokens (minirl.logprobs.reply_logps), renormalized over the
actions, so the scores carry no sampling noise:

    P(optimal | s) = sum over optimal a of exp(log p(a | s)) / sum over all a of exp(log p(a | s))

Two readers: `python -m minirl.tools.error_probe` (one model, a delta-method standard error) and
the study (minirl.compare records the pairs from the base's episodes and scores every checkpoint
on them; minirl.study.claims turns the scores into the recovery test, with the instance
bootstrap and the run-level t of every other claim).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from transformers import PreTrainedModel, PreTrainedTokenizerBase

import tasks
from minirl.chat import action_replies
from minirl.episode import Episode, EpisodeSpec
from minirl.eval.analysis import first_error, replay, state_at
from minirl.eval.recovery import error_kind
from minirl.eval.results import PositionScores
from minirl.logprobs import reply_logps, reply_logps_many

# Log-odds are taken of probabilities kept this far from 0 and 1 (a renormalized softmax never
# reaches them, but float32 rounding can).
CLIP = 1e-6


def logit(p: float) -> float:
    p = min(max(p, CLIP), 1 - CLIP)
    return math.log(p / (1 - p))


@dataclass
class Pair:
    """The same position just before and just after a failed first error."""

    pre: EpisodeSpec
    post: EpisodeSpec
    error: str | None  # the failed action; None for a reply that named no action
    optimal: frozenset[str]  # the oracle-optimal actions there: the same in both states


@dataclass
class PairScore:
    """The model's action distribution in both states of a pair, summarized."""

    seed: int  # the instance: pairs of one instance are one cluster of the standard error
    optimal_pre: float  # P(optimal | pre)
    optimal_post: float  # P(optimal | post)
    repeat_pre: float  # P(the action that then failed | pre); nan for an invalid reply
    repeat_post: float  # P(that action again | post)


def same_position_pairs(episodes: list[Episode], task_text: str = "compact") -> list[Pair]:
    """One pair per episode whose first error was a failed action the episode played on from.

    A failed action leaves the world as it was; the check on the optimal actions and the distance
    makes sure of it (fog's unseen walls, for instance, are learned by bumping, but the oracle
    knows the map, so its view of the position does not change). States where every action is
    optimal say nothing about the choice and are left out.
    """
    pairs = []
    for episode in episodes:
        j = first_error(episode)  # 1-based turn of the first error
        if j is None or j >= episode.turns_used:  # no error, or the episode ended with it
            continue
        if error_kind(episode, j - 1, task_text) == "detour":  # it moved: no same position
            continue
        pre, post = state_at(episode, j - 1), state_at(episode, j)
        before, after = replay(pre, task_text), replay(post, task_text)
        optimal = frozenset(before.optimal_actions())
        if optimal != frozenset(after.optimal_actions()) or before.distance() != after.distance():
            continue
        if optimal >= set(before.action_words):
            continue
        pairs.append(Pair(pre, post, episode.turns[j - 1].action, optimal))
    return pairs


def action_probs(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, state: EpisodeSpec, env: tasks.Env
) -> dict[str, float]:
    """P(a | state) for every action a the task allows, renormalized over them (exact)."""
    candidates = action_replies(tokenizer, env)
    return _renormalized(env.action_words, reply_logps(model, list(state.prompt_ids), candidates))


def _renormalized(words: list[str] | tuple[str, ...], logps: list[float]) -> dict[str, float]:
    top = max(logps)
    weights = [math.exp(lp - top) for lp in logps]  # shifted so that none underflows
    total = sum(weights)
    return {w: x / total for w, x in zip(words, weights, strict=True)}


def score(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    pairs: list[Pair],
    task_text: str = "compact",
) -> list[PairScore]:
    """Both states of every pair, scored exactly (`action_probs` of each, in shared forwards)."""
    if not pairs:
        return []
    env = tasks.make(pairs[0].pre.task, text=task_text)  # one task's pairs: one action list
    words = env.action_words
    candidates = action_replies(tokenizer, env)
    states = [(list(s.prompt_ids), candidates) for p in pairs for s in (p.pre, p.post)]
    logps = reply_logps_many(model, states)
    scores = []
    for k, pair in enumerate(pairs):
        pre, post = (_renormalized(words, lp) for lp in logps[2 * k : 2 * k + 2])
        scores.append(
            PairScore(
                seed=pair.pre.seed,
                optimal_pre=sum(pre[a] for a in pair.optimal),
                optimal_post=sum(post[a] for a in pair.optimal),
                repeat_pre=pre[pair.error] if pair.error else math.nan,
                repeat_post=post[pair.error] if pair.error else math.nan,
            )
        )
    return scores


def position_scores(scores: list[PairScore]) -> PositionScores:
    """The scores as results.json keeps them (one list per field, in the pairs' order)."""
    return PositionScores(
        optimal_pre=[s.optimal_pre for s in scores],
        optimal_post=[s.optimal_post for s in scores],
        repeat_pre=[s.repeat_pre for s in scores],
        repeat_post=[s.repeat_post for s in scores],
    )


def pair_record(pair: Pair) -> dict:
    """A pair as EvalMeta.position_pairs keeps it: the post-error state's instance and replies
    (the pre state is the same replies but the last), the failed action and the optimal ones."""
    return {
        "seed": pair.post.seed,
        "replies": list(pair.post.replies),
        "error": pair.error,
        "optimal": sorted(pair.optimal),
    }
