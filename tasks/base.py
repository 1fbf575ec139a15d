"""The shared environment contract: the Step record, action parsing and the Env base class.

Every task is a small text game played one action word per turn. The base class owns the
bookkeeping that must behave identically in every task: parsing the model's reply, treating
unparseable replies as invalid turns that leave the state alone, refusing to step a finished
episode, the reward (1.0 on the solving step, else 0.0) and the fixed set of info keys. A task
only builds an instance from a seeded RNG, describes its state in words, applies one parsed
action, and answers the oracle questions: distance() and optimal_actions().
"""

from __future__ import annotations

import random
import string
from dataclasses import dataclass, field

# Only punctuation a model tends to wrap a word in; "-" and "+" stay so "-1" is not read as "1".
_WRAPPING = ".,!?;:'\"`*()[]{}<>" + string.whitespace


def parse_action(text: str, action_words: tuple[str, ...]) -> str | None:
    """The action word that `text` names, or None when it names none (never raises)."""
    if not isinstance(text, str):
        return None
    word = text.strip().lower().strip(_WRAPPING)
    return word if word in action_words else None


@dataclass
class Step:
    """What one call to Env.step returns."""

    observation: str
    reward: float
    done: bool
    info: dict


@dataclass
class Outcome:
    """What a task reports after applying one valid action; the base class turns it into a Step."""

    observation: str
    mistake: bool
    failed: bool = False  # an irreversible failure (a sokoban deadlock) ends the episode
    extras: dict = field(default_factory=dict)


class Env:
    """Base class: subclasses set name/action_words and implement the hooks below."""

    name: str = "env"
    action_words: tuple[str, ...] = ()

    def __init__(self) -> None:
        self.optimal_length: int = 0
        self._ready = False
        self._done = False

    # ---- hooks for subclasses -------------------------------------------------------------
    @property
    def system_prompt(self) -> str:
        raise NotImplementedError

    def _generate(self, rng: random.Random) -> None:
        """Build the instance from rng and set optimal_length."""
        raise NotImplementedError

    def _observe(self) -> str:
        """The current state in words."""
        raise NotImplementedError

    def _apply(self, action: str) -> Outcome:
        """Apply one valid action word to the state."""
        raise NotImplementedError

    def _solved(self) -> bool:
        raise NotImplementedError

    def _quiet_extras(self) -> dict:
        """Task-specific info keys with their values for a turn where nothing happened."""
        return {}

    def _oracle_actions(self) -> set[str]:
        raise NotImplementedError

    def _oracle_distance(self) -> float:
        raise NotImplementedError

    def _observation_words(self) -> set[str]:
        """Every word (other than those in the prompt) that an observation can contain."""
        raise NotImplementedError

    def picture(self) -> dict | None:
        """The current state as something to draw, for people only; None when the task has none.

        The episode viewer (minirl.viewer) replays an episode through a fresh env and draws this
        after every turn; the model never sees it (it reads the observation). An optional hook:
        the default is None, and the viewer then shows the observation text alone. A task with a
        grid returns a plain, JSON-ready dict; cells are [row, col], row 0 at the top:

            "rows", "cols"   int              the grid's size; outside it is wall
            "walls"          [[r, c], ...]    walls drawn solid. A task that hides its walls
                                              (a maze in fog) lists only those the agent has met
            "hidden_walls"   [[r, c], ...]    optional: walls the agent has not met yet, drawn
                                              faint, so a student sees what the agent could not
            "fog"            [[r, c], ...]    optional: cells the agent has not seen, shaded
            "agent"          [r, c]           where the agent stands
            "goal"           [r, c]           optional: where it must go
            "box", "target"  [r, c]           optional: a box and the cell it must be pushed to

        Keys the viewer does not know are ignored, so a task may add its own.
        """
        return None

    # ---- the public API -------------------------------------------------------------------
    def reset(self, seed: int) -> str:
        # A string seed is hashed with sha512 by random.Random, so instances do not depend on
        # PYTHONHASHSEED and the same seed gives the same instance on every machine.
        self._generate(random.Random(f"{self.name}:{seed}"))
        self._ready, self._done = True, False
        return self._observe()

    def step(self, action_text: str) -> Step:
        self._require_ready()
        if self._done:
            raise RuntimeError("episode is done; call reset()")
        action = parse_action(action_text, self.action_words)
        if action is None:
            info = self._info(None, False, False, False, False, self._quiet_extras())
            return Step("invalid action . " + self._observe(), 0.0, False, info)
        # The optimal flag must judge the state the action was chosen in, so ask before moving.
        optimal = action in self._oracle_actions()
        outcome = self._apply(action)
        success = self._solved()
        self._done = success or outcome.failed
        info = self._info(action, True, outcome.mistake, optimal, success, outcome.extras)
        return Step(outcome.observation, 1.0 if success else 0.0, self._done, info)

    def optimal_actions(self) -> set[str]:
        """The actions that lie on some optimal solution from the current state."""
        self._require_ready()
        return set() if self._done else self._oracle_actions()

    def distance(self) -> float:
        """Oracle distance to the goal: 0 at the goal, math.inf when the goal is unreachable."""
        self._require_ready()
        return self._oracle_distance()

    def vocabulary(self) -> set[str]:
        """Every word the system prompt and observations can produce (for a word tokenizer)."""
        prompt = set(self.system_prompt.split())
        return prompt | self._observation_words() | {"invalid", "action", "."}

    @property
    def done(self) -> bool:
        return self._done

    # ---- helpers --------------------------------------------------------------------------
    def _require_ready(self) -> None:
        if not self._ready:
            raise RuntimeError("call reset(seed) before step() or the oracle")

    def _info(
        self,
        action: str | None,
        valid: bool,
        mistake: bool,
        optimal: bool,
        success: bool,
        extras: dict,
    ) -> dict:
        info = {
            "action": action,
            "valid": valid,
            "mistake": mistake,
            "optimal": optimal,
            "success": success,
            "distance": self._oracle_distance(),
        }
        info.update(extras)
        return info
