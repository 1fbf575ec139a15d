"""fog: gridnav in fog. The agent knows where the goal lies, but learns of a wall only by bumping.

Instances are gridnav's (an N x N grid, walls with probability wall_prob, a reachable goal). The
observation gives the position and the goal's offset, never the walls; a bump is reported once
("wall ."), and nothing repeats it later, so only the history remembers where the walls are.

Belief-state oracle. What the agent knows is the set of walls it has bumped into (and the grid's
edge, since the rules give the size and every observation the position); every other cell may be
free. "Optimal" means: on a shortest path to the goal in the most favourable world consistent with
that knowledge, i.e. BFS over every cell not known to be a wall (the free-space assumption of
robot navigation). The optimal set and the optimistic distance are exact (BFS on the known map);
they are recomputed after every bump. Why not the expected number of turns: that optimum is a
POMDP over 2^(N*N) wall layouts, and even 4 x 4 instances are out of reach in pure Python, while
the optimistic plan is exact, cheap, never repeats a known error, and is what the analyses need:
a reference that uses every earlier observation and nothing it has not seen.

Errors (info["error"]). A bump into a wall the agent has met before, or into the edge, is
"avoidable" (and the turn's `mistake`); a bump into a wall it could not know of is "unavoidable".
optimal_length is the most turns the oracle can take on this instance, over all its tie-breaks
(a depth-first search over the oracle's choices on the true map), so following the oracle always
solves within optimal_length turns; it is at least the full-information BFS length.
"""

from __future__ import annotations

import math
import random
from functools import cache, lru_cache

from tasks.base import Env, Outcome
from tasks.grid import (
    ACTIONS,
    GRID_RULES,
    Cell,
    Grid,
    bfs_distances,
    cell_sentence,
    cell_words,
    offset_sentence,
    offset_words,
    shift,
)
from tasks.gridnav import check_grid_options, sample_instance


def optimistic_distances(size: int, known: frozenset[Cell], goal: Cell) -> dict[Cell, int]:
    """BFS distances to `goal` over every cell not known to be a wall."""
    return bfs_distances(Grid(size, known), goal)


def oracle_moves(size: int, known: frozenset[Cell], goal: Cell, pos: Cell) -> set[str]:
    """The moves that lower the optimistic distance by one (the belief-state oracle)."""
    return set(_oracle_moves(size, known, goal, pos))  # a copy: the cached set stays as it is


# Bounded like _distances. A step asks the oracle twice (the optimal flag, and the caller's own
# question before it), and the study's simulations replay the same states thousands of times.
@lru_cache(maxsize=16384)  # a few MB
def _oracle_moves(size: int, known: frozenset[Cell], goal: Cell, pos: Cell) -> frozenset[str]:
    dist = _distances(size, known, goal)
    here = dist[pos]
    optimistic = Grid(size, known)
    return frozenset(
        a for a in ACTIONS if optimistic.free(nxt := shift(pos, a)) and dist[nxt] == here - 1
    )


@lru_cache(maxsize=4096)  # bounded: demos visit many instances
def _distances(size: int, known: frozenset[Cell], goal: Cell) -> dict[Cell, int]:
    return optimistic_distances(size, known, goal)


def worst_oracle_turns(grid: Grid, goal: Cell, start: Cell) -> int:
    """The most turns the oracle needs on the true `grid`, over all of its tie-breaks."""

    @cache
    def worst(pos: Cell, known: frozenset[Cell]) -> int:
        if pos == goal:
            return 0
        longest = 0
        for action in oracle_moves(grid.size, known, goal, pos):
            nxt = shift(pos, action)
            if grid.free(nxt):
                longest = max(longest, 1 + worst(nxt, known))
            else:  # an unknown wall: the bump teaches it, and the oracle replans
                longest = max(longest, 1 + worst(pos, known | {nxt}))
        return longest

    return worst(start, frozenset())


class Fog(Env):
    name = "fog"
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
            "fog . move to the goal . walls are hidden until you bump . "
            "reply with one word : up down left right ."
        )

    @property
    def natural_rules(self) -> str:
        return (
            f"You are walking on a {self.size} by {self.size} grid in thick fog and must reach "
            f"the goal. {GRID_RULES} You cannot see the walls: you learn of a wall only by "
            "walking into it, which wastes the turn, and no one reminds you of it later. "
            + self.format_rule()
        )

    def _generate(self, rng: random.Random) -> None:
        self.grid, self.start, self.goal, _ = sample_instance(
            rng, self.size, self.wall_prob, self.min_length, self.max_length
        )
        self.pos = self.start
        self.known: frozenset[Cell] = frozenset()  # walls the agent has bumped into
        self.visited: set[Cell] = {self.start}
        self.optimal_length = worst_oracle_turns(self.grid, self.goal, self.start)

    def _observe(self) -> str:
        return f"pos {cell_words(self.pos)} goal {offset_words(self.pos, self.goal)}"

    def _observe_natural(self) -> str:
        return (
            f"You are at {cell_sentence(self.pos)}. "
            f"The goal is {offset_sentence(self.pos, self.goal)}."
        )

    def _apply(self, action: str) -> Outcome:
        nxt = shift(self.pos, action)
        inside = 0 <= nxt[0] < self.size and 0 <= nxt[1] < self.size
        if self.grid.free(nxt):
            self.pos = nxt
            self.visited.add(nxt)
            return Outcome(
                self._observe(), False, extras={"error": None}, natural=self._observe_natural()
            )
        error = "unavoidable" if inside and nxt not in self.known else "avoidable"
        if inside:
            self.known = self.known | {nxt}
        said = "You walked into a wall and did not move. " + self._observe_natural()
        return Outcome(
            "wall . " + self._observe(),
            error == "avoidable",
            extras={"error": error},
            natural=said,
        )

    def _solved(self) -> bool:
        return self.pos == self.goal

    def _quiet_extras(self) -> dict:
        return {"error": None}

    def _oracle_actions(self) -> set[str]:
        return oracle_moves(self.size, self.known, self.goal, self.pos)

    def _oracle_distance(self) -> float:
        return float(_distances(self.size, self.known, self.goal).get(self.pos, math.inf))

    def _observation_words(self) -> set[str]:
        numbers = {str(i) for i in range(self.size)}
        return numbers | {"pos", "goal", "here", "wall", "."} | set(ACTIONS)

    def picture(self) -> dict:
        """Met walls solid, the rest faint, and the cells the agent has not stood on shaded."""
        every = {(r, c) for r in range(self.size) for c in range(self.size)}
        return {
            "rows": self.size,
            "cols": self.size,
            "walls": sorted([r, c] for r, c in self.known),
            "hidden_walls": sorted([r, c] for r, c in self.grid.walls - self.known),
            "fog": sorted([r, c] for r, c in every - self.visited - self.grid.walls),
            "agent": list(self.pos),
            "goal": list(self.goal),
        }
