"""Rewards: what a finished episode is worth to training.

The environment itself only says whether the goal was reached (`Step.reward` is 1.0 on the solving
turn). Training turns each episode into the numbers GRPO compares within a group:

- the **outcome reward** of episode i, ``R_i = success_i - invalid_penalty * #invalid_i``: one
  number per episode, the trajectory-level signal of the paper. The penalty is the format reward:
  0 for the compact text, whose tiny model already answers in format, and FORMAT_PENALTY for the
  natural text, where a pretrained chat model starts with many invalid replies. Until its replies
  are valid every episode fails, every group's successes tie, and GRPO's group-relative advantage
  is zero: the penalty is then the only difference between a group's episodes;
- the **process rewards** of its turns (``reward_mode=process``), ``r_it = (d_before - d_after) /
  d_start``: each turn's progress toward the goal by the oracle's distance, scaled so an
  oracle-optimal successful episode collects exactly 1. This is the "process supervision" arm;
  minirl.grpo.turn_advantages turns them into per-turn credit;
- the **mistake penalty** (``--mistake_penalty``, default 0): subtracted once per turn whose action
  the state already showed to be wasted (the task's `mistake`: a wall bump, a guess the feedback
  had ruled out, a cell already known to be a wall). In process mode it is part of that turn's
  process reward, ``r_it = (d_before - d_after) / d_start - mistake_penalty * mistake_it``, so the
  credit falls on the turn that ignored the feedback; in outcome mode it is part of ``R_i``.

Why the mistake penalty exists. guess and hilo measure distance as the oracle's worst-case guesses
left, ceil(log2(m + 1)) for m candidates, which is flat over most single guesses: from [1, 7],
guessing 7 (consistent with "lower than 8") and guessing 9 (ruled out) both leave the distance at
3 and earn the same process reward 0. A chat model that has not yet learned to read the feedback
then sees no difference between the two turns until an episode ends; the penalty gives the turn
that contradicts what it was told its own, immediate cost.

Both backends (minirl.trainer and minirl.trl_backend) score episodes here and nowhere else.
"""

from __future__ import annotations

import math

from minirl.episode import Episode

# Per invalid reply. Small enough that one success outweighs the invalid replies of a whole
# episode at the default budgets (T <= 9), large enough to rank a group's all-failed episodes.
FORMAT_PENALTY = 0.1


def invalid_penalty_for(invalid_penalty: float | None, task_text: str) -> float:
    """`--invalid_penalty` made concrete: the value given, else the text's default (above)."""
    if invalid_penalty is not None:
        return invalid_penalty
    return FORMAT_PENALTY if task_text == "natural" else 0.0


def outcome_rewards(
    episodes: list[Episode], invalid_penalty: float, mistake_penalty: float = 0.0
) -> list[float]:
    """The outcome reward per episode: 1 for success, minus a penalty per invalid action and one
    per mistake (the latter only in outcome mode: process mode puts it in the turn's reward)."""
    return [
        float(e.success)
        - invalid_penalty * sum(not t.valid for t in e.turns)
        - mistake_penalty * sum(t.mistake for t in e.turns)
        for e in episodes
    ]


def progress_rewards(episode: Episode, mistake_penalty: float = 0.0) -> list[float]:
    """Per-turn process reward: the drop in oracle distance, as a fraction of the start distance,
    minus `mistake_penalty` on a mistake turn.

    A successful oracle-optimal episode collects exactly 1.0 in total; a wall bump collects
    -mistake_penalty (0 by default); a move into a deadlock (distance becomes infinite) gives -1,
    the most a turn can lose, whatever the penalty.
    """
    if not episode.turns:
        return []
    start = episode.turns[0].distance_before
    scale = start if start > 0 and math.isfinite(start) else 1.0
    rewards = []
    for t in episode.turns:
        if not math.isfinite(t.distance_after):
            rewards.append(-1.0)
        else:
            progress = (t.distance_before - t.distance_after) / scale
            rewards.append(progress - mistake_penalty * t.mistake)
    return rewards


def score(
    episodes: list[Episode], reward_mode: str, invalid_penalty: float, mistake_penalty: float
) -> tuple[list[float], list[list[float]] | None]:
    """Each episode's outcome reward and, in process mode, its turns' process rewards.

    The mistake penalty is counted once: in the turn's process reward when there is one (so the
    credit falls on that turn), else in the outcome reward.
    """
    process = reward_mode == "process"
    outcome = outcome_rewards(episodes, invalid_penalty, 0.0 if process else mistake_penalty)
    turns = [progress_rewards(e, mistake_penalty) for e in episodes] if process else None
    return outcome, turns
