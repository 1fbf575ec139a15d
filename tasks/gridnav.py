"""gridnav: walk from a start cell to a goal cell on a small grid with walls.

An instance is an N x N grid whose cells are walls independently with probability wall_prob,
plus a distinct start and goal. Instances are resampled until the goal is reachable and the BFS
optimal length lies in [min_length, max_length]. The agent sees its position, the goal and the
directions that are blocked; moving into a wall or the edge is a mistake that wastes the turn.
The oracle is BFS from the goal: an action is optimal iff it lowers the BFS distance by one.
"""

from __future__ import annotations

import math
import random

from tasks.base import Env, Outcome
from tasks.grid import (
    ACTIONS,
    GRID_RULES,
    Cell,
    Grid,
    bfs_distances,
    blocked_sentence,
    cell_sentence,
    cell_words,
    offset_sentence,
    offset_words,
)

_MAX_ATTEMPTS = 10_000


def sample_instance(
    rng: random.Random, size: int, wall_prob: float, min_length: int, max_length: int
) -> tuple[Grid, Cell, Cell, dict[Cell, int]]:
    """A (grid, start, goal, distance-to-goal map) whose optimal length is in range."""
    for _ in range(_MAX_ATTEMPTS):
        walls = frozenset(
            (r, c) for r in range(size) for c in range(size) if rng.random() < wall_prob
        )
        grid = Grid(size, walls)
        free = grid.cells()
        if len(free) < 2:
            continue
        start, goal = rng.sample(free, 2)
        dist = bfs_distances(grid, goal)
        if min_length <= dist.get(start, -1) <= max_length:
            return grid, start, goal, dist
    raise ValueError(
        f"no instance with optimal length in [{min_length}, {max_length}] found for "
        f"size={size}, wall_prob={wall_prob}; widen the length range"
    )


def check_grid_options(size: int, wall_prob: float, min_length: int, max_length: int) -> None:
    # size <= 10 keeps every coordinate a single number word and icy's value iteration tiny.
    if not 2 <= size <= 10:
        raise ValueError(f"size must be in 2..10, got {size}")
    if not 0.0 <= wall_prob < 1.0:
        raise ValueError(f"wall_prob must be in [0, 1), got {wall_prob}")
    if not 1 <= min_length <= max_length:
        raise ValueError(f"need 1 <= min_length <= max_length, got {min_length}, {max_length}")


class GridNav(Env):
    name = "gridnav"
    action_words = ACTIONS

    def __init__(
        self, size: int = 5, wall_prob: float = 0.2, min_length: int = 2, max_length: int = 8
    ) -> None:
        super().__init__()
        check_grid_options(size, wall_prob, min_length, max_length)
        self.size, self.wall_prob = size, wall_prob
        self.min_length, self.max_length = min_length, max_length

    @property
    def compact_rules(self) -> str:
        return (
            f"{self.name} . move to the goal . walls block moves . "
            "reply with one word : up down left right ."
        )

    @property
    def natural_rules(self) -> str:
        return (
            f"You are walking on a {self.size} by {self.size} grid and must reach the goal. "
            f"{GRID_RULES} Walls block moves: walking into one wastes the turn. "
            + self.format_rule()
        )

    def _generate(self, rng: random.Random) -> None:
        self.grid, self.start, self.goal, self._dist = sample_instance(
            rng, self.size, self.wall_prob, self.min_length, self.max_length
        )
        self.pos = self.start
        self.optimal_length = self._dist[self.start]
        # The oracle's moves from every reachable cell, once per instance: a step asks for them
        # twice, and the study's simulations replay the same instances thousands of times.
        self._moves = {cell: self._moves_from(cell) for cell in self._dist}

    def _observe(self) -> str:
        blocked = " ".join(self.grid.blocked(self.pos)) or "none"
        goal = offset_words(self.pos, self.goal)
        return f"pos {cell_words(self.pos)} goal {goal} blocked {blocked}"

    def _observe_natural(self) -> str:
        return (
            f"You are at {cell_sentence(self.pos)}. "
            f"The goal is {offset_sentence(self.pos, self.goal)}. "
            + blocked_sentence(self.grid.blocked(self.pos))
        )

    def _apply(self, action: str) -> Outcome:
        nxt = self.grid.move(self.pos, action)
        if nxt == self.pos:
            bump = "You walked into a wall and did not move. "
            return Outcome(
                "wall . " + self._observe(), True, natural=bump + self._observe_natural()
            )
        self.pos = nxt
        return Outcome(self._observe(), mistake=False, natural=self._observe_natural())

    def _solved(self) -> bool:
        return self.pos == self.goal

    def _moves_from(self, cell: Cell) -> frozenset[str]:
        """The moves that bring `cell` one step closer to the goal."""
        here = self._dist[cell]
        return frozenset(
            a
            for a in ACTIONS
            if (nxt := self.grid.move(cell, a)) != cell and self._dist[nxt] == here - 1
        )

    def _oracle_actions(self) -> set[str]:
        return set(self._moves[self.pos])  # a copy: the table stays as it is

    def _oracle_distance(self) -> float:
        return float(self._dist.get(self.pos, math.inf))

    def _observation_words(self) -> set[str]:
        numbers = {str(i) for i in range(self.size)}
        return numbers | {"pos", "goal", "here", "blocked", "none", "wall", "."} | set(ACTIONS)

    def picture(self) -> dict:
        """The whole grid: gridnav hides nothing (icy inherits this)."""
        return {
            "rows": self.size,
            "cols": self.size,
            "walls": sorted([r, c] for r, c in self.grid.walls),
            "agent": list(self.pos),
            "goal": list(self.goal),
        }
