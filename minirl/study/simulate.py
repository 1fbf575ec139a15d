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
from dataclasses import dataclass, field

import tasks
from minirl.eval.passkt import Cell
from minirl.eval.results import (
    Analysis,
    CheckpointResult,
    DecisionQuality,
    EvalMeta,
    EvalResults,
    Rate,
    Recovery,
    StateRecovery,
)


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
    actions: list[str]
    optimal: list[bool]  # per turn: was the action oracle-optimal
    error_kind: str | None = None  # what the first error was (minirl.eval.recovery.KINDS)


def play(
    env: tasks.Env,
    seed: int,
    policy: SimPolicy,
    budget: int,
    rng: random.Random,
    start: Sequence[str] = (),
) -> SimEpisode:
    """One budget-blind episode of at most `budget` turns; `start` replays a state's actions
    first (they count as turns, and an error among them puts the policy in its post-error mode)."""
    env.reset(seed)
    episode = SimEpisode(None, None, [], [])
    for turn in range(1, budget + 1):
        best = sorted(env.optimal_actions())
        others = [a for a in env.action_words if a not in best]
        if turn <= len(start):
            action = start[turn - 1]
        else:
            q = policy.q_fresh if episode.first_error is None else policy.q_post
            action = rng.choice(best) if rng.random() < q or not others else rng.choice(others)
        step = env.step(action)
        episode.actions.append(action)
        episode.optimal.append(action in best)
        if action not in best and episode.first_error is None:
            episode.first_error = turn
            # The same labels as minirl.eval.recovery.error_kind gives a model's errors.
            error = step.info.get("error")
            mistake = step.info.get("mistake")
            episode.error_kind = error or ("avoidable" if mistake else "detour")
        if step.done:
            episode.success_turn = turn if step.info["success"] else None
            return episode
    return episode


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
    """Linear interpolation of `table[d][t]` in d, clamped to the table's range."""
    keys = sorted(table)
    d = min(max(d, keys[0]), keys[-1])
    for lo, hi in zip(keys, keys[1:], strict=False):
        if lo <= d <= hi:
            w = 0.0 if hi == lo else (d - lo) / (hi - lo)
            return (1 - w) * table[lo][t] + w * table[hi][t]
    return table[keys[0]][t]


# ---- results files from simulated checkpoints --------------------------------------------------


@dataclass
class SimStudy:
    """What `sim_results` builds: an evaluation's results, and each arm's run labels."""

    results: EvalResults
    arms: dict[str, list[str]] = field(default_factory=dict)


def _count(rng: random.Random, q: float, m: int) -> int:
    return sum(rng.random() < q for _ in range(m))


def sim_results(
    task: str,
    arms: dict[str, SimPolicy],
    *,
    runs: int = 3,
    seed_sd: float = 0.1,
    instances: int = 60,
    n: int = 4,
    ts: Sequence[int] = (2, 4, 8, 12),
    fresh_states: int = 200,
    post_states: int = 200,
    samples: int = 2,
    state_episodes: int = 4,
    seed: int = 0,
) -> SimStudy:
    """An evaluation of simulated checkpoints, shaped like minirl.eval.compare's, at these sizes.

    `arms` maps "base" and each trained arm to its policy; a trained arm gets `runs` runs (its
    training seeds), each the arm's policy with its log-odds moved by N(0, seed_sd), uniformly,
    so the seed spread carries no skill. As in the real evaluation, the fixed states come from
    base episodes, once: fresh states are error-free prefixes, post-error states end with an
    episode's first error; every run is then asked in the same states. Each run's episodes use
    their own dice, as two real checkpoints do.
    """
    rng = random.Random(f"sim/{task}/{seed}")
    seeds = list(tasks.EVAL_SEEDS[:instances])
    horizon = max(ts)
    base_played = episodes(task, seeds, arms["base"], horizon, state_episodes, stream=-1 - seed)
    fresh, post = [], []
    for s, row in zip(seeds, base_played, strict=True):
        for e in row:
            clean = e.first_error - 1 if e.first_error else len(e.actions)
            fresh += [(s, e.actions[:j]) for j in range(min(clean + 1, len(e.actions)))]
            if e.first_error and e.first_error < len(e.actions):
                post.append((s, e.actions[: e.first_error], e.error_kind or "detour"))
    fresh = rng.sample(fresh, min(fresh_states, len(fresh)))
    post = rng.sample(post, min(post_states, len(post)))
    env = tasks.make(task)
    meta = EvalMeta(
        task=task,
        model="simulated",
        quant="none",
        seeds=seeds,
        n=n,
        ks=[1],
        ts=list(ts),
        seed=seed,
        budget_visible=True,
        mode="simulated",
        temperature=1.0,
        max_new_tokens=0,
        analysis_budget=horizon,
        minirl_version="simulated",
        device="cpu",
        decision_states=[{"seed": s, "turn": len(a), "replies": a} for s, a in fresh],
        post_error_states=[
            {"seed": s, "turn": len(a), "replies": a, "kind": k, "turns_left": horizon - len(a)}
            for s, a, k in post
        ],
        decision_samples=samples,
    )
    study = SimStudy(EvalResults(meta))
    for arm, policy in arms.items():
        labels = ["base"] if arm == "base" else [f"{arm}-s{r}" for r in range(runs)]
        if arm != "base":
            study.arms[arm] = labels
        for label in labels:
            run = policy if arm == "base" else policy.shift(rng.gauss(0.0, seed_sd))
            stream = rng.randrange(1 << 30)
            played = episodes(task, seeds, run, horizon, n, stream=stream)
            wins = successes(played, ts)
            dice = random.Random(stream)
            optimal = [_count(dice, run.q_fresh, samples) for _ in fresh]
            cont = [
                [play(env, s, run, horizon, dice, start=a) for _ in range(samples)]
                for s, a, _ in post
            ]
            study.results.checkpoints[label] = _checkpoint(run, played, wins, optimal, cont, post)
    return study


def _checkpoint(
    run: SimPolicy,
    played: list[list[SimEpisode]],
    wins: dict[int, list[int]],
    optimal: list[int],
    cont: list[list[SimEpisode]],
    post: list[tuple[int, list[str], str]],
) -> CheckpointResult:
    flat = [e for row in played for e in row]
    instances = len(played)
    grid = []
    for t, c in wins.items():
        p = sum(c) / (len(flat) or 1)
        grid.append(Cell(1, t, p, math.sqrt(p * (1 - p) / instances), p, p, instances))
    won = [e.success_turn is not None for e in flat]
    erred = [e.first_error is not None for e in flat]
    samples = len(cont[0]) if cont else 1
    nxt = [e.optimal[len(a)] for row, (_, a, _) in zip(cont, post, strict=True) for e in row]
    ok = [e.success_turn is not None for row in cont for e in row]
    kinds = [k for _, _, k in post for _ in range(samples)]
    return CheckpointResult(
        path=None,
        grid=grid,
        analysis=Analysis(
            decision=DecisionQuality(
                Rate(sum(optimal) / (samples * len(optimal) or 1), samples * len(optimal)),
                Rate(1.0, samples * len(optimal)),
                optimal,
            ),
            # The first edition's descriptive measure, from each checkpoint's own episodes.
            recovery=Recovery(
                no_error=Rate.of([w for w, e in zip(won, erred, strict=True) if not e]),
                after_error=Rate.of([w for w, e in zip(won, erred, strict=True) if e]),
            ),
            horizon={},
            efficiency={},
            invalid_rate=0.0,
            from_errors=StateRecovery(
                optimal=Rate.of(nxt),
                success=Rate.of(ok),
                by_kind={
                    k: Rate.of([w for w, kk in zip(ok, kinds, strict=True) if kk == k])
                    for k in sorted(set(kinds))
                },
                optimal_counts=[sum(nxt[i : i + samples]) for i in range(0, len(nxt), samples)],
                success_counts=[sum(ok[i : i + samples]) for i in range(0, len(ok), samples)],
            ),
        ),
        seconds=0.0,
        successes=wins,
    )
