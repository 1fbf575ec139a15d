"""Rewards: the outcome reward of an episode and the per-turn process reward, by hand."""

from __future__ import annotations

import math

import tasks
from minirl.episode import Episode, Turn
from minirl.rewards import outcome_rewards, progress_rewards


def turn(valid: bool = True, before: float = 1.0, after: float = 1.0) -> Turn:
    return Turn("x", "x" if valid else None, valid, False, valid, before, after, 0.0)


def test_outcome_reward_is_success_minus_the_invalid_penalty() -> None:
    won = Episode("gridnav", 0, 0, 4, True, 2, success=True)
    won.turns = [turn(), turn(valid=False), turn()]
    lost = Episode("gridnav", 1, 0, 4, True, 2, success=False)
    lost.turns = [turn(valid=False), turn(valid=False)]
    assert outcome_rewards([won, lost], 0.0) == [1.0, 0.0]
    assert outcome_rewards([won, lost], 0.25) == [0.75, -0.5]


def test_process_reward_of_a_deadlock_and_a_bump() -> None:
    ep = Episode("sokoban", 0, 0, 4, True, 4)
    ep.turns = [turn(before=4.0, after=3.0), turn(before=3.0, after=3.0)]
    ep.turns.append(turn(before=3.0, after=math.inf))
    assert progress_rewards(ep) == [0.25, 0.0, -1.0]
    assert progress_rewards(Episode("gridnav", 0, 0, 4, True, 2)) == []


def test_progress_reward_sums_to_one_along_an_optimal_path() -> None:
    env = tasks.make("gridnav")
    env.reset(5)
    ep = Episode("gridnav", 5, 0, 20, True, env.optimal_length)
    while not env.done:
        before = env.distance()
        step = env.step(sorted(env.optimal_actions())[0])
        ep.turns.append(Turn("x", "x", True, False, True, before, step.info["distance"], 0.0))
    assert sum(progress_rewards(ep)) == 1.0
