"""Assignment 4: the belief-state oracle of hilo (lesson 8).

In `hilo` the agent hears only "higher" or "lower" after each guess; the range is never restated.
Implement `optimal_guesses`. Grade it with:

    python -m pytest tutorials/assignments/test_a4.py
"""

from __future__ import annotations


def optimal_guesses(history: list[tuple[int, str]], n: int) -> set[int]:
    """Every guess that is optimal after `history`, for a target in 1..n.

    `history` lists the earlier turns as (guess, answer) with answer "higher" (the target is
    above the guess) or "lower" (below); it holds no "correct" turn, since that ends the game.
    Optimal means: fewest guesses in the worst case over the targets the history has not ruled
    out. With m candidates left, the worst case of the best strategy is
    cost(m) = ceil(log2(m + 1)) guesses; a guess is optimal when, whatever the answer, at most
    cost(m) - 1 more guesses are needed after it. Only the whole history tells which targets
    are left: the last answer alone does not.
    """
    raise NotImplementedError("assignment 4: implement optimal_guesses")
