"""Grader for assignment 5 (recovery from fixed post-error states): by hand, then on simulated
policies with known skills playing the real fog task (minirl.study.simulate); part 4 on
positions of known quality, where the only thing that makes an erred position look worse is
that the base erred there.

A simulated policy plays an oracle-optimal action with probability q_fresh until its first
error and q_post after it. The base has q = 0.6 in both; a single-step-only arm has both log-odds
raised by 0.8 (its true recovery gain is 0), a recovery-only arm has only q_post's raised by 1.0
(its true gain is 1.0).
"""

from __future__ import annotations

import math
import random

import pytest
from grading import implementation

import tasks
from minirl.study import simulate

post_error_states = implementation("a5_recovery", "post_error_states")
recovery_gain = implementation("a5_recovery", "recovery_gain")
BASE = simulate.SimPolicy(0.6, 0.6)


def test_post_error_states_by_hand() -> None:
    episodes = [
        [True, True, False, True],  # first error at turn 3, then one more turn: a state
        [True, True, True],  # no error
        [False],  # the error was the last turn
        [True, False],  # the same
        [False, False, True],  # the first error counts, not the second
    ]
    assert post_error_states(episodes) == [(0, 3), (4, 1)]
    assert post_error_states([]) == []


def test_recovery_gain_by_hand() -> None:
    half = [1, 0] * 50  # 50 of 100 optimal
    quarter = [1, 0, 0, 0] * 25
    # Fresh unchanged; after an error 0.25 -> 0.5: log(0.5 / 0.5) - log(0.25 / 0.75) = log 3.
    assert recovery_gain(half, half, quarter, half, 1) == pytest.approx(math.log(3))
    # The same change on both sides cancels.
    assert recovery_gain(quarter, half, quarter, half, 1) == pytest.approx(0.0)
    # Pooled over samples: 3 of 4 states x 2 samples = 6 of 8.
    # Pooled over samples: fresh 4 of 8 -> 6 of 8 (+log 3), post unchanged: -log 3.
    assert recovery_gain([1, 1, 1, 1], [2, 2, 1, 1], [1], [1], 2) == pytest.approx(-math.log(3))
    # All optimal stays finite: clipped half a trial (of 4) from 1, L = log(3.5 / 0.5) = log 7.
    assert recovery_gain([1, 1], [1, 1], [1, 1], [2, 2], 2) == pytest.approx(math.log(7))


def states_and_counts(seed: int) -> tuple[list, dict, dict]:
    """Base episodes on fog; the student's post-error states; every policy asked in them."""
    env = tasks.make("fog")
    seeds = list(tasks.EVAL_SEEDS[:100])
    played = [e for row in simulate.episodes("fog", seeds, BASE, 12, 4, stream=seed) for e in row]
    where = post_error_states([e.optimal for e in played])
    # The states are right: first errors of episodes that went on after them.
    expected = [
        (i, e.first_error)
        for i, e in enumerate(played)
        if e.first_error and e.first_error < len(e.actions)
    ]
    assert where == expected
    instance = [s for s in seeds for _ in range(4)]
    fresh = [(instance[i], played[i].actions[: j - 1]) for i, j in where]  # error-free prefixes
    post = [(instance[i], played[i].actions[:j]) for i, j in where]
    arms = {
        "base": BASE,
        "single-step": BASE.shift(0.8),
        "recovery": BASE.shift(1.0, post_only=True),
    }
    counts, truth = {}, {}
    for name, policy in arms.items():
        truth[name] = (
            sum(chance(env, state, policy.q_fresh) for state in fresh) / len(fresh),
            sum(chance(env, state, policy.q_post) for state in post) / len(post),
        )
        dice = random.Random(f"{seed}/{name}")
        counts[name] = (
            [ask(env, state, policy, dice) for state in fresh],
            [ask(env, state, policy, dice) for state in post],
        )
    return where, counts, truth


def ask(env: tasks.Env, state: tuple, policy: simulate.SimPolicy, dice: random.Random) -> int:
    """How many of 4 sampled next actions in `state` were optimal."""
    seed, start = state
    turns = [simulate.play(env, seed, policy, len(start) + 1, dice, start) for _ in range(4)]
    return sum(e.optimal[len(start)] for e in turns)


def chance(env: tasks.Env, state: tuple, q: float) -> float:
    """The exact chance of an optimal next action: q, or 1 where every action is optimal."""
    seed, start = state
    env.reset(seed)
    for action in start:
        env.step(action)
    return 1.0 if set(env.optimal_actions()) >= set(env.action_words) else q


def logit(p: float) -> float:
    return math.log(p / (1 - p))


@pytest.mark.parametrize("seed", [0, 1])
def test_known_skills_are_told_apart(seed: int) -> None:
    where, counts, truth = states_and_counts(seed)
    assert len(where) > 150
    base_fresh, base_post = counts["base"]

    def gain(arm: str) -> float:
        fresh, post = counts[arm]
        return recovery_gain(base_fresh, fresh, base_post, post, 4)

    def true_gain(arm: str) -> float:
        (bf, bp), (af, ap) = truth["base"], truth[arm]
        return logit(ap) - logit(bp) - (logit(af) - logit(bf))

    # Where every action is optimal a policy has no choice, which pulls pooled rates towards 1
    # a little differently in fresh and post-error states: the truths are near 0 and 1 (a
    # uniform log-odds shift is exact only where every state is alike), and computed here.
    assert abs(true_gain("single-step")) < 0.15 and true_gain("recovery") > 0.4
    for arm in ("single-step", "recovery"):
        assert gain(arm) == pytest.approx(true_gain(arm), abs=0.3), arm


# ---- part 3: matching --------------------------------------------------------------------------

match_states = implementation("a5_recovery", "match_states")


def test_match_states_by_hand() -> None:
    a, b = (2, 3, 1), (3, 2, 1)
    fresh = [(7, a), (5, a), (5, b), (9, a), (5, a)]
    post = [(5, a), (9, a), (8, b), (5, (6, 6, 3))]
    assert match_states(post, fresh, 2) == [[1, 4], [3, 0], [2], []]
    assert match_states(post, fresh, 1) == [[1], [3], [2], []]
    assert match_states(post, fresh, 5)[0] == [1, 4, 0, 3]
    assert match_states([], fresh, 2) == []


def key_of(env: tasks.Env, seed: int, start: list[str]) -> tuple[int, int, int]:
    env.reset(seed)
    for action in start:
        env.step(action)
    return (min(len(start) + 1, 6), round(env.distance()), min(len(env.optimal_actions()), 3))


def test_matching_removes_the_turn_confound() -> None:
    """A policy whose gain is front-loaded (+1.5 log-odds on turn 1 only) has no recovery skill.
    Post-error states are never at turn 1, random fresh states mostly are: against random fresh
    states its gain looks far smaller after an error; against matched ones it is exactly 0."""
    env = tasks.make("fog")
    seeds = list(tasks.EVAL_SEEDS[:80])
    base = simulate.SimPolicy(0.6, 0.4)
    arm = base.add(early=1.5)
    played = simulate.episodes("fog", seeds, base, 10, 4, stream=5)
    pool, post = [], []
    for s, row in zip(seeds, played, strict=True):
        for e in row:
            clean = e.first_error - 1 if e.first_error else len(e.actions)
            pool += [(s, e.actions[:j]) for j in range(min(clean + 1, len(e.actions)))]
            if e.first_error and e.first_error < len(e.actions):
                post.append((s, e.actions[: e.first_error]))
    fresh_keys = [(s, key_of(env, s, a)) for s, a in pool]
    post_keys = [(s, key_of(env, s, a)) for s, a in post]
    found = match_states(post_keys, fresh_keys, 3)
    assert len(found) == len(post)
    for (s, key), picks in zip(post_keys, found, strict=True):
        assert len(picks) <= 3 and all(fresh_keys[i][1] == key for i in picks)
        same = [i for i, (seed, k) in enumerate(fresh_keys) if k == key and seed == s]
        assert picks[: len(same)] == same[: len(picks)]  # its own instance's states first
    paired = [k for k, picks in enumerate(found) if picks]
    assert len(paired) > 0.8 * len(post)

    def rate(policy: simulate.SimPolicy, states: list[tuple[int, list[str]]]) -> float:
        return sum(
            simulate.chance(simulate.context("fog", s, a, 10), policy) for s, a in states
        ) / len(states)

    def gain(states: list[tuple[int, list[str]]]) -> float:
        return logit(rate(arm, states)) - logit(rate(base, states))

    after = [post[k] for k in paired]
    matched = [pool[i] for k in paired for i in found[k]]
    # Exact chances, no sampling: the matched comparison's recovery gain is 0 (up to the
    # states whose every action is optimal, which weigh alike on both sides) ...
    assert gain(after) - gain(matched) == pytest.approx(0.0, abs=0.05)
    # ... while the random fresh states, mostly at turn 1, make it look like a large deficit.
    assert gain(after) - gain(pool) < -0.5


# ---- part 4: the same position -----------------------------------------------------------------

same_position_deficit = implementation("a5_recovery", "same_position_deficit")


def test_same_position_deficit_by_hand() -> None:
    d, se = same_position_deficit([0.5, 0.7, 0.3], [0.25, 0.45, 0.2], [1, 2, 3])
    assert d == pytest.approx(logit(0.3) - logit(0.5))
    u = [(q - 0.3) / 0.21 - (p - 0.5) / 0.25 for p, q in ((0.5, 0.25), (0.7, 0.45), (0.3, 0.2))]
    m = sum(u) / 3
    assert se == pytest.approx(math.sqrt(sum((x - m) ** 2 for x in u) / 2 / 3))
    # Two pairs of one instance are one cluster: here they cancel, and so does their spread.
    d, se = same_position_deficit([0.4, 0.6, 0.5], [0.3, 0.7, 0.5], [1, 1, 2])
    assert d == pytest.approx(0.0) and se == pytest.approx(0.0)


def test_selection_is_not_a_deficit() -> None:
    """Positions of known quality q; the base errs in a position with chance 1 - q, and the pairs
    come from the positions where it did. A policy that ignores its history acts the same after
    its error: against random positions the erred ones look much worse (selection), in the same
    position there is no deficit. One that loops (after an error it plays optimally only 70% as
    often) has one, and the standard error matches a bootstrap over instances."""
    dice = random.Random(0)
    quality = {g: dice.uniform(0.15, 0.85) for g in range(400)}
    erred = [g for g, q in quality.items() if dice.random() > q]  # where the base erred
    before = [quality[g] for g in erred]
    everywhere = sum(quality.values()) / len(quality)
    # Selection: E[q | erred] = E[q (1 - q)] / E[1 - q] = 0.418 against E[q] = 0.5, -0.33 log-odds.
    assert logit(sum(before) / len(before)) - logit(everywhere) < -0.25
    d, _ = same_position_deficit(before, list(before), erred)
    assert d == pytest.approx(0.0, abs=1e-12)
    loop = [0.7 * q for q in before]
    d, se = same_position_deficit(before, loop, erred)
    assert d == pytest.approx(
        logit(0.7 * sum(before) / len(before)) - logit(sum(before) / len(before))
    )
    noisy = [min(max(q + dice.gauss(0, 0.1), 0.01), 0.99) for q in loop]
    d, se = same_position_deficit(before, noisy, erred)
    draws = []
    for _ in range(2000):
        picks = [dice.randrange(len(erred)) for _ in erred]
        b = sum(before[i] for i in picks) / len(picks)
        a = sum(noisy[i] for i in picks) / len(picks)
        draws.append(logit(a) - logit(b))
    mean = sum(draws) / len(draws)
    boot = math.sqrt(sum((x - mean) ** 2 for x in draws) / (len(draws) - 1))
    assert se == pytest.approx(boot, rel=0.15) and d < -3 * se
