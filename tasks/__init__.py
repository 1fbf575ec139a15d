"""Text environments for multi-turn RL: gridnav, icy, sokoban and guess.

Each task is a tiny text game with an exact oracle (BFS, value iteration or binary search), so
rollouts can be scored against the optimum turn by turn. make(name, **options) builds a fresh
environment; reset(seed) builds an instance deterministically from the seed. Train on seeds from
TRAIN_SEEDS and evaluate on EVAL_SEEDS, which are disjoint so evaluation is held out.
"""

from __future__ import annotations

import inspect

from tasks.base import TEXTS, Env, Step, parse_action, parse_reply
from tasks.gridnav import GridNav
from tasks.guess import Guess
from tasks.icy import Icy
from tasks.sokoban import Sokoban

NAMES: tuple[str, ...] = ("gridnav", "icy", "sokoban", "guess")
_CLASSES: dict[str, type[Env]] = {
    "gridnav": GridNav,
    "icy": Icy,
    "sokoban": Sokoban,
    "guess": Guess,
}

TRAIN_SEEDS: range = range(0, 1_000_000)
EVAL_SEEDS: range = range(1_000_000, 1_100_000)


def make(name: str, text: str = "compact", **options: object) -> Env:
    """A new environment for task `name` in `text` (see TEXTS); options go to its constructor."""
    if text not in TEXTS:
        raise ValueError(f"unknown task text {text!r}; valid texts: {', '.join(TEXTS)}")
    if name not in _CLASSES:
        raise ValueError(f"unknown task {name!r}; valid tasks: {', '.join(NAMES)}")
    cls = _CLASSES[name]
    known = [p for p in inspect.signature(cls.__init__).parameters if p != "self"]
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise TypeError(f"task {name!r} has no option {unknown[0]!r}; options: {', '.join(known)}")
    env = cls(**options)
    env.text = text
    return env


__all__ = [
    "EVAL_SEEDS",
    "NAMES",
    "TEXTS",
    "TRAIN_SEEDS",
    "Env",
    "Step",
    "make",
    "parse_action",
    "parse_reply",
]
