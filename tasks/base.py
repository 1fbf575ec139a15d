"""The shared environment contract: the Step record, action parsing and the Env base class.

Every task is a small text game played one action per turn. The base class owns the
bookkeeping that must behave identically in every task: parsing the model's reply, treating
unparseable replies as invalid turns that leave the state alone, refusing to step a finished
episode, the reward (1.0 on the solving step, else 0.0) and the fixed set of info keys. A task
only builds an instance from a seeded RNG, describes its state in words, applies one parsed
action, and answers the oracle questions: distance() and optimal_actions().

Two readers, two texts (`Env.text`, chosen by `tasks.make(name, text=...)`):

- **compact** (the embedded `tiny` model's): terse word lists such as
  `pos 2 2 goal down 1 right 2 blocked down`, and a reply must be exactly one action word
  (`parse_action`). A ~1M-parameter word-level model learns this in a minute.
- **natural** (a pretrained chat model's): the same facts in plain sentences, rules that state the
  answer format, and a tolerant parser (`parse_reply`) that accepts a reply naming exactly one
  action, on an `Action:` line or anywhere in a short answer. A reply naming none, or two
  different ones, is invalid: it costs the turn and is never guessed at.

The state, the oracle and the reward are the same under both texts; only the words differ.
"""

from __future__ import annotations

import numbers
import random
import re
import string
from dataclasses import dataclass, field

TEXTS: tuple[str, ...] = ("compact", "natural")

# Only punctuation a model tends to wrap a word in; "-" and "+" stay so "-1" is not read as "1".
_WRAPPING = ".,!?;:'\"`*()[]{}<>" + string.whitespace


def parse_action(text: str, action_words: tuple[str, ...]) -> str | None:
    """The action word that `text` names, or None when it names none (never raises)."""
    if not isinstance(text, str):
        return None
    word = text.strip().lower().strip(_WRAPPING)
    return word if word in action_words else None


# The format the natural rules ask for: "Action: X" (the rest of its line) or <action>X</action>.
# A tag's body may not hold another opening tag, so every unclosed "<action>" is scanned only up
# to the next one: with a plain `(.*?)</action>`, each scanned to the end of the reply, which is
# quadratic in its length (160 kB of unclosed tags took 14 s).
_MARKED = re.compile(
    r"<action>((?:(?!<action>).)*?)</action>|\baction\s*[:=-]\s*([^\n]*)", re.DOTALL
)
# A word is what lies between spaces, with the punctuation a model wraps it in taken off its
# ends. Joined words stay one word that names no action: "5,000", "8:30", "2.5", "10-20" and
# "kitchen/bedroom" are not 5, 8, 2, 10 or kitchen. A leading "-" stays, so "-1" is not "1".
_TOKEN_ENDS = _WRAPPING + "#\u201c\u201d\u2018\u2019\u2026"
# Words that negate the action after them ("not left", "don't go up", "never open drawer 2").
_NEGATIONS = {"not", "no", "never", "nor", "neither", "avoid", "without", "except", "cannot"}
_NEGATIONS |= {"dont", "doesnt", "didnt", "cant", "wont", "wouldnt", "shouldnt", "isnt", "mustnt"}
NEGATION_REACH = 3  # a negation this many words before an action or nearer negates it
# Words that join an action to another, shortened, one: "open drawer 2 and 3", "10 or 12".
_JOINERS = {
    "and",
    "or",
    "and/or",
    "nor",
    "then",
    "to",
    "plus",
    "&",
    "+",
    "/",
    "-",
    "\u2013",
    "\u2014",
}


def _words(text: str) -> list[str]:
    words = (w.strip(_TOKEN_ENDS) for w in text.lower().replace("\u2019", "'").split())
    return [w for w in words if w]


def _find(words: list[str], phrase: list[str], at: dict[str, list[int]] | None = None) -> list[int]:
    """Where `phrase` starts in `words`; `at` (word -> its places) makes a long reply linear."""
    n = len(phrase)
    starts = at.get(phrase[0], []) if at is not None else range(len(words) - n + 1)
    return [i for i in starts if words[i : i + n] == phrase]


def _negated(words: list[str], start: int) -> bool:
    before = words[max(0, start - NEGATION_REACH) : start]
    return any(w in _NEGATIONS or w.endswith("n't") for w in before)


def _shortened(word: str, phrase: list[str], phrases: set[tuple[str, ...]]) -> bool:
    """Whether `word`, joined to `phrase`, names another action in short: a number after a
    number ("10 to 20"), or the last word of an action that shares the rest of phrase ("3" after
    "open drawer 2": open drawer 3)."""
    if word == phrase[-1]:  # the same action again ("3, 3") is still one action
        return False
    if word.isdigit() and phrase[-1].isdigit():
        return True
    return len(phrase) > 1 and (*phrase[:-1], word) in phrases


def _compound(words: list[str], start: int, phrase: list[str], phrases: set) -> bool:
    """Whether the action at `start` is one of several joined: "open drawer 2 and 3", "go kitchen
    or bedroom", "kitchen or go bedroom", "open drawer 2, 3", "10 to 20"."""
    end = start + len(phrase)
    after, before = words[end : end + 2], words[max(0, start - 2) : start]
    if len(after) == 2 and after[0] in _JOINERS and _shortened(after[1], phrase, phrases):
        return True
    if len(before) == 2 and before[1] in _JOINERS and _shortened(before[0], phrase, phrases):
        return True
    return bool(after) and _shortened(after[0], phrase, phrases)


def parse_reply(text: str, action_words: tuple[str, ...]) -> str | None:
    """The one action a chat model's reply names, or None (never raises).

    Where the reply has `Action:` lines or `<action>` tags, only those are read (a model may think
    aloud before them); otherwise the whole reply is. The reply is valid when exactly one action
    is named there (an action may be several words, "open drawer 2"; one named inside another,
    "drawer 2" inside "open drawer 2", counts once). No action, or two different ones ("up, no,
    left"), is invalid: guessing which one the model meant would reward replies the rules forbid.
    So is an action that is negated ("not left", "don't open drawer 2") or one of a range or a
    list written short ("open drawer 2 and 3", "go kitchen/bedroom", "10-20", "8:30"): those do
    not name one action either.
    """
    if not isinstance(text, str):
        return None
    marked = [a or b for a, b in _MARKED.findall(text.lower())]
    regions = [_words(region) for region in marked] if marked else [_words(text)]
    phrases = {action: _words(action) for action in action_words}
    shapes = {tuple(p) for p in phrases.values()}
    named = set()
    for words in regions:
        at: dict[str, list[int]] = {}
        for i, word in enumerate(words):
            at.setdefault(word, []).append(i)
        for action, phrase in phrases.items():
            for start in _find(words, phrase, at) if phrase else []:
                if _negated(words, start) or _compound(words, start, phrase, shapes):
                    return None
                named.add(action)
    # Drop an action that is only part of a longer named one ("drawer 2" in "open drawer 2").
    named = {a for a in named if not any(b != a and _find(phrases[b], phrases[a]) for b in named)}
    return named.pop() if len(named) == 1 else None


def spoken_list(words: tuple[str, ...] | list[str], last: str = "or") -> str:
    """'up, down, left or right': a list the way a sentence says it."""
    words = list(words)
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} {last} {words[-1]}"


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

    observation: str  # the compact text
    mistake: bool
    failed: bool = False  # an irreversible failure (a sokoban deadlock) ends the episode
    extras: dict = field(default_factory=dict)
    natural: str = ""  # the same observation in sentences, for a pretrained chat model


class Env:
    """Base class: subclasses set name/action_words and implement the hooks below."""

    name: str = "env"
    action_words: tuple[str, ...] = ()

    def __init__(self) -> None:
        self.optimal_length: int = 0
        self.text: str = "compact"  # which reader the words are for: see TEXTS and the docstring
        self._ready = False
        self._done = False

    # ---- hooks for subclasses -------------------------------------------------------------
    @property
    def compact_rules(self) -> str:
        """The system prompt in the compact text."""
        raise NotImplementedError

    @property
    def natural_rules(self) -> str:
        """The system prompt in sentences, ending with the answer format (see format_rule)."""
        raise NotImplementedError

    def _observe_natural(self) -> str:
        """The current state in sentences: every fact _observe() states, and no more."""
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

        The episode viewer (minirl.rundir.viewer) replays an episode through a fresh env and draws
        this after every turn; the model never sees it (it reads the observation). An optional hook:
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
    @property
    def natural(self) -> bool:
        return self.text == "natural"

    @property
    def system_prompt(self) -> str:
        return self.natural_rules if self.natural else self.compact_rules

    @property
    def answer_hint(self) -> str:
        """What a valid reply names, for the natural text ("one of: up, down, left or right")."""
        return f"one of: {spoken_list(self.action_words)}"

    @property
    def reply_prefix(self) -> str:
        """Written for the model at the start of each reply; it writes the rest (chat.prompt_ids).

        The natural text starts every reply with "Action:", so a chat model's next words are the
        action rather than the preamble a 135M model otherwise writes ("To solve this problem,
        you need to ..."): on gridnav's held-out seeds that took smollm2's invalid replies from
        84% of turns to the figure in tutorials/measured.md. The compact text starts none.
        """
        return "Action:" if self.natural else ""

    def format_rule(self) -> str:
        """The natural rules' last sentence: the answer format that parse_reply reads.

        Measured with smollm2 on gridnav's held-out seeds (T=4, 40 episodes, 4 reply tokens):
        without the one-word example, most replies listed the options ("Action: up, down"), which
        names two actions and is invalid; with it, most replies name one.
        """
        example = self.action_words[len(self.action_words) // 2]
        only = "nothing else" if any(" " in a for a in self.action_words) else "one word only"
        return f"Each turn, reply with {self.answer_hint}, {only}, for example: Action: {example}"

    def reminder(self) -> str:
        """The natural observations' last sentence: the format again, where the model reads last.

        Measured with smollm2 on gridnav's held-out seeds: with the format stated only in the
        system prompt, the share of invalid replies grew with the turns (0.50 at T=4, 0.57 at
        T=12) as the rules fell further behind in the conversation; tutorials/measured.md has the
        figures with this sentence.
        """
        only = "nothing else" if any(" " in a for a in self.action_words) else "one word only"
        return f"Reply with a single action, {only}."

    def observe(self) -> str:
        """The current state, in this env's text."""
        if self.natural:
            return f"{self._observe_natural()} {self.reminder()}"
        return self._observe()

    def reset(self, seed: int) -> str:
        # A seed is an integer: a string would be accepted by random.Random below and give some
        # instance, so a seed read back from a file ("7<script>") must fail here, not replay.
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
            raise TypeError(f"{self.name}: a seed is an integer, got {seed!r}")
        # The string is hashed with sha512 by random.Random, so instances do not depend on
        # PYTHONHASHSEED and the same seed gives the same instance on every machine.
        self._generate(random.Random(f"{self.name}:{int(seed)}"))
        self._ready, self._done = True, False
        return self.observe()

    def parse(self, action_text: str) -> str | None:
        """The action a reply names under this env's text, or None for an invalid reply."""
        if self.natural:
            return parse_reply(action_text, self.action_words)
        return parse_action(action_text, self.action_words)

    def step(self, action_text: str) -> Step:
        self._require_ready()
        if self._done:
            raise RuntimeError("episode is done; call reset()")
        action = self.parse(action_text)
        if action is None:
            info = self._info(None, False, False, False, False, self._quiet_extras())
            if self.natural:
                said = (
                    "Your reply did not name exactly one action, so this turn was lost. "
                    f"Reply with {self.answer_hint}. "
                )
                return Step(said + self.observe(), 0.0, False, info)
            return Step("invalid action . " + self._observe(), 0.0, False, info)
        # The optimal flag must judge the state the action was chosen in, so ask before moving.
        optimal = action in self._oracle_actions()
        outcome = self._apply(action)
        success = self._solved()
        self._done = success or outcome.failed
        info = self._info(action, True, outcome.mistake, optimal, success, outcome.extras)
        if self.natural and not outcome.natural:  # a task must say every outcome both ways
            raise NotImplementedError(f"{self.name}: this outcome has no natural text")
        text = outcome.natural if self.natural else outcome.observation
        if self.natural and not self._done:
            text = f"{text} {self.reminder()}"
        return Step(text, 1.0 if success else 0.0, self._done, info)

    def optimal_actions(self) -> set[str]:
        """The actions that lie on some optimal solution from the current state."""
        self._require_ready()
        return set() if self._done else self._oracle_actions()

    def distance(self) -> float:
        """Oracle distance to the goal: 0 at the goal, math.inf when the goal is unreachable."""
        self._require_ready()
        return self._oracle_distance()

    def vocabulary(self) -> set[str]:
        """Every word the compact rules and observations can produce (for a word tokenizer)."""
        prompt = set(self.compact_rules.split())
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
