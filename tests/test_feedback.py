"""Feedback use (minirl.eval.feedback) on simulated policies whose truth is known.

Every policy here is played through the real environments (feedback.simulate) into the same
Episode records a model's rollout makes: a fixed sequence and a random reply that never look at
an observation (truth: 0), the oracle (truth: every reply is a function of what it was told),
and mixtures of the two in between.
"""

from __future__ import annotations

import dataclasses
import math
import random

import pytest

import tasks
from minirl.eval import feedback
from minirl.eval.feedback import feedback_use, oracle, simulate

SEEDS = list(tasks.EVAL_SEEDS[:60])
BUDGET = 6


def fixed(task: str):
    actions = tasks.make(task).action_words
    return lambda env, turn: actions[(3 * turn + 1) % len(actions)]


@pytest.mark.parametrize("task", tasks.NAMES)
def test_a_fixed_sequence_uses_no_feedback_and_the_oracle_does(task: str) -> None:
    blind = feedback_use(simulate(task, SEEDS, BUDGET, fixed(task)))
    assert blind.bits == blind.plug_in == blind.null_sd == 0.0 and blind.groups > 0
    seeing = feedback_use(simulate(task, SEEDS, BUDGET, oracle))
    assert seeing.bits > 0.3, seeing  # a third of a bit per turn and more: clearly positive
    assert seeing.bits > 10 * seeing.null_sd  # and far outside what a blind policy strays to


def test_the_oracle_on_guess_uses_one_bit_per_turn_after_the_first() -> None:
    # Turn 1 is always "8" (nothing heard yet); each later reply is one of two halves of what
    # is left, chosen by the last answer: 1 bit each, so FU = (turns after the first) / turns.
    played = simulate("guess", list(tasks.EVAL_SEEDS[:400]), 4, oracle)
    turns = sum(len(e.turns) for e in played)
    later = turns - len(played)
    assert feedback_use(played).plug_in == pytest.approx(later / turns, abs=0.03)


def test_a_random_blind_policy_reads_zero_once_the_bias_is_corrected() -> None:
    actions = tasks.make("gridnav").action_words
    rng = random.Random(0)
    played = simulate(
        "gridnav", list(tasks.EVAL_SEEDS[:300]), 8, lambda env, t: rng.choice(actions)
    )
    found = feedback_use(played)
    assert found.plug_in > 0.2  # counting alone sees dependence in noise
    assert abs(found.bits) < 0.03  # the shuffle correction removes it
    assert abs(found.bits) < 3 * found.null_sd  # within the spread it reports for blind play


def test_a_blind_policy_with_memory_of_its_own_replies_reads_zero() -> None:
    # Its reply depends on its own first reply, which also moved it: the situation and the reply
    # are correlated through the policy's own action, not through anything it was told.
    actions = tasks.make("gridnav").action_words
    rng = random.Random(1)
    first: dict[int, str] = {}

    def repeat(env: tasks.Env, turn: int) -> str:
        key = id(env)
        if turn == 0:
            first[key] = rng.choice(actions)
        return first[key]

    found = feedback_use(simulate("gridnav", list(tasks.EVAL_SEEDS[:300]), 6, repeat))
    assert abs(found.bits) < 0.03


def test_more_of_the_oracle_is_more_feedback_use() -> None:
    actions = tasks.make("hilo").action_words
    seeds = list(tasks.EVAL_SEEDS[:300])
    rng = random.Random(2)

    def mix(q: float):
        return lambda env, t: oracle(env, t) if rng.random() < q else rng.choice(actions)

    used = [feedback_use(simulate("hilo", seeds, 6, mix(q))).bits for q in (0.0, 0.5, 1.0)]
    assert abs(used[0]) < 0.05 and used[0] < used[1] - 0.1 < used[2] - 0.2, used


def test_plug_in_bits_by_hand() -> None:
    # Replies equal to labels on two equally common values: 1 bit; independent: 0 bits.
    assert feedback._bits([("a", "x"), ("b", "y")] * 5) == pytest.approx(1.0)
    assert feedback._bits([("a", "x"), ("a", "y"), ("b", "x"), ("b", "y")]) == 0.0
    # 3 x to a, 1 x to b, 2 y to b: I = H(A) - H(A|S) = H(1/2) - (4/6) H(1/4).
    h = lambda p: -p * math.log2(p) - (1 - p) * math.log2(1 - p)  # noqa: E731
    pairs = [("a", "x")] * 3 + [("b", "x"), ("b", "y"), ("b", "y")]
    assert feedback._bits(pairs) == pytest.approx(h(0.5) - 4 / 6 * h(0.25))


def test_a_replay_that_disagrees_with_the_record_is_an_error() -> None:
    (episode,) = simulate("gridnav", SEEDS[:1], 4, oracle)
    episode.turns[0] = dataclasses.replace(episode.turns[0], optimal=not episode.turns[0].optimal)
    with pytest.raises(ValueError, match="task has changed"):
        feedback_use([episode])
    with pytest.raises(ValueError, match="whole episodes"):
        feedback_use([dataclasses.replace(episode, start_turn=1)])
