"""Grader for assignment 4 (hilo's belief-state oracle): the task contract's oracle checks.

The student's oracle drives the real environment: it must solve every instance within the
instance's optimal_length and never make an avoidable error, answer only from the history, keep
the worst case at its optimum, and do clearly better than the same oracle shown the last answer
only (the history-blind policy).
"""

from __future__ import annotations

import random

import pytest
from grading import implementation

import tasks
from tasks.guess import cost

optimal_guesses = implementation("a4_belief_oracle", "optimal_guesses")
N = 15


def play(seed: int, blind: bool = False, budget: int = 30, n: int = N) -> tuple[bool, int, list]:
    """One hilo episode driven by the student's oracle; (solved, turns, infos)."""
    env = tasks.make("hilo", n=n)
    env.reset(seed)
    history: list[tuple[int, str]] = []
    rng, infos = random.Random(seed), []
    for turn in range(1, budget + 1):
        shown = history[-1:] if blind else history
        guess = rng.choice(sorted(optimal_guesses(list(shown), n)))
        step = env.step(str(guess))
        infos.append(step.info)
        if step.done:
            return True, turn, infos
        history.append((guess, step.observation))
    return False, budget, infos


def test_first_guess_halves_the_range() -> None:
    assert optimal_guesses([], 15) == {8}
    assert optimal_guesses([], 7) == {4}


def test_uses_every_earlier_answer() -> None:
    # 8 higher, then 12 lower: the target is in 9..11, and only 10 halves it.
    assert optimal_guesses([(8, "higher"), (12, "lower")], 15) == {10}
    # The same last answer after another history leaves other targets: 1..7 then 5..7.
    assert optimal_guesses([(8, "lower"), (4, "higher")], 15) == {6}


def test_ties_are_all_returned() -> None:
    # 9..12 is left: every guess keeps the worst case at two more guesses.
    assert optimal_guesses([(8, "higher"), (13, "lower")], 15) == {9, 10, 11, 12}


@pytest.mark.parametrize("n", [15, 10, 20])
def test_solves_every_instance_within_its_length_without_avoidable_errors(n: int) -> None:
    env = tasks.make("hilo", n=n)
    for seed in range(300):
        env.reset(seed)
        solved, turns, infos = play(seed, n=n)
        assert solved and turns <= cost(n), (n, seed)
        assert all(info["optimal"] for info in infos), (n, seed)
        assert all(info["error"] != "avoidable" for info in infos), (n, seed)


def test_history_blind_use_does_worse() -> None:
    seeds = range(tasks.EVAL_SEEDS.start, tasks.EVAL_SEEDS.start + 300)
    full = sum(play(s, budget=4)[0] for s in seeds) / len(seeds)
    blind = sum(play(s, blind=True, budget=4)[0] for s in seeds) / len(seeds)
    # Measured with the reference: 1.00 against 0.59 within 4 guesses.
    assert full == 1.0
    assert full - blind >= 0.3, blind
