"""Grid geometry shared by gridnav, icy and sokoban: directions, walls, moves and BFS.

Cells are (row, col) with row 0 at the top, so "up" decreases the row. A Grid knows its size
and wall cells; anything outside the grid also counts as a wall. BFS from the goal gives the
exact distance of every cell because grid moves are reversible (the graph is undirected).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from tasks.base import spoken_list

Cell = tuple[int, int]

ACTIONS: tuple[str, ...] = ("up", "down", "left", "right")
DELTAS: dict[str, Cell] = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}


def shift(cell: Cell, action: str) -> Cell:
    """The neighbouring cell in the direction of `action` (may be off the grid)."""
    dr, dc = DELTAS[action]
    return cell[0] + dr, cell[1] + dc


def cell_words(cell: Cell) -> str:
    return f"{cell[0]} {cell[1]}"


def offset_words(src: Cell, dst: Cell) -> str:
    """Where `dst` lies from `src` in action words, e.g. "up 1 left 2" ("here" if they coincide).

    Stating the goal *relative* to the agent is what lets a ~1M-parameter model learn the task in
    a minute: it can copy a direction word instead of learning to compare coordinates, which kept
    a prototype at the uniform-action plateau (DESIGN.md section 4).
    """
    (r, c), (gr, gc) = src, dst
    parts = []
    if gr != r:
        parts.append(f"{'up' if gr < r else 'down'} {abs(gr - r)}")
    if gc != c:
        parts.append(f"{'left' if gc < c else 'right'} {abs(gc - c)}")
    return " ".join(parts) or "here"


def cell_sentence(cell: Cell) -> str:
    """A cell for the natural text: "row 2, column 3"."""
    return f"row {cell[0]}, column {cell[1]}"


def offset_sentence(src: Cell, dst: Cell) -> str:
    """offset_words in a sentence: "2 steps up and 1 step left" ("right here" if they coincide)."""
    (r, c), (gr, gc) = src, dst
    parts = []
    for n, word in ((gr - r, "up" if gr < r else "down"), (gc - c, "left" if gc < c else "right")):
        if n:
            parts.append(f"{abs(n)} step{'s' if abs(n) > 1 else ''} {word}")
    return " and ".join(parts) or "right here"


def blocked_sentence(blocked: list[str]) -> str:
    """The blocked directions, as the natural text says them."""
    if not blocked:
        return "Nothing blocks you in any direction."
    return f"A wall blocks you going {spoken_list(blocked, last='and')}."


GRID_RULES = (
    "Rows are numbered from 0 at the top and columns from 0 at the left; up lowers the row "
    "number and left lowers the column number."
)


@dataclass(frozen=True)
class Grid:
    size: int
    walls: frozenset[Cell]

    def free(self, cell: Cell) -> bool:
        r, c = cell
        return 0 <= r < self.size and 0 <= c < self.size and cell not in self.walls

    def cells(self) -> list[Cell]:
        return [(r, c) for r in range(self.size) for c in range(self.size) if self.free((r, c))]

    def move(self, cell: Cell, action: str) -> Cell:
        """Where a walker ends up: the neighbour, or `cell` itself when a wall is in the way."""
        nxt = shift(cell, action)
        return nxt if self.free(nxt) else cell

    def blocked(self, cell: Cell) -> list[str]:
        return [a for a in ACTIONS if not self.free(shift(cell, a))]


def bfs_distances(grid: Grid, source: Cell) -> dict[Cell, int]:
    """Shortest move counts from `source` to every cell reachable from it."""
    dist = {source: 0}
    queue = deque([source])
    while queue:
        cell = queue.popleft()
        for action in ACTIONS:
            nxt = grid.move(cell, action)
            if nxt not in dist:
                dist[nxt] = dist[cell] + 1
                queue.append(nxt)
    return dist
