"""Text environments for multi-turn RL: gridnav, icy, sokoban, guess, and hilo, fog and house.

Each task is a tiny text game with an exact oracle (BFS, value iteration, binary search or
expectimax), so rollouts can be scored against the optimum turn by turn. hilo, fog and house
(HIDDEN) hide information (the range, the walls, the key): their oracles answer over the belief
state, every earlier observation, and classify each failed action in info["error"] as avoidable
given the history or unavoidable (tasks.history measures what the history is worth).
make(name, **options) builds a fresh environment; reset(seed) builds an instance
deterministically from the seed. Train on seeds from TRAIN_SEEDS and evaluate on EVAL_SEEDS,
which are disjoint so evaluation is held out.
"""

from __future__ import annotations

import inspect

from tasks.base import TEXTS, Env, Step, parse_action, parse_reply
from tasks.fog import Fog
from tasks.gridnav import GridNav
from tasks.guess import Guess
from tasks.hilo import Hilo
from tasks.house import House
from tasks.icy import Icy
from tasks.sokoban import Sokoban

NAMES: tuple[str, ...] = ("gridnav", "icy", "sokoban", "guess", "hilo", "fog", "house")
_CLASSES: dict[str, type[Env]] = {
    "gridnav": GridNav,
    "icy": Icy,
    "sokoban": Sokoban,
    "guess": Guess,
    "hilo": Hilo,
    "fog": Fog,
    "house": House,
}
HIDDEN: tuple[str, ...] = ("hilo", "fog", "house")  # tasks whose observation hides information

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
    "HIDDEN",
    "NAMES",
    "TEXTS",
    "TRAIN_SEEDS",
    "Env",
    "Step",
    "make",
    "parse_action",
    "parse_reply",
]
