"""Simulated policies with known skills, played on the real tasks: the study's null and test bench.

A simulated policy has two numbers: q_fresh, the chance that it plays an oracle-optimal action
while its episode is still error-free, and q_post, the same chance once it has made an error.
Otherwise it plays a non-optimal action, uniformly at random. Everything else (walls, hidden
information, when an instance is solved, the turn budget) is the task's own, so the ceiling per T
of a perfect policy (q = 1) is the oracle's success at T (tasks.history.oracle_success).

It serves twice:
- **The budget-dependence null** (minirl.study.claims). A checkpoint's single-step gain,
  measured on fixed fresh states as a change d in log-odds, is carried through the turns by
  shifting both q's by d:  q' = sigmoid(logit(q) + d). The simulated gap S(T; q') - S(T; q) is
  what that gain alone buys at each T, with no skill that needs a budget. A uniform shift of the
  log-odds is the "no recovery skill" model: a policy whose logits for the right action rise by
  the same amount in every state.
- **Verdict validation** (tests/test_study_verdicts.py, lesson 7). Policies with a known skill
  (only single-step, only recovery, none) produce results files shaped like an evaluation's, at
  the study's sizes, and the verdict rules must call them right.

Episodes are budget-blind, so one episode at the largest T gives every smaller T (its success
within the first T turns). Random numbers come from one stream per (instance, episode), the same
for every q, so curves for nearby q's differ by the policy, not by the dice (common random
numbers), and the null is smooth in d.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

import tasks


def logit(p: float) -> float:
    p = min(max(p, 1e-6), 1 - 1e-6)
    return math.log(p / (1 - p))


def sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x))


def shifted(q: float, d: float) -> float:
    """q with its log-odds moved by d."""
    return sigmoid(logit(q) + d)


@dataclass(frozen=True)
class SimPolicy:
    """Optimal with probability q_fresh until the first error, q_post after it."""

    q_fresh: float
    q_post: float

    def shift(self, d: float, post_only: bool = False) -> SimPolicy:
        """A policy whose log-odds of the optimal action rise by d (after errors only)."""
        fresh = self.q_fresh if post_only else shifted(self.q_fresh, d)
        return SimPolicy(fresh, shifted(self.q_post, d))


@dataclass
class SimEpisode:
    success_turn: int | None  # the turn it was solved on, or None
    first_error: int | None  # 1-based turn of the first non-optimal action


def play(
    env: tasks.Env, seed: int, policy: SimPolicy, budget: int, rng: random.Random
) -> SimEpisode:
    """One budget-blind episode of at most `budget` turns."""
    env.reset(seed)
    first_error = None
    for turn in range(1, budget + 1):
        best = sorted(env.optimal_actions())
        others = [a for a in env.action_words if a not in best]
        q = policy.q_fresh if first_error is None else policy.q_post
        if rng.random() < q or not others:
            action = rng.choice(best)
        else:
            action = rng.choice(others)
            first_error = first_error or turn
        step = env.step(action)
        if step.done:
            return SimEpisode(turn if step.info["success"] else None, first_error)
    return SimEpisode(None, first_error)


def episodes(
    task: str, seeds: Sequence[int], policy: SimPolicy, budget: int, n: int, stream: int = 0
) -> list[list[SimEpisode]]:
    """n episodes per instance; `stream` picks the dice (the same stream for every policy)."""
    env = tasks.make(task)
    return [
        [play(env, s, policy, budget, random.Random(f"{stream}/{s}/{j}")) for j in range(n)]
        for s in seeds
    ]


def successes(played: list[list[SimEpisode]], ts: Sequence[int]) -> dict[int, list[int]]:
    """Per T, each instance's number of episodes solved within T turns."""
    return {
        t: [sum(e.success_turn is not None and e.success_turn <= t for e in row) for row in played]
        for t in ts
    }


def curve(
    task: str, seeds: Sequence[int], policy: SimPolicy, ts: Sequence[int], n: int
) -> dict[int, float]:
    """Success rate at every T of `ts` (n budget-blind episodes per instance)."""
    counts = successes(episodes(task, seeds, policy, max(ts), n), ts)
    return {t: sum(c) / (n * len(seeds)) for t, c in counts.items()}


def null_table(
    task: str,
    seeds: Sequence[int],
    base: SimPolicy,
    ts: Sequence[int],
    shifts: Sequence[float],
    n: int = 8,
) -> dict[float, dict[int, float]]:
    """The no-budget-skill curve for every log-odds shift d in `shifts`: {d: {T: success}}."""
    return {d: curve(task, seeds, base.shift(d), ts, n) for d in shifts}


def interpolate(table: dict[float, dict[int, float]], d: float, t: int) -> float:
    """Linear interpolation of table[d][t] in d, clamped to the table's range."""
    keys = sorted(table)
    d = min(max(d, keys[0]), keys[-1])
    for lo, hi in zip(keys, keys[1:], strict=False):
        if lo <= d <= hi:
            w = 0.0 if hi == lo else (d - lo) / (hi - lo)
            return (1 - w) * table[lo][t] + w * table[hi][t]
    return table[keys[0]][t]
