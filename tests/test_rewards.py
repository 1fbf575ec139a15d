"""Rewards: the outcome reward of an episode and the per-turn process reward, by hand."""

from __future__ import annotations

import math

import pytest

import tasks
from minirl.episode import Episode, Turn
from minirl.rewards import outcome_rewards, progress_rewards, score


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


def played_hilo(seed: int, guesses: list[str]) -> Episode:
    """An Episode of hilo with these guesses, its turns as minirl.rollout records them."""
    env = tasks.make("hilo")
    env.reset(seed)
    ep = Episode("hilo", seed, 0, len(guesses), True, env.optimal_length)
    for guess in guesses:
        before = env.distance()
        info = env.step(guess).info
        ep.turns.append(
            Turn(guess, guess, True, info["mistake"], info["optimal"], before, info["distance"], 0)
        )
    ep.success = bool(info["success"])
    return ep


def low_target_seed() -> int:
    """A hilo instance whose number is below 7, so 8, 9, 7 are three wrong guesses."""
    env = tasks.make("hilo")
    for seed in range(100):
        env.reset(seed)
        if env.target < 7:
            return seed
    raise AssertionError("no hilo instance below 7 in 100 seeds")


def test_mistake_penalty_falls_on_the_turn_that_ignored_the_feedback() -> None:
    # 8 halves [1, 15] (the oracle's worst case 4 -> 3 guesses: progress 1/4); after "lower",
    # 9 is ruled out (a mistake) and 7 is not, yet both leave the worst case at 3 guesses: without
    # the penalty the two turns earn the same 0, the flatness minirl.rewards explains.
    ep = played_hilo(low_target_seed(), ["8", "9", "7"])
    assert [t.mistake for t in ep.turns] == [False, True, False]
    assert progress_rewards(ep) == [0.25, 0.0, 0.0]
    assert progress_rewards(ep, 0.25) == [0.25, -0.25, 0.0]
    assert progress_rewards(ep, 0.5) == [0.25, -0.5, 0.0]


def test_score_counts_the_mistake_penalty_once() -> None:
    seed = low_target_seed()
    episodes = [played_hilo(seed, ["8", "9", "10"]), played_hilo(seed, ["8", "7", "6"])]
    episodes[1].turns[2].valid = False  # one invalid reply, for the format penalty
    # Outcome mode: R_i = success - 0.1 * #invalid - 0.25 * #mistakes; no turn rewards.
    outcome, turns = score(episodes, "outcome", 0.1, 0.25)
    assert outcome == pytest.approx([-0.5, -0.1]) and turns is None
    # Process mode: the penalty is in the mistake turns' rewards and not in R_i.
    outcome, turns = score(episodes, "process", 0.1, 0.25)
    assert outcome == pytest.approx([0.0, -0.1])
    assert turns == [[0.25, -0.25, -0.25], [0.25, 0.0, 0.0]]
    # Unset, the scores are the ones minirl gave before the option, exactly.
    assert score(episodes, "outcome", 0.1, 0.0) == (outcome_rewards(episodes, 0.1), None)
    assert score(episodes, "process", 0.1, 0.0) == (
        outcome_rewards(episodes, 0.1),
        [progress_rewards(e) for e in episodes],
    )
