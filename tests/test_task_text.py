"""The two texts of every task (tasks/base.py): the tolerant reply parser, and a natural rendering
that states every fact the compact one does.

The parser is checked on a table of replies that smollm2 (SmolLM2-135M-Instruct) really wrote on
these tasks, and fuzzed; the renderings are checked field by field along random episodes, played in
lockstep by a compact and a natural copy of the same instance.
"""

from __future__ import annotations

import random
import re
import string
import time

import pytest

import tasks
from minirl.chat import budget_text, resolve_task_text
from minirl.rewards import FORMAT_PENALTY, invalid_penalty_for
from tasks.base import parse_reply

MOVES = ("up", "down", "left", "right")
NUMBERS = tuple(str(i) for i in range(1, 16))
COMMANDS = ("go kitchen", "open drawer 1", "open drawer 2", "open drawer 12", "take key")

# (reply, actions, expected): the first rows are replies smollm2 wrote before any training.
REAL_REPLIES = [
    ("moving right 1 right down 2 on board. compass", MOVES, None),  # two different moves
    ("(up, right )up down left right", MOVES, None),
    ("behind the 2? great idea.", MOVES, None),  # no move at all
    ("Action: up, down", MOVES, None),  # the options listed back
    ("Action: To solve this problem, you need to", MOVES, None),
    ("Action: up", MOVES, "up"),
    ("Action: Up 1", MOVES, "up"),
    ("Action: left,", MOVES, "left"),
    ("Action: Right\n\nResult", MOVES, "right"),
    ("Action: turn right with flip", MOVES, "right"),
    ("Action: you are at", MOVES, None),
    ("That's a good start! I think this could be even", NUMBERS, None),
    ("range 1 15 that is indeed upper, but", NUMBERS, None),  # names 1 and 15
    # Written for the rules: the marked line decides, what comes before it is thinking.
    ("The goal is up, but a wall blocks up.\nAction: left", MOVES, "left"),
    ("<action>down</action>", MOVES, "down"),
    ("Action: up\nAction: down", MOVES, None),  # two marked answers that disagree
    ("down", MOVES, "down"),
    ("Down.", MOVES, "down"),
    ("upward", MOVES, None),  # a word that contains a move is not the move
    ("", MOVES, None),
    ("Action:", MOVES, None),
    ("I guess 7", NUMBERS, "7"),
    ("Action: 8", NUMBERS, "8"),
    ("Action: -1", NUMBERS, None),  # "-1" is not "1"
    ("Action: 16", NUMBERS, None),
    ("8.5", NUMBERS, None),  # 8 and 5
    ("Action: open drawer 2", COMMANDS, "open drawer 2"),
    ("Action: open drawer 12", COMMANDS, "open drawer 12"),  # not "open drawer 1"
    ("go kitchen, then take key", COMMANDS, None),
    ("Action: open the drawer", COMMANDS, None),
]


@pytest.mark.parametrize(("reply", "actions", "expected"), REAL_REPLIES)
def test_the_parser_on_real_replies(reply: str, actions: tuple[str, ...], expected: str) -> None:
    assert parse_reply(reply, actions) == expected


# Replies that name an action but do not mean it alone: negated, ranged, listed short, joined into
# one word. The parser used to read each as the action in it (the comment says which); the rule is
# that a reply names exactly one action, and none of these does. The last rows are replies
# smollm2 wrote (450 sampled on house, hilo, gridnav and sokoban, T=4, 8 tokens: these were the
# only ones whose reading changed); the valid ones keep their reading.
NOT_ONE_ACTION = [
    ("not left", MOVES),  # was left
    ("Don't go up.", MOVES),  # was up
    ("I would never go down", MOVES),
    ("don't open drawer 2", COMMANDS),  # was open drawer 2
    ("Action: do not take key", COMMANDS),
    ("open drawer 2 and 3", COMMANDS),  # was open drawer 2
    ("open drawer 2, 3", COMMANDS),
    ("open drawer 2 or 12", COMMANDS),
    ("go kitchen/bedroom", (*COMMANDS, "go bedroom")),  # was go kitchen
    ("go kitchen or bedroom", (*COMMANDS, "go bedroom")),
    ("bedroom or go kitchen", (*COMMANDS, "go bedroom")),
    ("10-20", NUMBERS),  # was 10
    ("10 - 20", NUMBERS),
    ("between 3 to 30", NUMBERS),
    ("5,000", NUMBERS),  # was 5
    ("8:30", NUMBERS),  # was 8
    ("open drawer 2.5", COMMANDS),  # was open drawer 2
    ("up-left", MOVES),  # was up
    ("Action: 125 - 4\n", NUMBERS),  # smollm2 on hilo; was 4
    ("Action: 1668 - 1", NUMBERS),  # smollm2 on hilo; was 1
    ("Action: upleftOnce, left-up,", MOVES),  # smollm2 on sokoban; was left
]
STILL_ONE_ACTION = [
    ("Action: up", MOVES, "up"),
    ("<action>up</action>", MOVES, "up"),
    ("I go up.", MOVES, "up"),
    ("Action: Up 1", MOVES, "up"),
    ("Action: right. Don't", MOVES, "right"),  # smollm2: the negation comes after
    ("Action: down. Arms down", MOVES, "down"),  # smollm2: the same move twice
    ("Action: left\n\nthis", MOVES, "left"),
    ("Action: 7", NUMBERS, "7"),
    ("Action: 7.", NUMBERS, "7"),
    ("Action: open drawer 2", COMMANDS, "open drawer 2"),
    ("Action: open drawer 2, choose 1", COMMANDS, "open drawer 2"),  # smollm2 on house
    ("Action: “left”", MOVES, "left"),
    ("There is no wall above, so I go up", MOVES, "up"),  # the negation is far from the move
    ("Action: 3, 3, 3", NUMBERS, "3"),  # smollm2 on hilo: the same guess again
    ("Action: 1 1\n\nThe lost", NUMBERS, "1"),  # smollm2 on hilo
]


@pytest.mark.parametrize(("reply", "actions"), NOT_ONE_ACTION)
def test_a_negated_ranged_or_listed_action_is_not_one_action(reply: str, actions: tuple) -> None:
    assert parse_reply(reply, actions) is None


@pytest.mark.parametrize(("reply", "actions", "expected"), STILL_ONE_ACTION)
def test_replies_naming_one_action_keep_it(reply: str, actions: tuple, expected: str) -> None:
    assert parse_reply(reply, actions) == expected


def test_the_parser_is_linear_in_the_reply() -> None:
    """160 kB of unclosed tags took 14 s with the old `<action>(.*?)</action>` (quadratic); each
    of these 150-160 kB replies takes at most 0.11 s of CPU here."""
    replies = [
        "<action>" * 20_000,
        "<action>" + "up " * 50_000,
        "action " * 23_000,
        "Action: " + "<action>up</action" * 9_000,
        "1 " * 80_000,
    ]
    for reply in replies:  # CPU time, so that other processes on the machine do not count
        start = time.process_time()
        parse_reply(reply, NUMBERS)
        parse_reply(reply, COMMANDS)
        assert time.process_time() - start < 0.5, reply[:30]


def test_a_seed_is_an_integer() -> None:
    """A seed read back from a file is given to reset(); a string would make some instance."""
    for task in tasks.NAMES:
        env = tasks.make(task)
        for seed in ("7", "7<script>", 7.0, True, None, [7]):
            with pytest.raises(TypeError, match="a seed is an integer"):
                env.reset(seed)  # type: ignore[arg-type]
        assert env.reset(7) == tasks.make(task).reset(7)


def test_the_parser_never_raises_and_answers_an_action_or_none() -> None:
    rng = random.Random(0)
    pieces = [*MOVES, *NUMBERS, "Action:", "action =", "<action>", "</action>", "\n", " ", "-"]
    alphabet = string.printable + "éß→\u200b\x00"
    for _ in range(3000):
        text = "".join(
            rng.choice(pieces) if rng.random() < 0.4 else rng.choice(alphabet)
            for _ in range(rng.randint(0, 40))
        )
        for actions in (MOVES, NUMBERS, COMMANDS):
            assert parse_reply(text, actions) in (None, *actions)
    for junk in (None, 3, b"up", ["up"]):
        assert parse_reply(junk, MOVES) is None  # type: ignore[arg-type]


def test_the_compact_text_keeps_its_strict_parser() -> None:
    """The tiny model's text is unchanged: a reply must be exactly one action word."""
    compact, natural = tasks.make("gridnav"), tasks.make("gridnav", text="natural")
    compact.reset(5), natural.reset(5)
    assert compact.parse("Action: up") is None and natural.parse("Action: up") == "up"
    assert compact.parse(" Up. ") == natural.parse(" Up. ") == "up"
    assert compact.reply_prefix == "" and natural.reply_prefix == "Action:"
    assert compact.system_prompt == compact.compact_rules
    assert "up, down, left or right" in natural.system_prompt


def test_an_invalid_natural_reply_costs_the_turn_and_changes_nothing() -> None:
    env = tasks.make("gridnav", text="natural")
    first = env.reset(11)
    step = env.step("Action: up, down")
    assert not step.info["valid"] and step.reward == 0.0 and not step.done
    assert step.observation.startswith("Your reply did not name exactly one action")
    assert step.observation.endswith(first)  # the state is the one before the reply


# ---- the natural rendering states every compact fact -----------------------------------------

_DIRS = "|".join(MOVES)


def _offsets(words: str) -> list[str]:
    """Compact "up 1 right 2" -> the natural phrases "1 step up", "2 steps right"."""
    if words.strip() == "here":
        return ["right here"]
    pairs = re.findall(rf"({_DIRS}) (\d+)", words)
    return [f"{n} step{'s' if int(n) > 1 else ''} {d}" for d, n in pairs]


def _blocked(words: str) -> list[str]:
    return ["Nothing blocks you"] if words.strip() == "none" else words.split()


def expected_phrases(task: str, compact: str) -> list[str]:
    """Every fact of a compact observation, as the phrase the natural text must contain."""
    phrases = []
    events = {
        "invalid action": "did not name exactly one action",
        "wall": "walked into a wall",
        "slipped": "slipped",
        "deadlock": "stuck",
        "higher": "higher than",
        "lower": "lower than",
        "correct": "Correct",
    }
    body, found = compact, True
    while found:  # icy can say two: "slipped . wall . pos ..."
        found = False
        for word, phrase in events.items():
            if body.startswith(word + " . ") or body.startswith(word + "\n") or body == word:
                phrases.append(phrase)
                body, found = body.removeprefix(word).removeprefix(" . "), True
    body, _, left = body.partition("\nturns left: ")
    if left:
        phrases.append(f"You have {left} turn")
    if task in ("gridnav", "icy"):
        m = re.fullmatch(r"pos (\d) (\d) goal (.+) blocked (.+)", body)
        assert m, body
        phrases += [f"row {m[1]}, column {m[2]}", *_offsets(m[3]), *_blocked(m[4])]
    elif task == "sokoban":
        m = re.fullmatch(r"pos (\d) (\d) box (.+) target (.+) blocked (.+)", body)
        assert m, body
        phrases += [f"row {m[1]}, column {m[2]}", *_offsets(m[3]), *_offsets(m[4])]
        phrases += _blocked(m[5])
    elif task == "guess" and body:
        m = re.fullmatch(r"range (\d+) (\d+)", body)
        assert m, body
        phrases.append(f"between {m[1]} and {m[2]}")
    return phrases


@pytest.mark.parametrize("task", ["gridnav", "icy", "sokoban", "guess"])
def test_the_natural_text_names_every_compact_fact(task: str) -> None:
    rng = random.Random(task)
    checked = 0
    for seed in range(40):
        compact, natural = tasks.make(task), tasks.make(task, text="natural")
        pairs = [(compact.reset(seed), natural.reset(seed))]
        for turn in range(8):
            # A valid action, or now and then an invalid reply (both texts reject theirs).
            if rng.random() < 0.15:
                replies = ("xyzzy", "Action: xyzzy")
            else:
                action = rng.choice(compact.action_words)
                replies = (action, f"Action: {action}")
            a, b = compact.step(replies[0]), natural.step(replies[1])
            assert a.info == b.info  # one state, one oracle: only the words differ
            left = 7 - turn
            pairs.append((budget_text(a.observation, left), budget_text(b.observation, left, True)))
            if a.done:
                break
        for short, long in pairs:
            for phrase in expected_phrases(task, short):
                assert phrase in long, f"{task} seed {seed}: {phrase!r} missing from {long!r}"
                checked += 1
    assert checked > 500


@pytest.mark.parametrize("task", ["gridnav", "icy", "sokoban", "guess"])
def test_the_natural_rules_state_the_answer_format(task: str) -> None:
    env = tasks.make(task, text="natural")
    rules = env.system_prompt
    assert "Action:" in rules and rules.endswith(env.format_rule())
    example = rules.rsplit("Action: ", 1)[1]
    assert env.parse(f"Action: {example}") == example  # the example is itself a valid reply


def test_the_text_follows_the_tokenizer(quick_policy) -> None:
    """tiny's word-level tokenizer gets the compact text (test_smollm2 checks a BPE one)."""
    _, tok = quick_policy
    assert resolve_task_text("auto", tok) == "compact"
    assert resolve_task_text("natural", tok) == "natural"  # a choice given is kept


def test_the_format_reward_is_on_for_the_natural_text_only() -> None:
    assert invalid_penalty_for(None, "compact") == 0.0
    assert invalid_penalty_for(None, "natural") == FORMAT_PENALTY > 0
    assert invalid_penalty_for(0.0, "natural") == 0.0  # a value given is kept
    with pytest.raises(ValueError, match="unknown task text"):
        tasks.make("gridnav", text="fancy")


def test_gradient_checkpointing_unset_is_off_for_tiny(quick_tiny_path: str) -> None:
    """train.py leaves --gradient_checkpointing unset: tiny trains without it (test_smollm2 checks
    that a chat model gets it)."""
    from minirl.models import load_policy

    model, _ = load_policy(quick_tiny_path, gradient_checkpointing=None)
    assert not model.get_base_model().is_gradient_checkpointing
    model, _ = load_policy(quick_tiny_path, gradient_checkpointing=True)
    assert model.get_base_model().is_gradient_checkpointing


@pytest.mark.parametrize("task", tasks.NAMES)
def test_every_natural_observation_ends_with_the_format_reminder(task: str) -> None:
    """The format again, last, where a small model reads it (issue 13: invalid replies grew with
    the turns while the rules sat only at the top of the conversation)."""
    env = tasks.make(task, text="natural")
    reminder = env.reminder()
    assert reminder.startswith("Reply with a single action")
    multiword = any(" " in a for a in env.action_words)
    assert reminder.endswith("nothing else." if multiword else "one word only.")
    rng = random.Random(task)
    for seed in range(10):
        assert env.reset(seed).endswith(reminder)
        for reply in ["xyzzy", *(rng.choice(env.action_words) for _ in range(6))]:
            step = env.step(f"Action: {reply}")
            # An ended episode needs no reminder; every other observation ends with one.
            assert step.observation.endswith(reminder) != step.done, step.observation
            if step.done:
                break
    assert not tasks.make(task).reset(0).endswith(reminder)  # the compact text is untouched


def test_hilo_says_what_guess_says_but_the_range() -> None:
    """hilo's natural answers name the guess they answer and the one bound that answer sets, never
    the interval that every answer together leaves: the one difference from guess is that memory."""
    hilo, guess = tasks.make("hilo", "natural"), tasks.make("guess", "natural")
    compared = 0
    for seed in range(300):
        hilo.reset(seed), guess.reset(seed)
        if hilo.target != guess.target:  # the seeds draw targets differently; compare equals
            continue
        compared += 1
        for move in ("8", "4", "12", "2", "14"):
            said, told = hilo.step(move), guess.step(move)
            assert said.done == told.done
            if said.done:
                assert said.observation.startswith(f"Correct: my number is {move}.")
                break
            higher = hilo.target > int(move)
            word, bound = ("Higher", int(move) + 1) if higher else ("Lower", int(move) - 1)
            side = "more" if higher else "less"
            assert said.observation.startswith(
                f"{word}: my number is {word.lower()} than {move}, so it is {bound} or {side}."
            )
            assert told.observation.startswith(f"{word}: my number is {word.lower()} than {move}.")
            # The only numbers hilo says are this guess and this answer's bound: the interval's
            # other end, set by an earlier answer, is left to the agent's memory.
            assert set(re.findall(r"\d+", said.observation)) == {move, str(bound)}
            assert "between" not in said.observation and "between" in told.observation
    assert compared >= 10
