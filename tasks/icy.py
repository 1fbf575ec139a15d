"""icy: gridnav on ice, where each move slips with probability `slip`.

Instances are gridnav instances. When a move slips, the walker goes in a uniformly random other
direction instead (and may bump a wall and stay put), so the agent has to recover from being
pushed off course. Slips come from an RNG seeded at reset, so (seed, actions) replays exactly.
The oracle is exact for these stochastic dynamics: value iteration on the expected number of
turns to the goal; the optimal actions are the argmin set. With slip=0 this is gridnav's BFS.
A mistake is an intended move into a wall or the edge, whatever the slip then did.
"""

from __future__ import annotations

import random

from tasks.base import Outcome
from tasks.grid import ACTIONS, GRID_RULES, Cell, Grid
from tasks.gridnav import GridNav

_TIE = 1e-9  # actions whose expected turns are this close count as equally good
_CONVERGED = 1e-12
_MAX_SWEEPS = 100_000


def action_value(
    grid: Grid, values: dict[Cell, float], cell: Cell, action: str, slip: float
) -> float:
    """Expected turns to the goal after intending `action` in `cell`, then acting optimally."""
    others = [a for a in ACTIONS if a != action]
    slipped = sum(values[grid.move(cell, a)] for a in others) / len(others)
    return 1.0 + (1.0 - slip) * values[grid.move(cell, action)] + slip * slipped


def expected_turns(grid: Grid, goal: Cell, bfs: dict[Cell, int], slip: float) -> dict[Cell, float]:
    """Optimal expected turns to `goal` from every cell connected to it (Gauss-Seidel sweeps)."""
    cells = [cell for cell in bfs if cell != goal]
    index = {cell: i for i, cell in enumerate([goal, *cells])}
    successors = [[index[grid.move(cell, a)] for a in ACTIONS] for cell in cells]
    # Q(a) = 1 + (slip/3) * (sum of all successor values) + (1 - 4 slip/3) * V(successor of a),
    # so for slip <= 0.75 the best action is the one whose successor has the lowest value.
    spread, focus = slip / 3.0, 1.0 - 4.0 * slip / 3.0
    # BFS distances are a lower bound with T(bfs) >= bfs, so the sweeps rise monotonically to
    # the fixed point; with slip=0 they are already the fixed point.
    values = [0.0] + [float(bfs[cell]) for cell in cells]
    for _ in range(_MAX_SWEEPS):
        change = 0.0
        for i, succ in enumerate(successors, start=1):
            around = [values[j] for j in succ]
            best = 1.0 + spread * sum(around) + focus * min(around)
            change = max(change, best - values[i])
            values[i] = best
        if change < _CONVERGED:
            break
    return {cell: values[i] for cell, i in index.items()}


class Icy(GridNav):
    name = "icy"

    def __init__(
        self,
        size: int = 5,
        wall_prob: float = 0.2,
        min_length: int = 2,
        max_length: int = 8,
        slip: float = 0.2,
    ) -> None:
        super().__init__(size, wall_prob, min_length, max_length)
        # Above 0.75 a slip would be likelier than the intended move; keep the task sensible.
        if not 0.0 <= slip <= 0.75:
            raise ValueError(f"slip must be in [0, 0.75], got {slip}")
        self.slip = slip

    @property
    def compact_rules(self) -> str:
        return (
            "icy . move to the goal . moves may slip . walls block moves . "
            "reply with one word : up down left right ."
        )

    @property
    def natural_rules(self) -> str:
        return (
            f"You are walking on an icy {self.size} by {self.size} grid and must reach the goal. "
            f"{GRID_RULES} The ice is slippery: sometimes you slide in another direction than "
            "the one you chose. Walls block moves: walking into one wastes the turn. "
            + self.format_rule()
        )

    def _generate(self, rng: random.Random) -> None:
        super()._generate(rng)
        self._values = expected_turns(self.grid, self.goal, self._dist, self.slip)
        self._slips = random.Random(rng.getrandbits(64))

    def _apply(self, action: str) -> Outcome:
        mistake = self.grid.move(self.pos, action) == self.pos
        slipped = self._slips.random() < self.slip
        if slipped:
            action = self._slips.choice([a for a in ACTIONS if a != action])
        nxt = self.grid.move(self.pos, action)
        prefix = ("slipped . " if slipped else "") + ("wall . " if nxt == self.pos else "")
        said = ("You slipped on the ice. " if slipped else "") + (
            "You walked into a wall and did not move. " if nxt == self.pos else ""
        )
        self.pos = nxt
        return Outcome(
            prefix + self._observe(),
            mistake=mistake,
            extras={"slipped": slipped},
            natural=said + self._observe_natural(),
        )

    def _quiet_extras(self) -> dict:
        return {"slipped": False}

    def _oracle_actions(self) -> set[str]:
        scores = {a: action_value(self.grid, self._values, self.pos, a, self.slip) for a in ACTIONS}
        best = min(scores.values())
        return {a for a, score in scores.items() if score <= best + _TIE}

    def _oracle_distance(self) -> float:
        return self._values[self.pos]

    def _observation_words(self) -> set[str]:
        return super()._observation_words() | {"slipped"}
