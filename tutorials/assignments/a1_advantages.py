"""Assignment 1: group-normalised trajectory advantages (the "G" in GRPO).

Implement `group_advantages`. Grade it with:

    python -m pytest tutorials/assignments/test_a1.py
"""

from __future__ import annotations


def group_advantages(
    rewards: list[float], num_generations: int, scale_rewards: str = "group", eps: float = 1e-4
) -> list[float]:
    """One advantage per episode: its reward against the other episodes of its group.

    `rewards` holds consecutive groups of `num_generations` episodes (the G episodes of one task
    instance). For an episode with reward r in a group with mean m and standard deviation s
    (the sample std, with Bessel's n - 1 correction, as TRL computes it):

        scale_rewards="group": (r - m) / (s + eps)
        scale_rewards="batch": (r - m) / (S + eps), S = the std of all rewards of the batch
        scale_rewards="none":  r - m

    Raise ValueError when num_generations < 2, when len(rewards) is not a multiple of it, or for an
    unknown scale_rewards.
    """
    raise NotImplementedError("assignment 1: implement group_advantages")
