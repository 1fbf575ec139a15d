"""hilo: guess's number game, but the feedback never restates the range.

The seed picks a target in 1..n. After a guess the agent hears only "higher", "lower" or
"correct" (the natural text names the guess it answers and the one bound that answer sets:
"Higher: my number is higher than 8, so it is 9 or more."), so where the target can still be (the
belief state) is the interval [lo, hi] left by *every* earlier answer together, and only the
conversation's history holds it. This is guess with its memory taken away: the same oracle, but
an agent that reads only the last answer knows one bound of the interval, not both, so it cannot
halve it (it can still step from that bound: a walk, slower than halving).

Belief-state oracle. The belief is exactly the interval [lo, hi] of targets consistent with all
feedback (each answer cuts the interval; nothing else is learned). "Optimal" means what it means in
guess: the fewest guesses in the worst case over the targets the agent cannot rule out,
cost(m) = ceil(log2(m + 1)) for m candidates, so the optimal guesses keep
max(cost(left part), cost(right part)) = cost(m) - 1. It is exact because cost is the closed-form
worst case of binary search (tasks.guess). For n = 2^k - 1 (default 15) it also maximises the
chance of success within every budget T: no strategy finds more than 2^T - 1 targets in T guesses,
and the full binary tree finds exactly that many (see `ceiling`).

Errors (info["error"]). A wrong guess inside [lo, hi] is "unavoidable": the history could not
have ruled it out. A guess outside it (a repeated guess, or one earlier feedback contradicts) is
"avoidable", and is also the turn's `mistake`. optimal_length is the most guesses the oracle can
take for this target over its tie-breaks (at most cost(n), the worst case over targets), so, as
in fog and house, following the oracle always solves within optimal_length.
"""

from __future__ import annotations

import random

from tasks.base import Env, Outcome
from tasks.guess import cost


def belief(history: list[tuple[int, str]], n: int) -> tuple[int, int]:
    """The interval [lo, hi] of targets consistent with every (guess, "higher" | "lower")."""
    lo, hi = 1, n
    for guess, answer in history:
        if answer == "higher":
            lo = max(lo, guess + 1)
        elif answer == "lower":
            hi = min(hi, guess - 1)
    return lo, hi


def minimax_guesses(lo: int, hi: int) -> set[str]:
    """The guesses that keep the worst case over [lo, hi] at its minimum, cost(m) - 1 after."""
    need = cost(hi - lo + 1) - 1
    return {str(g) for g in range(lo, hi + 1) if max(cost(g - lo), cost(hi - g)) == need}


# The natural text says what guess says minus the range: it names the guess it answers, as a game
# host would, and the bound that this one answer sets ("so it is 9 or more"), so the one difference
# between the two tasks is the memory the range would restore: the other bound, set by an earlier
# answer, is said only once. Each edition removed one step guess does not ask of a chat model:
# - the first said "higher than your guess": the model had to find its own last reply first;
# - the second said "higher than 8": the model had to add one to it. SmolLM2-135M never did: it
#   learned a fixed script at every setting tried (tutorials/measured.md, "hilo"), while on guess,
#   which writes the bound out, it learned to step from the number it reads.
_SAID = {
    "start": "I have picked my number. Make your first guess.",
    "higher": "Higher: my number is higher than {guess}, so it is {above} or more.",
    "lower": "Lower: my number is lower than {guess}, so it is {below} or less.",
    "correct": "Correct: my number is {guess}.",
}


class Hilo(Env):
    name = "hilo"

    def __init__(self, n: int = 15) -> None:
        super().__init__()
        if not 2 <= n <= 100:
            raise ValueError(f"n must be in 2..100, got {n}")
        self.n = n
        self.action_words = tuple(str(i) for i in range(1, n + 1))

    @property
    def compact_rules(self) -> str:
        return (
            f"hilo . find the number from 1 to {self.n} . reply with one number . "
            "you hear only higher or lower ."
        )

    @property
    def natural_rules(self) -> str:
        return (
            f"I am thinking of a whole number from 1 to {self.n}. Find it. After each guess I "
            "only say whether my number is higher or lower than your guess; I do not repeat "
            "what I said before, so remember it. " + self.format_rule()
        )

    @property
    def answer_hint(self) -> str:
        return f"one number from 1 to {self.n}"

    def _generate(self, rng: random.Random) -> None:
        self.target = rng.randint(1, self.n)
        self.lo, self.hi = 1, self.n  # the belief state: targets consistent with all feedback
        self._found = False
        self._last = "start"  # the latest answer: all an observation ever says
        self._said = _SAID["start"]  # and the same answer as natural text
        self.optimal_length = self._worst_oracle_turns(1, self.n)

    def _observe(self) -> str:
        return self._last

    def _observe_natural(self) -> str:
        return self._said

    def _apply(self, action: str) -> Outcome:
        guess = int(action)
        known = self.lo <= guess <= self.hi
        error = None if guess == self.target else "unavoidable" if known else "avoidable"
        if guess == self.target:
            self._found, self._last = True, "correct"
        elif guess < self.target:
            self.lo, self._last = max(self.lo, guess + 1), "higher"
        else:
            self.hi, self._last = min(self.hi, guess - 1), "lower"
        self._said = _SAID[self._last].format(guess=guess, above=guess + 1, below=guess - 1)
        return Outcome(
            self._last, error == "avoidable", extras={"error": error}, natural=self._said
        )

    def _solved(self) -> bool:
        return self._found

    def _quiet_extras(self) -> dict:
        return {"error": None}

    def _oracle_actions(self) -> set[str]:
        return minimax_guesses(self.lo, self.hi)

    def _worst_oracle_turns(self, lo: int, hi: int) -> int:
        """The most guesses the oracle needs for this target from the interval [lo, hi]."""
        longest = 0
        for g in map(int, minimax_guesses(lo, hi)):
            if g == self.target:
                longest = max(longest, 1)
            else:
                lo2, hi2 = (g + 1, hi) if g < self.target else (lo, g - 1)
                longest = max(longest, 1 + self._worst_oracle_turns(lo2, hi2))
        return longest

    def _oracle_distance(self) -> float:
        return 0.0 if self._found else float(cost(self.hi - self.lo + 1))

    def _observation_words(self) -> set[str]:
        return {"start", "higher", "lower", "correct", "."}

    def ceiling(self, budget: int) -> float:
        """The best success any strategy can reach in `budget` guesses: min(1, (2^T - 1) / n)."""
        return min(1.0, (2**budget - 1) / self.n)
