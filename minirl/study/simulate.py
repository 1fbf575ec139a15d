"""Simulated policies with known skills, played on the real tasks: the study's null and test bench.

A simulated policy plays an oracle-optimal action with a chance set by its log-odds in the state,
and otherwise a non-optimal action, uniformly at random (or, with `repeat`, the action that just
failed). Everything else (walls, hidden information, when an instance is solved, the turn budget)
is the task's own, so the ceiling per T of a perfect policy is the oracle's success at T
(tasks.history.oracle_success). The log-odds in a state, at turn t with `left` turns left, on an
instance of difficulty z (a fixed N(0, 1) draw per instance):

    logit(q_post if an error is behind it else q_fresh)      the two modes
      + turn_fresh[t] or turn_post[t]                        per-turn levels (the calibrated null)
      + turn_harder[t] on the instances in `harder`          ... and the harder instances' own
      + spread * z                                            instances of unequal difficulty
      + early * [t = 1] + hard * [z < 0] + hurry * [left <= 2] + patient * [left >= 6]
      + rate * (1 - sigmoid(everything above))               more gain where the policy is weak

`repeat` makes errors non-uniform: after an error, the policy repeats it with that chance, as
the `sticky` tiny base learned to. The first three lines and `repeat` are the null's own model;
the others are truths outside it, used to validate the verdict rules (minirl.study.validate):
difficulty that varies by instance in a way the null cannot see, gains front-loaded in the turn,
gains on hard instances, gains that depend on the base rate, and budget-aware policies (`hurry`
and `patient` read the budget they are shown).

It serves twice:
- **The budget-dependence null** (minirl.study.claims). The base is calibrated per turn from its
  fresh and post-error states, and then in level to base's real Pass@(1,T); an arm's measured
  single-step gains, per turn, are added to it. The simulated gap S(T; arm) - S(T; base) is what
  those gains alone buy at each T, with no skill that needs a budget.
- **Verdict validation** (tests/test_study_verdicts.py, lesson 7). Policies with known skills
  produce results files shaped like an evaluation's, at the study's sizes, and the verdict
  rules must call them right; `chance` gives each state's exact probability, so the statistics'
  own estimands are known too.

Episodes of a budget-blind policy are played once at the largest T and truncated for every
smaller T. Random numbers come from one stream per (instance, episode), the same for every
policy, so curves for nearby policies differ by the policy, not by the dice (common random
numbers), and the null is smooth in the gains.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

import tasks
from minirl.eval.passkt import Cell
from minirl.eval.recovery import hardness, match, match_key, pick
from minirl.eval.results import (
    Analysis,
    CheckpointResult,
    DecisionQuality,
    EvalMeta,
    EvalResults,
    PositionScores,
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


def difficulty(seed: int) -> float:
    """The instance's fixed N(0, 1) draw z (the same for every policy)."""
    return random.Random(f"difficulty/{seed}").gauss(0.0, 1.0)


STATE_SD = 0.5  # a training run's state-to-state log-odds noise (sim_results)


@functools.lru_cache(maxsize=1 << 18)
def state_noise(run: str, seed: int, turn: int, erred: bool) -> float:
    """A training run's own N(0, 1) draw for one kind of state (instance, turn, error behind it)."""
    return random.Random(f"state/{run}/{seed}/{turn}/{erred}").gauss(0.0, 1.0)


@dataclass(frozen=True)
class SimPolicy:
    """A simulated policy (see the module docstring for what each field adds)."""

    q_fresh: float
    q_post: float
    turn_fresh: tuple[float, ...] = ()  # log-odds added at turn t (entry t - 1; the last repeats)
    turn_post: tuple[float, ...] = ()
    harder: frozenset[int] = frozenset()  # instances (seeds) that get turn_harder added too
    turn_harder: tuple[float, ...] = ()
    spread: float = 0.0
    early: float = 0.0
    hard: float = 0.0
    hurry: float = 0.0
    patient: float = 0.0
    rate: float = 0.0
    repeat: float = 0.0
    state_sd: float = 0.0  # a run's own log-odds noise per (instance, turn, error behind it) ...
    run: str = ""  # ... drawn from this run's stream (state_noise)

    def shift(self, d: float, post_only: bool = False) -> SimPolicy:
        """A policy whose log-odds of the optimal action rise by d (after errors only)."""
        fresh = self.q_fresh if post_only else shifted(self.q_fresh, d)
        return dataclasses.replace(self, q_fresh=fresh, q_post=shifted(self.q_post, d))

    def add(self, **gains: float) -> SimPolicy:
        """This policy with gains added to its fields (e.g. add(early=0.5, hard=1.0))."""
        return dataclasses.replace(self, **{k: getattr(self, k) + v for k, v in gains.items()})

    @property
    def budget_aware(self) -> bool:
        return self.hurry != 0 or self.patient != 0

    def q(self, turn: int, erred: bool, z: float, left: int, seed: int = -1) -> float:
        """The chance of an optimal action at `turn` (1-based) with `left` turns left."""
        levels = self.turn_post if erred else self.turn_fresh
        x = logit(self.q_post if erred else self.q_fresh)
        x += levels[min(turn, len(levels)) - 1] if levels else 0.0
        if self.turn_harder and seed in self.harder:
            x += self.turn_harder[min(turn, len(self.turn_harder)) - 1]
        x += self.spread * z + self.early * (turn == 1) + self.hard * (z < 0)
        x += self.hurry * (left <= 2) + self.patient * (left >= 6)
        if self.state_sd:
            x += self.state_sd * state_noise(self.run, seed, turn, erred)
        x += self.rate * (1 - sigmoid(x))
        return sigmoid(x)


@dataclass
class SimEpisode:
    success_turn: int | None  # the turn it was solved on, or None
    first_error: int | None  # 1-based turn of the first non-optimal action
    actions: list[str]
    optimal: list[bool]  # per turn: was the action oracle-optimal
    error_kind: str | None = None  # what the first error was (minirl.eval.recovery.KINDS)


@functools.lru_cache(maxsize=8192)
def _snapshot(task: str, seed: int) -> tasks.Env:
    env = tasks.make(task)
    env.reset(seed)
    return env


def fresh(task: str, seed: int) -> tasks.Env:
    """`tasks.make(task)` reset to instance `seed`, from a copy kept of its first reset.

    The simulations reset the same instances thousands of times, and building one (fog's and
    house's oracles precompute) costs ten to a hundred times more than this copy: the instance
    is shared, and only what a step changes (lists, sets, dicts, a task's own RNG) is copied.
    """
    env = copy.copy(_snapshot(task, seed))
    for name, value in vars(env).items():
        if isinstance(value, random.Random):
            setattr(env, name, copy.deepcopy(value))
        elif isinstance(value, (list, set, dict)):
            setattr(env, name, copy.copy(value))
    return env


def play(
    env: tasks.Env | str,
    seed: int,
    policy: SimPolicy,
    budget: int,
    rng: random.Random,
    start: Sequence[str] = (),
) -> SimEpisode:
    """One episode of at most `budget` turns in `env` (or a fresh one of the task it names);
    `start` replays a state's actions first (they count as turns, and an error among them puts
    the policy in its post-error mode)."""
    if isinstance(env, str):
        env = fresh(env, seed)
    else:
        env.reset(seed)
    z = difficulty(seed)
    episode = SimEpisode(None, None, [], [])
    for turn in range(1, budget + 1):
        best = sorted(env.optimal_actions())
        others = [a for a in env.action_words if a not in best]
        if turn <= len(start):
            action = start[turn - 1]
        elif episode.optimal and not episode.optimal[-1] and rng.random() < policy.repeat:
            action = episode.actions[-1]  # a sticky error: the action that just failed, again
        else:
            q = policy.q(turn, episode.first_error is not None, z, budget - turn + 1, seed)
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


@dataclass(frozen=True)
class Context:
    """What a simulated policy's chance in a fixed state depends on (`context`)."""

    seed: int
    turn: int
    erred: bool  # an error is behind the state
    z: float  # the instance's difficulty draw
    left: int  # turns left
    forced: bool  # every action is optimal here
    after_error: bool  # the last action was an error (a sticky policy may repeat it)
    again: bool  # repeating the last action would be optimal


def context(task: str, seed: int, start: Sequence[str], budget: int) -> Context:
    """Replay the state after `start` once; `chance` then costs no replay per policy."""
    env = fresh(task, seed)
    optimal: list[bool] = []
    for action in start:
        optimal.append(action in env.optimal_actions())
        env.step(action)
    best = env.optimal_actions()
    return Context(
        seed=seed,
        turn=len(start) + 1,
        erred=not all(optimal),
        z=difficulty(seed),
        left=budget - len(start),
        forced=all(a in best for a in env.action_words),
        after_error=bool(optimal) and not optimal[-1],
        again=bool(start) and start[-1] in best,
    )


def chance(ctx: Context, policy: SimPolicy) -> float:
    """The exact chance that `policy` plays an optimal action next in the state of `ctx`."""
    if ctx.forced:
        return 1.0
    q = policy.q(ctx.turn, ctx.erred, ctx.z, ctx.left, ctx.seed)
    if ctx.after_error:  # a sticky repeat is optimal only if the last action is optimal now
        return policy.repeat * ctx.again + (1 - policy.repeat) * q
    return q


def episodes(
    task: str, seeds: Sequence[int], policy: SimPolicy, budget: int, n: int, stream: int = 0
) -> list[list[SimEpisode]]:
    """n episodes per instance; `stream` picks the dice (the same stream for every policy)."""
    return [
        [play(task, s, policy, budget, random.Random(f"{stream}/{s}/{j}")) for j in range(n)]
        for s in seeds
    ]


def successes(played: list[list[SimEpisode]], ts: Sequence[int]) -> dict[int, list[int]]:
    """Per T, each instance's number of episodes solved within T turns."""
    return {
        t: [sum(e.success_turn is not None and e.success_turn <= t for e in row) for row in played]
        for t in ts
    }


def wins(
    task: str, seeds: Sequence[int], policy: SimPolicy, ts: Sequence[int], n: int, stream: int = 0
) -> dict[int, list[int]]:
    """Per T, each instance's successes of n episodes: played once at the largest T and cut for
    a budget-blind policy; at every T separately for a budget-aware one."""
    if not policy.budget_aware:
        return successes(episodes(task, seeds, policy, max(ts), n, stream), ts)
    return {t: successes(episodes(task, seeds, policy, t, n, stream), [t])[t] for t in ts}


def curve(
    task: str, seeds: Sequence[int], policy: SimPolicy, ts: Sequence[int], n: int, stream: int = 0
) -> dict[int, float]:
    """Success rate at every T of `ts` (n episodes per instance)."""
    counts = wins(task, seeds, policy, ts, n, stream)
    return {t: sum(c) / (n * len(seeds)) for t, c in counts.items()}


# ---- results files from simulated checkpoints --------------------------------------------------


@dataclass
class SimStudy:
    """What `sim_results` builds: an evaluation's results, each arm's run labels, and per run
    the exact chance of an optimal next action in every fixed state (the statistics' truth)."""

    results: EvalResults
    arms: dict[str, list[str]] = field(default_factory=dict)
    truth: dict[str, dict[str, list[float]]] = field(default_factory=dict)


def _count(rng: random.Random, q: float, m: int) -> int:
    return sum(rng.random() < q for _ in range(m))


def _covariates(task: str, seed: int, start: Sequence[str]) -> dict:
    env = fresh(task, seed)
    for action in start:
        env.step(action)
    return {
        "turn": len(start) + 1,
        "distance": float(env.distance()),
        "optimal": len(env.optimal_actions()),
    }


def fixed_states(
    task: str,
    base: SimPolicy,
    seeds: list[int],
    horizon_t: int,
    *,
    fresh_states: int,
    post_states: int,
    state_episodes: int,
    recovery_horizon: int,
    matches: int,
    rng: random.Random,
    stream: int,
) -> tuple[list[dict], list[dict], list[dict], list[float], list[dict]]:
    """The fixed states, drawn from base episodes as minirl.compare draws them: random fresh
    states, post-error states at positions 1..recovery_horizon, and their matched fresh states;
    base's error rate per turn on each instance in these episodes (EvalMeta.base_error_rate);
    and the same-position pairs of their failed first errors (EvalMeta.position_pairs)."""
    played = episodes(task, seeds, base, horizon_t, state_episodes, stream=stream)
    pool, post = [], []
    for s, row in zip(seeds, played, strict=True):
        for e in row:
            clean = e.first_error - 1 if e.first_error else len(e.actions)
            pool += [(s, e.actions[:j]) for j in range(min(clean + 1, len(e.actions)))]
            for i in range(1, recovery_horizon + 1) if e.first_error else ():
                if e.first_error + i - 1 < len(e.actions):
                    post.append((s, e.actions[: e.first_error + i - 1], e.error_kind, i))
    fresh = rng.sample(pool, min(fresh_states, len(pool)))
    rng.shuffle(pool)
    pool_cov = [_covariates(task, s, a) for s, a in pool]
    post_cov = [_covariates(task, s, a) for s, a, _, _ in post]
    error_rate = hardness(
        {s: [ok for e in r for ok in e.optimal] for s, r in zip(seeds, played, strict=True)}
    )
    found = match(
        [(s, match_key(**c)) for (s, *_), c in zip(post, post_cov, strict=True)],
        [(s, match_key(**c)) for (s, _), c in zip(pool, pool_cov, strict=True)],
        matches,
        error_rate,
    )
    picks = pick(found, post_states, rng)
    chosen = sorted({i for k in picks for i in found[k]})
    index = {i: n for n, i in enumerate(chosen)}

    def state(s: int, a: list[str], cov: dict | None = None) -> dict:
        return {"seed": s, "replies": list(a), **(cov or _covariates(task, s, a))}

    decision = [state(s, a) for s, a in fresh]
    post_error = [
        state(post[k][0], post[k][1], post_cov[k])
        | {
            "kind": post[k][2] or "detour",
            "turns_left": horizon_t - len(post[k][1]),
            "after": post[k][3],
            "matches": [index[i] for i in found[k]],
        }
        for k in picks
    ]
    matched = [state(*pool[i], pool_cov[i]) for i in chosen]
    pairs = [
        pair
        for s, row in zip(seeds, played, strict=True)
        for e in row
        if (pair := _pair(task, s, e)) is not None
    ]
    return decision, post_error, matched, [error_rate[s] for s in seeds], pairs


def _pair(task: str, seed: int, e: SimEpisode) -> dict | None:
    """The episode's same-position pair, as minirl.eval.position.same_position_pairs finds a
    model's: a failed first error (not a detour) the episode played on from, after which the
    optimal actions and the distance are what they were, where not every action is optimal."""
    j = e.first_error
    if j is None or j >= len(e.actions) or e.error_kind == "detour":
        return None
    env = fresh(task, seed)
    for action in e.actions[: j - 1]:
        env.step(action)
    optimal, distance = set(env.optimal_actions()), env.distance()
    if optimal >= set(env.action_words):
        return None
    env.step(e.actions[j - 1])  # the failed action: the same position after it?
    if set(env.optimal_actions()) != optimal or env.distance() != distance:
        return None
    return {
        "seed": seed,
        "replies": list(e.actions[:j]),
        "error": e.actions[j - 1],
        "optimal": sorted(optimal),
    }


def sim_results(
    task: str,
    arms: dict[str, SimPolicy],
    *,
    runs: int = 5,
    seed_sd: float = 0.1,
    state_sd: float = STATE_SD,
    instances: int = 60,
    n: int = 4,
    ts: Sequence[int] = (2, 4, 8, 12),
    fresh_states: int = 200,
    post_states: int = 200,
    samples: int = 2,
    state_episodes: int = 8,
    recovery_horizon: int = 3,
    matches: int = 4,
    seed: int = 0,
    continuations: bool = True,
) -> SimStudy:
    """An evaluation of simulated checkpoints, shaped like minirl.compare's, at these sizes.

    `arms` maps "base" and each trained arm to its policy; a trained arm gets `runs` runs (its
    training seeds), each the arm's policy with its log-odds moved by N(0, seed_sd) uniformly,
    and by N(0, state_sd) drawn apart for each kind of state (instance, turn, error behind it or
    not): two real seeds differ state by state, not by one shift, yet on average the spread
    carries no skill. (A uniform shift alone would cancel exactly in the same-position test,
    whose chances are exact, and leave it no seed spread at all.) As in the real evaluation,
    the fixed states come from base episodes, once, and every run is asked in the same states;
    each run's episodes use their own dice, as two real checkpoints do. Without `continuations`
    no run plays on from the post-error states (success from them, descriptive only, is then
    missing).
    """
    rng = random.Random(f"sim/{task}/{seed}")
    seeds = list(tasks.EVAL_SEEDS[:instances])
    horizon = max(ts)
    decision, post, matched, error_rate, pairs = fixed_states(
        task,
        arms["base"],
        seeds,
        horizon,
        fresh_states=fresh_states,
        post_states=post_states,
        state_episodes=state_episodes,
        recovery_horizon=recovery_horizon,
        matches=matches,
        rng=rng,
        stream=-1 - seed,
    )
    contexts = {
        part: [context(task, s["seed"], s["replies"], horizon) for s in states]
        for part, states in (("fresh", decision), ("post", post), ("matched", matched))
    }
    # The same-position pairs: the state before the failed error, and the one just after it.
    contexts["pos_pre"] = [context(task, p["seed"], p["replies"][:-1], horizon) for p in pairs]
    contexts["pos_post"] = [context(task, p["seed"], p["replies"], horizon) for p in pairs]
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
        decision_states=decision,
        post_error_states=post,
        matched_states=matched,
        base_error_rate=error_rate,
        decision_samples=samples,
        position_pairs=pairs,
    )
    study = SimStudy(EvalResults(meta))
    for arm, policy in arms.items():
        labels = ["base"] if arm == "base" else [f"{arm}-s{r}" for r in range(runs)]
        if arm != "base":
            study.arms[arm] = labels
        for label in labels:
            run = policy
            if arm != "base":  # the run's noise is drawn apart from `rng`: the dice stay the same
                noise = {"state_sd": state_sd, "run": f"{seed}/{label}"}
                run = dataclasses.replace(policy.shift(rng.gauss(0.0, seed_sd)), **noise)
            stream = rng.randrange(1 << 30)
            played = episodes(task, seeds, run, horizon, n, stream=stream)
            won = wins(task, seeds, run, ts, n, stream) if run.budget_aware else None
            dice = random.Random(stream)
            truth = {part: [chance(c, run) for c in cs] for part, cs in contexts.items()}
            study.truth[label] = truth
            optimal = {
                part: [_count(dice, q, samples) for q in truth[part]]
                for part in ("fresh", "post", "matched")
            }
            cont = [
                [play(task, s["seed"], run, horizon, dice, s["replies"]) for _ in range(samples)]
                for s in (post if continuations else [])
            ]
            won = won or successes(played, ts)
            study.results.checkpoints[label] = _checkpoint(
                played, won, optimal, cont, post, samples
            )
            # Exact, as the real evaluation's scores of the pairs are (no sampling); P(repeat)
            # is not simulated.
            unknown = [math.nan] * len(pairs)
            study.results.checkpoints[label].analysis.position = PositionScores(
                truth["pos_pre"], truth["pos_post"], unknown, unknown
            )
    return study


def _checkpoint(
    played: list[list[SimEpisode]],
    wins: dict[int, list[int]],
    optimal: dict[str, list[int]],
    cont: list[list[SimEpisode]],
    post: list[dict],
    samples: int,
) -> CheckpointResult:
    flat = [e for row in played for e in row]
    instances = len(played)
    n = len(played[0]) if played else 1
    grid = []
    for t, c in wins.items():
        p = sum(c) / (n * instances or 1)
        grid.append(Cell(1, t, p, math.sqrt(p * (1 - p) / instances), p, p, instances))
    won = [e.success_turn is not None for e in flat]
    erred = [e.first_error is not None for e in flat]
    ok = [e.success_turn is not None for row in cont for e in row]
    kinds = [s["kind"] for s in post for _ in range(samples)] if cont else []

    def quality(counts: list[int]) -> DecisionQuality:
        trials = samples * len(counts)
        return DecisionQuality(
            Rate(sum(counts) / (trials or 1), trials), Rate(1.0, trials), list(counts)
        )

    return CheckpointResult(
        path=None,
        grid=grid,
        analysis=Analysis(
            decision=quality(optimal["fresh"]),
            # The first edition's descriptive measure, from each checkpoint's own episodes.
            recovery=Recovery(
                no_error=Rate.of([w for w, e in zip(won, erred, strict=True) if not e]),
                after_error=Rate.of([w for w, e in zip(won, erred, strict=True) if e]),
            ),
            horizon={},
            efficiency={},
            invalid_rate=0.0,
            from_errors=StateRecovery(
                optimal=Rate(
                    sum(optimal["post"]) / (samples * len(post) or 1), samples * len(post)
                ),
                success=Rate.of(ok),
                by_kind={
                    k: Rate.of([w for w, kk in zip(ok, kinds, strict=True) if kk == k])
                    for k in sorted(set(kinds))
                },
                optimal_counts=list(optimal["post"]),
                success_counts=[sum(ok[i : i + samples]) for i in range(0, len(ok), samples)],
            ),
            matched=quality(optimal["matched"]),
        ),
        seconds=0.0,
        successes=wins,
    )
