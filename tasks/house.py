"""house: a small text world in ALFWorld's image. Find the key, take it, unlock the front door.

Three rooms (hall, kitchen, bedroom), the agent starting in the hall by the locked door, and
`drawers` numbered drawers, each in a room drawn uniformly by the seed; the key lies in one drawer,
also uniform. Commands are short phrases: "go kitchen", "open drawer 2", "take key",
"unlock door". Entering a room lists its drawers; opening one says whether the key is inside; a
command that cannot work says "nothing happens", as ALFWorld does. Nothing is repeated later, so
which drawers are where, and which were found empty, lives only in the history.

Belief-state oracle. A hypothesis is (layout, key drawer); the prior is uniform over the 3^d
layouts times the d drawers, and the belief is the set of hypotheses consistent with every
observation so far (each entry into a room and each opening cuts it). "Optimal" means the fewest
expected turns to unlock the door under that belief, found exactly by expectimax over beliefs:

    V(room, H) = min over useful a of 1 + sum over outcomes o of P(o | H, a) V(next(room, H, a, o))

with P(o | H, a) the share of H giving o. Only "useful" commands enter the minimum (go to another
room, open an unopened drawer here, then take key / go hall / unlock door once the key is seen):
any other command fails or repeats a known answer, so it costs a turn and teaches nothing, and
cannot be optimal. The prior is the same for every instance, so the values are memoised across
instances (a few thousand beliefs for 4 drawers). The oracle is exact because the belief is
exactly the hypothesis set and the recursion enumerates it.

Errors (info["error"]). Opening an unopened drawer that proves empty is "unavoidable"; every
other failure (a known-empty drawer again, a drawer that is not in this room, going where you
are, taking a key you cannot see, unlocking without the key or away from the door) is
"avoidable" given the history, and is the turn's `mistake`. optimal_length is the most turns the
oracle can take on this instance over its tie-breaks, so following it always solves in time.
"""

from __future__ import annotations

import itertools
import random
from functools import lru_cache

from tasks.base import Env, Outcome, spoken_list

ROOMS: tuple[str, ...] = ("hall", "kitchen", "bedroom")
HALL = "hall"
_TIE = 1e-9

Hypothesis = tuple[tuple[str, ...], int]  # (room of each drawer, index of the key's drawer)
Belief = frozenset[Hypothesis]


def prior(drawers: int) -> Belief:
    """Every (layout, key) the seed can draw: all equally likely."""
    layouts = itertools.product(ROOMS, repeat=drawers)
    return frozenset((layout, key) for layout in layouts for key in range(drawers))


def room_of(belief: Belief, drawer: int) -> str | None:
    """Where `drawer` is, if every hypothesis agrees; None while it is unknown."""
    rooms = {layout[drawer] for layout, _ in belief}
    return rooms.pop() if len(rooms) == 1 else None


def contents(layout: tuple[str, ...], room: str) -> tuple[int, ...]:
    return tuple(d for d, r in enumerate(layout) if r == room)


def unopened(belief: Belief) -> set[int]:
    """Drawers that may still hold the key (a drawer found empty holds it under no hypothesis)."""
    return {key for _, key in belief}


def finish(room: str) -> int:
    """Turns from seeing the key in `room`: take it, walk to the hall if elsewhere, unlock."""
    return 2 + (room != HALL)


# The search is over *moves that learn something*: open an unopened drawer whose room is known
# (walking there first if need be), or enter a room whose drawers are not yet known. Any other
# command teaches nothing, so an optimal plan is a sequence of these, and each one shrinks the
# belief, which keeps the recursion acyclic.
Move = tuple[str, int | str]  # ("open", drawer) or ("enter", room)


def moves(belief: Belief) -> list[Move]:
    out: list[Move] = [("open", d) for d in sorted(unopened(belief)) if room_of(belief, d)]
    for room in ROOMS:
        if len({contents(layout, room) for layout, _ in belief}) > 1:
            out.append(("enter", room))
    return out


def move_outcomes(
    belief: Belief, room: str, move: Move
) -> tuple[int, list[tuple[float, str, Belief | None]]]:
    """(turns, [(probability, room after, belief after)]); belief None = the key is seen."""
    kind, what = move
    total = len(belief)
    if kind == "enter":
        parts: dict[tuple[int, ...], set[Hypothesis]] = {}
        for h in belief:
            parts.setdefault(contents(h[0], str(what)), set()).add(h)
        return 1, [(len(p) / total, str(what), frozenset(p)) for p in parts.values()]
    where = room_of(belief, int(what))
    assert where is not None
    found = sum(1 for h in belief if h[1] == what)
    empty = frozenset(h for h in belief if h[1] != what)
    out = [(found / total, where, None)] if found else []
    out += [(len(empty) / total, where, empty)] if empty else []
    return 1 + (where != room), out


def first_action(belief: Belief, room: str, move: Move) -> str:
    """The command that starts `move` from `room`."""
    kind, what = move
    if kind == "enter":
        return f"go {what}"
    where = room_of(belief, int(what))
    return f"open drawer {int(what) + 1}" if where == room else f"go {where}"


@lru_cache(maxsize=200_000)
def value(room: str, belief: Belief) -> float:
    """Expected turns to unlock the door while the key is unseen, under optimal play."""
    return min(q_values(room, belief).values())


def q_values(room: str, belief: Belief) -> dict[Move, float]:
    q = {}
    for move in moves(belief):
        turns, branches = move_outcomes(belief, room, move)
        q[move] = turns + sum(p * (finish(r) if b is None else value(r, b)) for p, r, b in branches)
    return q


@lru_cache(maxsize=200_000)
def best_moves(room: str, belief: Belief) -> frozenset[Move]:
    q = q_values(room, belief)
    best = min(q.values())
    return frozenset(m for m, v in q.items() if v <= best + _TIE)


class House(Env):
    name = "house"

    def __init__(self, drawers: int = 4) -> None:
        super().__init__()
        # 3^drawers layouts x drawers keys; 5 keeps the expectimax within a fraction of a second.
        if not 2 <= drawers <= 5:
            raise ValueError(f"drawers must be in 2..5, got {drawers}")
        self.drawers = drawers
        self.action_words = (
            *(f"go {r}" for r in ROOMS),
            *(f"open drawer {d}" for d in range(1, drawers + 1)),
            "take key",
            "unlock door",
        )

    @property
    def compact_rules(self) -> str:
        return (
            "house . go and open drawers to find the key . take key . unlock door in hall . "
            "rooms hall kitchen bedroom ."
        )

    @property
    def natural_rules(self) -> str:
        return (
            "You are in a small house with three rooms: the hall, the kitchen and the bedroom. "
            f"The front door, in the hall, is locked. Its key is in one of {self.drawers} "
            "numbered drawers somewhere in the house. Find the key, take it, and unlock the door. "
            "When you enter a room you see its drawers; nobody repeats what you saw later. "
            "The commands are: go <room>, open drawer <number>, take key, unlock door. "
            + self.format_rule()
        )

    @property
    def answer_hint(self) -> str:
        return (
            "one command, such as go kitchen, open drawer 2, take key or unlock door "
            f"(drawers are numbered 1 to {self.drawers})"
        )

    # ---- the instance -------------------------------------------------------------------
    def _generate(self, rng: random.Random) -> None:
        self.layout: tuple[str, ...] = tuple(rng.choice(ROOMS) for _ in range(self.drawers))
        self.key = rng.randrange(self.drawers)
        self.room = HALL
        self.belief: Belief = self._cut(prior(self.drawers), HALL)  # the hall is seen at once
        self.opened: set[int] = set()
        self.holding = False
        self.unlocked = False
        self._last = self._room_words(HALL)
        self._last_natural = self._room_sentence(HALL)
        self.optimal_length = self._worst_oracle_turns()

    def _cut(self, belief: Belief, room: str) -> Belief:
        """The belief after seeing which drawers are in `room`."""
        seen = contents(self.layout, room)
        return frozenset(h for h in belief if contents(h[0], room) == seen)

    def _room_words(self, room: str) -> str:
        drawers = " ".join(f"drawer {d + 1}" for d, r in enumerate(self.layout) if r == room)
        return f"{room} . " + (drawers or "no drawers") + (" . door" if room == HALL else "")

    def _room_sentence(self, room: str) -> str:
        names = [f"drawer {d + 1}" for d, r in enumerate(self.layout) if r == room]
        sees = f"You see {spoken_list(names, 'and')}." if names else "You see no drawers."
        door = " The front door is here." if room == HALL else ""
        return f"You are in the {room}. {sees}{door}"

    # ---- observations -------------------------------------------------------------------
    def _observe(self) -> str:
        return self._last

    def _observe_natural(self) -> str:
        return self._last_natural

    def _say(self, compact: str, natural: str, error: str | None) -> Outcome:
        self._last, self._last_natural = compact, natural
        return Outcome(compact, error == "avoidable", extras={"error": error}, natural=natural)

    def _apply(self, action: str) -> Outcome:
        verb, _, rest = action.partition(" ")
        nothing = ("nothing happens", "Nothing happens.", "avoidable")
        if verb == "go":
            if rest == self.room:
                return self._say(*nothing)
            self.room = rest
            self.belief = self._cut(self.belief, rest)
            return self._say(self._room_words(rest), self._room_sentence(rest), None)
        if verb == "open":
            d = int(rest.split()[-1]) - 1
            if self.layout[d] != self.room:
                return self._say(*nothing)
            name = f"drawer {d + 1}"
            error = "avoidable" if d in self.opened else None
            self.opened.add(d)
            if d == self.key and not self.holding:
                self.belief = frozenset(h for h in self.belief if h[1] == d)
                return self._say(f"{name} has key", f"You open {name}. The key is inside.", error)
            self.belief = frozenset(h for h in self.belief if h[1] != d) or self.belief
            error = error or ("unavoidable" if not self.holding else "avoidable")
            return self._say(f"{name} empty", f"You open {name}. It is empty.", error)
        if verb == "take":
            if self.holding or self.key not in self.opened or self.layout[self.key] != self.room:
                return self._say(*nothing)
            self.holding = True
            return self._say("you have key", "You take the key.", None)
        if self.room != HALL or not self.holding:  # unlock door
            return self._say(*nothing)
        self.unlocked = True
        return self._say("door open", "You unlock the door. It opens.", None)

    def _solved(self) -> bool:
        return self.unlocked

    def _quiet_extras(self) -> dict:
        return {"error": None}

    # ---- the oracle ---------------------------------------------------------------------
    def _oracle_actions(self) -> set[str]:
        if self.unlocked:
            return set()
        if self.holding:
            return {"unlock door"} if self.room == HALL else {"go hall"}
        if self.key in self.opened:  # the key is seen: fetch it
            where = self.layout[self.key]
            return {"take key"} if self.room == where else {f"go {where}"}
        return {first_action(self.belief, self.room, m) for m in best_moves(self.room, self.belief)}

    def _oracle_distance(self) -> float:
        if self.unlocked:
            return 0.0
        if self.holding:
            return 1.0 + (self.room != HALL)
        if self.key in self.opened:
            return float(finish(self.layout[self.key]) + (self.room != self.layout[self.key]))
        return value(self.room, self.belief)

    def _worst_oracle_turns(self) -> int:
        """The most turns the oracle takes on this instance, over its tie-breaks (a small DFS)."""

        def worst(room: str, belief: Belief) -> int:
            longest = 0
            for move in best_moves(room, belief):
                turns, _ = move_outcomes(belief, room, move)
                kind, what = move
                if kind == "enter":
                    nroom = str(what)
                    rest = worst(nroom, self._cut(belief, nroom))
                elif what == self.key:
                    rest = finish(room_of(belief, self.key) or HALL)
                else:
                    nroom = room_of(belief, int(what)) or room
                    rest = worst(nroom, frozenset(h for h in belief if h[1] != what))
                longest = max(longest, turns + rest)
            return longest

        return worst(self.room, self.belief)

    def _observation_words(self) -> set[str]:
        numbers = {str(d) for d in range(1, self.drawers + 1)}
        words = {"drawer", "door", "no", "drawers", "has", "key", "empty", "you", "have"}
        return numbers | words | {"nothing", "happens", "open", "."} | set(ROOMS)
