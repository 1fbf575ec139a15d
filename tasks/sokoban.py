"""sokoban: push one box onto a target in a tiny walled room.

An instance is a 5x5 or 6x6 room with walls on the border and a few interior walls, one box,
one target and the player. Walking into the box pushes it if the cell behind it is free. The
state is (player, box) -- at most a few hundred states -- so the oracle enumerates all of them
and runs BFS backwards from every solved state, giving the exact distance (each player move is
one step) of every state. A state with no path to a solved one is a deadlock: entering it is a
mistake and ends the episode. Moves that change nothing (a wall or an unpushable box) are also
mistakes. Instances are resampled until solvable with optimal length in [min_length, max_length].
"""

from __future__ import annotations

import math
import random
from collections import deque

from tasks.base import Env, Outcome
from tasks.grid import (
    ACTIONS,
    GRID_RULES,
    Cell,
    Grid,
    blocked_sentence,
    cell_sentence,
    cell_words,
    offset_sentence,
    offset_words,
    shift,
)

State = tuple[Cell, Cell]  # (player, box)

_MAX_ATTEMPTS = 10_000


def push_move(grid: Grid, state: State, action: str) -> State:
    """The state after one move; unchanged when a wall or an unpushable box is in the way."""
    player, box = state
    nxt = shift(player, action)
    if not grid.free(nxt):
        return state
    if nxt != box:
        return nxt, box
    beyond = shift(box, action)
    return (nxt, beyond) if grid.free(beyond) else state


def distances_to_target(grid: Grid, target: Cell) -> dict[State, int]:
    """Exact steps-to-solve of every solvable state; states missing from the map are deadlocks."""
    free = grid.cells()
    predecessors: dict[State, list[State]] = {}
    for player in free:
        for box in free:
            if player == box:
                continue
            for action in ACTIONS:
                nxt = push_move(grid, (player, box), action)
                if nxt != (player, box):
                    predecessors.setdefault(nxt, []).append((player, box))
    dist = {(p, target): 0 for p in free if p != target}
    queue = deque(dist)
    while queue:
        state = queue.popleft()
        for prev in predecessors.get(state, []):
            # A solved state is terminal, so nothing is reached by moving out of one.
            if prev not in dist and prev[1] != target:
                dist[prev] = dist[state] + 1
                queue.append(prev)
    return dist


class Sokoban(Env):
    name = "sokoban"
    action_words = ACTIONS

    def __init__(self, size: int = 6, min_length: int = 3, max_length: int = 10) -> None:
        super().__init__()
        if size not in (5, 6):
            raise ValueError(f"size must be 5 or 6, got {size}")
        if not 1 <= min_length <= max_length:
            raise ValueError(f"need 1 <= min_length <= max_length, got {min_length}, {max_length}")
        self.size, self.min_length, self.max_length = size, min_length, max_length

    @property
    def compact_rules(self) -> str:
        return (
            "sokoban . push the box onto the target . walls block moves . "
            "reply with one word : up down left right ."
        )

    @property
    def natural_rules(self) -> str:
        return (
            f"You are in a {self.size} by {self.size} room with a box and a target cell. Push the "
            "box onto the target: walking into the box pushes it one cell, unless a wall is "
            f"behind it. You cannot pull the box. {GRID_RULES} Walking into a wall wastes the "
            "turn, and pushing the box where it can never reach the target ends the game. "
            + self.format_rule()
        )

    def _generate(self, rng: random.Random) -> None:
        n = self.size
        border = {(r, c) for r in range(n) for c in range(n) if r in (0, n - 1) or c in (0, n - 1)}
        inside = [(r, c) for r in range(1, n - 1) for c in range(1, n - 1)]
        for _ in range(_MAX_ATTEMPTS):
            # 0-2 interior walls in 6x6, 0-1 in 5x5: enough to vary rooms, few enough to solve.
            walls = rng.sample(inside, rng.randint(0, n - 4))
            grid = Grid(n, frozenset(border | set(walls)))
            player, box, target = rng.sample(grid.cells(), 3)
            dist = distances_to_target(grid, target)
            if self.min_length <= dist.get((player, box), -1) <= self.max_length:
                break
        else:
            raise ValueError(
                f"no sokoban instance with optimal length in [{self.min_length}, "
                f"{self.max_length}] found; widen the length range"
            )
        self.grid, self.target, self._dist = grid, target, dist
        self.state: State = (player, box)
        self.optimal_length = dist[self.state]

    def _observe(self) -> str:
        player, box = self.state
        blocked = [a for a in ACTIONS if push_move(self.grid, self.state, a) == self.state]
        return (
            f"pos {cell_words(player)} box {offset_words(player, box)} "
            f"target {offset_words(box, self.target)} "
            f"blocked {' '.join(blocked) or 'none'}"
        )

    def _observe_natural(self) -> str:
        player, box = self.state
        blocked = [a for a in ACTIONS if push_move(self.grid, self.state, a) == self.state]
        return (
            f"You are at {cell_sentence(player)}. The box is {offset_sentence(player, box)} "
            f"of you. The target is {offset_sentence(box, self.target)} of the box. "
            + blocked_sentence(blocked)
        )

    def _apply(self, action: str) -> Outcome:
        nxt = push_move(self.grid, self.state, action)
        if nxt == self.state:
            bump = "You walked into a wall and did not move. " + self._observe_natural()
            return Outcome(
                "wall . " + self._observe(), True, extras={"deadlock": False}, natural=bump
            )
        self.state = nxt
        if nxt not in self._dist:
            stuck = "deadlock . " + self._observe()
            said = (
                "The box is stuck where it can never reach the target. " + self._observe_natural()
            )
            return Outcome(stuck, True, failed=True, extras={"deadlock": True}, natural=said)
        return Outcome(
            self._observe(), False, extras={"deadlock": False}, natural=self._observe_natural()
        )

    def _solved(self) -> bool:
        return self.state[1] == self.target

    def _quiet_extras(self) -> dict:
        return {"deadlock": False}

    def _oracle_actions(self) -> set[str]:
        here = self._dist.get(self.state)
        if here is None:
            return set()
        return {
            a for a in ACTIONS if self._dist.get(push_move(self.grid, self.state, a)) == here - 1
        }

    def _oracle_distance(self) -> float:
        return float(self._dist.get(self.state, math.inf))

    def picture(self) -> dict:
        player, box = self.state
        return {
            "rows": self.size,
            "cols": self.size,
            "walls": sorted([r, c] for r, c in self.grid.walls),
            "agent": list(player),
            "box": list(box),
            "target": list(self.target),
        }

    def _observation_words(self) -> set[str]:
        numbers = {str(i) for i in range(0, self.size - 1)}  # coordinates and offsets
        words = {"pos", "box", "target", "here", "blocked", "none", "wall", "deadlock", "."}
        return numbers | words | set(ACTIONS)
