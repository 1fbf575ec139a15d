"""guess: find a hidden number in 1..n from higher / lower feedback.

The seed picks the target. After each guess the agent hears "higher" or "lower" with the range
still consistent with all feedback, or "correct". A guess outside that range is a mistake (it
ignores feedback already given). With m candidates left, the worst case needs
cost(m) = ceil(log2(m + 1)) more guesses, because the final guess must itself be the target.
The oracle's optimal guesses are those that keep the worst case at cost(m) - 1 after the guess.
optimal_length = cost(n), the worst-case optimum and the budget that guarantees success; it is
ceil(log2 n) unless n is a power of two (n = 16 needs 5). Following the oracle always solves
within optimal_length guesses, and in exactly optimal_length for the worst-case targets.
"""

from __future__ import annotations

import random

from tasks.base import Env, Outcome


def cost(m: int) -> int:
    """Worst-case guesses to find a target among m candidates: ceil(log2(m + 1)), exactly."""
    return m.bit_length()


class Guess(Env):
    name = "guess"

    def __init__(self, n: int = 15) -> None:
        super().__init__()
        # Every number up to n becomes a vocabulary word, so keep n modest.
        if not 2 <= n <= 1000:
            raise ValueError(f"n must be in 2..1000, got {n}")
        self.n = n
        self.action_words = tuple(str(i) for i in range(1, n + 1))

    @property
    def compact_rules(self) -> str:
        return (
            f"guess . find the number from 1 to {self.n} . reply with one number . "
            "you hear higher or lower ."
        )

    @property
    def natural_rules(self) -> str:
        return (
            f"I am thinking of a whole number from 1 to {self.n}. Find it. After each guess I "
            "say whether my number is higher or lower than your guess. " + self.format_rule()
        )

    @property
    def answer_hint(self) -> str:
        return f"one number from 1 to {self.n}"

    def _observe_natural(self) -> str:
        return f"My number is between {self.lo} and {self.hi}, both included."

    def _generate(self, rng: random.Random) -> None:
        self.target = rng.randint(1, self.n)
        self.lo, self.hi = 1, self.n
        self._found = False
        self.optimal_length = cost(self.n)

    def _observe(self) -> str:
        return f"range {self.lo} {self.hi}"

    def _apply(self, action: str) -> Outcome:
        guess = int(action)
        mistake = not self.lo <= guess <= self.hi
        if guess == self.target:
            self._found = True
            return Outcome("correct", mistake=mistake, natural=f"Correct: my number is {guess}.")
        if guess < self.target:
            self.lo = max(self.lo, guess + 1)
            said = f"Higher: my number is higher than {guess}. " + self._observe_natural()
            return Outcome("higher . " + self._observe(), mistake=mistake, natural=said)
        self.hi = min(self.hi, guess - 1)
        said = f"Lower: my number is lower than {guess}. " + self._observe_natural()
        return Outcome("lower . " + self._observe(), mistake=mistake, natural=said)

    def _solved(self) -> bool:
        return self._found

    def _oracle_actions(self) -> set[str]:
        lo, hi = self.lo, self.hi
        need = cost(hi - lo + 1) - 1
        return {str(g) for g in range(lo, hi + 1) if max(cost(g - lo), cost(hi - g)) == need}

    def _oracle_distance(self) -> float:
        return 0.0 if self._found else float(cost(self.hi - self.lo + 1))

    def _observation_words(self) -> set[str]:
        return set(self.action_words) | {"range", "higher", "lower", "correct", "."}
