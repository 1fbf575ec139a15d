"""The paper's claims as statistics, with their uncertainties and two-sided verdict rules.

Every number comes from minirl.study.bootstrap (instances resampled once for all arms, each
arm's training runs read at the run level with Student's t); minirl.study.report writes the
sentence each rule chooses, never one written by hand. Each claim has one pre-registered test
per task and arm, two-sided: "shown" (positive) and "the opposite" (negative) are controlled
alike. The rules:

0. The gate. A task where RL did not move the policy cannot say what RL improves: if no arm's
   single-step gain (log-odds of an optimal action on the random fresh states, trained arm minus
   base) differs from 0 at ALPHA / arms, every test of the task is "not testable" and leaves the
   multiple-testing family. The base's recovery deficit is measured beside it (in the same
   position before and after a failed error, and against matched fresh states, log-odds):
   where it is ~0 there is nothing to recover from.
1. Budget dependence. gap(T) = Pass@(1,T)[arm] - Pass@(1,T)[base] grows with T for two reasons:
   a real need for turns, and plain compounding (a better single step is worth more over more
   turns). The null removes the second. Its simulated base (minirl.study.simulate) plays the
   real task with base's measured optimal rates per turn, fresh and after an error, on the
   easier and the harder half of the instances (by base's error rate per turn), repeats an error as
   often as base did beyond chance (`repeat_rate`), and has one log-odds level fitted so that
   its mean Pass@(1,T) over T is base's; the arm's null adds the arm's measured single-step
   gains per turn and half (on every fresh state, random and matched).
   null(T) = S(T; arm) - S(T; base), and
       growth = least-squares slope of (gap - null)(T) over every T, times (T_max - T_min).
   **The null must pass its own check** first: its simulated base must be within one standard
   error of base's real Pass@(1,T) at every T (the SE of the difference: base's bootstrap SE and
   the simulation's own); if not, the test is "not testable". The simulation's Monte-Carlo
   noise (SIM_STREAMS independent streams) is a part of the test's variance.
2. Where RL helps (recovery), in the same position. Each of base's failed first errors (a bump,
   "nothing happens", a reply that names no action) leaves the agent where it was, so the
   position just before the error and the one just after it differ only in the failed attempt
   the conversation shows, and in one turn (minirl.eval.position). Every checkpoint's chance of
   an optimal action in both is computed exactly. With D(s) the arm's log-odds minus base's in
   state s, per pair i
       recovery_i = [D(after_i) - D(before_i)] - [G(turn of after_i) - G(turn of before_i)]
   where G(b) is the arm's gain in the pairs' states before the error in turn bucket b, net of
   the instance (a fixed-effects fit, `turn_levels`), so a gain that depends on the turn alone
   (front-loaded, or read off the turns left) does not pass for recovery. The statistic
   is the mean over pairs. A policy whose gain depends only on where it is and when scores 0,
   whatever its size; one that has learned to act better after a failure than its base did
   scores above 0; one that loops more, below. The second edition's statistic,
   dlogit(post-error) - dlogit(fresh states matched on turn, distance and number of optimal
   actions), is kept beside it as a description, not a test: a post-error state is one where
   base has just erred, so one where it errs more than in a matched state, and that selection
   reads as a deficit even for a history-blind policy (lesson 7 measures it on the `tiny`
   control).
3. BudgetMix robustness, as the paper means it: at the budgets of BudgetMix's range, against
   the fixed arm that is best at each. First the fixed arms must specialise (the tight arm's
   lead over the generous one is larger at the range's smallest T than at its largest, at
   one-sided ALPHA); if not, there is no trade-off to be robust to, and the test is "not
   testable". Then: shown when BudgetMix leads the best fixed arm at *every* budget
   (intersection-union: p = the largest one-sided p), the opposite when it trails it at *some*
   budget (union: Bonferroni over the budgets); the test's p is twice the smaller, and its
   estimate is the lead at BudgetMix's worst budget. Where neither, the report gives the
   equivalence bound: BudgetMix is within +-bound of the best fixed arm at every budget of its
   range (each budget's 90% interval, two one-sided tests at 5%).
4. Process supervision: the process-reward arm against BudgetMix with outcome reward, on the
   mean Pass@(1,T) over T.

Every testable test of every task that passed the gate is one family for Holm's adjustment
(`adjust`): the chance of any false verdict, either way, in the report is at most 5%. Each test
also reports the smallest effect it could detect with 80% power at its adjusted level
(minirl.study.power.detectable).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import tasks
from minirl.eval.recovery import KINDS
from minirl.eval.results import EvalResults, load_results
from minirl.study import simulate
from minirl.study.bootstrap import (
    TURN_BUCKETS,
    Design,
    Estimate,
    Units,
    bucket,
    design,
    draws,
    empirical_logit,
    holm,
    measures,
    t_quantile,
    t_sf,
    units,
)
from minirl.study.power import detectable
from tasks.history import oracle_success

ALPHA = 0.05
REPLICATES = 2000
SIM_EPISODES = 16  # simulated episodes per instance of every null curve ...
SIM_STREAMS = 4  # ... in this many independent streams (their spread is the null's MC noise)
MIN_TRIALS = 60  # a turn bucket with fewer sampled replies pools with its later neighbours
MIN_PAIRS = 10  # a turn bucket with fewer same-position pairs pools with its earlier neighbour
PAIR_CLIP = 0.01  # exact chances are read in log-odds within [PAIR_CLIP, 1 - PAIR_CLIP]
BUMP = 0.5  # log-odds step of the null's sensitivity to the measured gain

Measures = dict[str, np.ndarray]


@dataclass
class Test:
    """One verdict: its statistic, two-sided p (Holm-adjusted by `adjust`), what it could see."""

    claim: str
    task: str
    arm: str
    estimate: Estimate
    untestable: str = ""  # why it cannot be tested ("" when it can): it leaves the family
    p_value: float | None = None  # a p of its own (robustness's), else the estimate's
    adjusted: float = math.nan
    detectable: float = math.nan  # smallest effect with 80% power at the adjusted level

    @property
    def p(self) -> float:
        return self.estimate.p if self.p_value is None else self.p_value

    @property
    def testable(self) -> bool:
        return not self.untestable

    @property
    def shown(self) -> bool:
        return self.testable and self.adjusted < ALPHA and self.estimate.value > 0

    @property
    def opposite(self) -> bool:
        return self.testable and self.adjusted < ALPHA and self.estimate.value < 0


@dataclass
class NullCheck:
    """The null's simulated base against base's real Pass@(1,T)."""

    level: float  # the fitted log-odds level
    model_base: dict[int, float]  # its Pass@(1,T)
    real: dict[int, Estimate]
    tolerance: dict[int, float]  # one SE of the difference at T
    passed: bool


@dataclass
class BudgetRow:
    gap: dict[int, Estimate]  # observed Pass@(1,T) gap against base
    null: dict[int, float]  # what the single-step gains alone buy at T
    excess: dict[int, Estimate]  # gap - null
    step_gain: Estimate  # single-step gain in log-odds on the fresh states
    gain_by_turn: list[float]  # the null's per-turn-bucket gains (TURN_BUCKETS)
    test: Test  # slope of (gap - null) over T, times the T range


@dataclass
class WhereRow:
    step: Estimate  # change of the optimal rate on the random fresh states
    post_step: Estimate  # ... on every post-error state
    post_success: Estimate  # change of success within the turns left, from post-error states
    by_kind: dict[str, Estimate]  # post_success change per kind of error
    matched_post: Estimate  # change of the optimal rate on the matched post-error states
    matched_fresh: Estimate  # ... on their matched fresh states
    matched: Estimate  # dlogit(post-error) - dlogit(matched fresh): described, not tested
    uncorrected: Estimate  # the same-position gain without the turn correction: described
    test: Test  # recovery in the same position: the arm's deficit there minus the base's


@dataclass
class RobustRow:
    specialisation: Estimate  # [tight - generous](T_lo) - [tight - generous](T_hi)
    leads: dict[int, Estimate]  # T -> BudgetMix minus the best fixed arm at T
    best: dict[int, str]  # T -> that arm
    bound: float  # equivalence bound: |lead| <= bound at every T of the range
    test: Test


@dataclass
class Gate:
    gains: dict[str, Estimate]  # arm -> single-step gain, log-odds, random fresh states
    moved: bool


@dataclass
class Deficit:
    """The base's recovery deficit: how much worse it acts after an error than in like states."""

    matched: Estimate  # logit(post-error) - logit(matched fresh), log-odds
    unmatched: Estimate  # logit(post-error) - logit(random fresh): the second edition's view
    post: Estimate  # base's optimal rate on the matched post-error states
    fresh: Estimate  # ... on their matched fresh states
    balance: dict[str, dict[str, float]]  # covariate means: post-error, matched, random fresh
    unmatched_states: int  # post-error states without a match (left out)
    same_instance: float  # share of matches from the post-error state's own instance
    position: Estimate  # logit(P(optimal) just after a failed first error) - logit(just before)
    pairs: int  # same-position pairs (minirl.eval.position)
    repeat: tuple[float, float]  # mean P(the failed action) before it failed, and just after


@dataclass
class TaskFindings:
    """Every claim's numbers and tests for one task."""

    results: EvalResults
    ceiling: dict[int, tuple[float, float]]  # T -> the oracle's success and its stderr
    pass1: dict[str, dict[int, Estimate]]  # arm (incl. base) -> T -> Pass@(1,T)
    rates: dict[str, dict[str, Estimate]]  # arm -> step / post_step / post_success / ...
    gate: Gate
    deficit: Deficit
    check: NullCheck | None
    budget: dict[str, BudgetRow]
    where: dict[str, WhereRow]
    robust: RobustRow | None
    process: Test | None = None
    kinds: dict[str, int] = field(default_factory=dict)  # post-error states per kind

    def tests(self) -> list[Test]:
        found = [r.test for r in self.budget.values()] + [r.test for r in self.where.values()]
        found += [self.robust.test] if self.robust else []
        return found + ([self.process] if self.process else [])


# ---- helpers ------------------------------------------------------------------------------------


def _logit(m: Measures, key: str, trials: float) -> np.ndarray:
    return empirical_logit(m[key], trials)


def pair_logits(u: Units) -> tuple[np.ndarray, np.ndarray]:
    """[P] log-odds of the exact chances before and after each pair's error, kept within
    [PAIR_CLIP, 1 - PAIR_CLIP]: one pair where a peaked model's chance nears 0 must not outweigh
    all the others (the clip is the same for every checkpoint, so equal chances stay equal)."""
    pre = np.clip(u.position_pre, PAIR_CLIP, 1 - PAIR_CLIP)
    post = np.clip(u.position_post, PAIR_CLIP, 1 - PAIR_CLIP)
    return np.log(pre / (1 - pre)), np.log(post / (1 - post))


def _pair_mean(x: np.ndarray, d: Design, w: np.ndarray) -> np.ndarray:
    """Per replicate, the mean of a per-pair value, every pair weighted by its instance's draw."""
    wp = w[:, d.pair_instance]
    with np.errstate(invalid="ignore", divide="ignore"):
        return (wp @ x) / wp.sum(axis=1)


def pair_buckets(d: Design) -> tuple[np.ndarray, np.ndarray]:
    """[P] the turn bucket of each pair's state before and after the error (TURN_BUCKETS), where
    a bucket with fewer than MIN_PAIRS states before an error pools with the nearest earlier one
    that has enough (the first buckets, with the first that has): the turn correction reads the
    arm's gain in each bucket from those states."""
    pre = np.array([bucket(t) for t in d.pair_turn], int)
    post = np.array([bucket(t + 1) for t in d.pair_turn], int)
    counts = np.bincount(pre, minlength=len(TURN_BUCKETS))
    enough = [k for k in range(len(TURN_BUCKETS)) if counts[k] >= MIN_PAIRS] or [0]
    remap = np.array(
        [max([e for e in enough if e <= k], default=enough[0]) for k in range(len(counts))]
    )
    return remap[pre], remap[post]


def position_deficit(u: Units, d: Design, w: np.ndarray) -> np.ndarray:
    """Per replicate, a checkpoint's deficit in the same position: the mean over the pairs of
    logit(P(optimal) just after the failed error) - logit(just before it)."""
    pre, post = pair_logits(u)
    return _pair_mean(post - pre, d, w)


def turn_levels(d_pre: np.ndarray, pre_bucket: np.ndarray, d: Design, w: np.ndarray) -> np.ndarray:
    """[B + 1, K] the arm's gain by turn bucket in the pairs' states before the error, net of
    the instance: per replicate, the weighted least squares fit of

        D(before_i) = a_(instance of i) + g(bucket of i)          (g = 0 in the first bucket)

    An instance's own level a takes out gains that differ by instance (a gain on hard instances
    only), which a plain mean per bucket would mix into g wherever the buckets hold the hard
    instances in unequal shares. Every pair of an instance has its instance's weight, so the
    fit is that of the within-instance deviations (Frisch-Waugh), the same for every replicate:
    only the small K x K normal equations are solved per replicate.
    """
    levels = sorted(set(pre_bucket.tolist()))
    out = np.zeros((w.shape[0], len(TURN_BUCKETS)))
    if len(levels) < 2:
        return out
    x = (pre_bucket[:, None] == np.array(levels[1:])[None, :]).astype(float)  # [P, K - 1]
    y = d_pre.copy()
    for i in set(d.pair_instance.tolist()):  # within-instance deviations
        mine = d.pair_instance == i
        x[mine] -= x[mine].mean(axis=0)
        y[mine] -= y[mine].mean()
    wp = w[:, d.pair_instance]  # [B + 1, P]
    xtx = np.einsum("bp,pk,pl->bkl", wp, x, x)
    xty = np.einsum("bp,pk,p->bk", wp, x, y)
    ridge = 1e-9 * np.eye(len(levels) - 1)  # a bucket a replicate left empty reads 0, not NaN
    out[:, levels[1:]] = np.linalg.solve(xtx + ridge, xty[..., None])[..., 0]
    return out


def position_gain(
    arm: Units, base: Units, d: Design, w: np.ndarray, by_turn: bool = True
) -> np.ndarray:
    """Per replicate, the arm's recovery gain in the same position (claim 2), turn-corrected:

        mean_i [(D_after_i - D_before_i) - (g(b_after_i) - g(b_before_i))],

    D the arm's log-odds minus base's in a pair's state, b a state's turn bucket, and g the
    arm's gain by turn bucket in the states before the errors, net of the instance
    (`turn_levels`). The state after an error is one turn later than the one before it, so a
    gain that depends on the turn alone (front-loaded, or read off the turns left) would differ
    between them without any skill at recovery; g takes it out. `by_turn=False` leaves g out:
    the report shows that reading too (less noisy, as g is fitted, but not free of the turn).
    """
    a_pre, a_post = pair_logits(arm)
    b_pre, b_post = pair_logits(base)
    d_pre, d_post = a_pre - b_pre, a_post - b_post
    pre_bucket, post_bucket = pair_buckets(d)
    shift: np.ndarray | float = 0.0
    if by_turn:
        g = turn_levels(d_pre, pre_bucket, d, w)
        shift = g[:, post_bucket] - g[:, pre_bucket]  # [B + 1, P]
    wp = w[:, d.pair_instance]
    with np.errstate(invalid="ignore", divide="ignore"):
        return (wp * (d_post - d_pre - shift)).sum(axis=1) / wp.sum(axis=1)


def _runs(
    arm: list[Measures], key: str, base: Measures | None = None, instances: int = 0
) -> Estimate:
    """An arm's mean of m[key] over its runs, minus base's."""
    minus = base[key] if base is not None else 0.0
    return Estimate.of_runs([m[key] - minus for m in arm], instances=instances)


def slope(values: dict[int, np.ndarray]) -> np.ndarray:
    """Least-squares slope over T of values[T] (arrays alike), times (T_max - T_min)."""
    ts = np.array(sorted(values), float)
    centred = ts - ts.mean()
    total = sum(c * values[int(t)] for c, t in zip(centred, ts, strict=True))
    return total / (centred**2).sum() * (ts[-1] - ts[0])


def _trials(d: Design, where: np.ndarray) -> float:
    return d.m * max(int(where.sum()), 1)


def _states(d: Design, key: str) -> int:
    """How many fixed states a measure key (`step@3+/hard`, `post@1`, ...) is a rate over."""
    head, _, cls = key.partition("/")
    prefix, _, k = head.partition("@")
    if prefix == "step":
        buckets = np.concatenate([d.fresh_bucket, d.matched_bucket])
        hard = d.harder[np.concatenate([d.fresh_instance, d.matched_instance])]
    else:
        buckets, hard = d.post_bucket, d.harder[d.post_instance]
    j = int(k.rstrip("+"))
    which = buckets >= j if k.endswith("+") else buckets == j
    if cls:
        which &= hard if cls == "hard" else ~hard
    return int(which.sum())


def bucket_keys(d: Design, prefix: str, cls: str = "") -> list[str]:
    """Per turn bucket, the measure to read: the bucket's own (`step@k`, `post@k`; `/easy` or
    `/hard` for one half of the instances), or, where it holds fewer than MIN_TRIALS replies,
    the pool of the latest bucket j <= k from which on there are enough (`step@j+`), so a thin
    late bucket borrows from its neighbours; a half too thin even then reads both halves."""
    tail = f"/{cls}" if cls else ""
    if cls and d.m * _states(d, f"{prefix}@0+{tail}") < MIN_TRIALS:
        return bucket_keys(d, prefix)
    keys = []
    for k in range(len(TURN_BUCKETS)):
        if d.m * _states(d, f"{prefix}@{k}{tail}") >= MIN_TRIALS:
            keys.append(f"{prefix}@{k}{tail}")
            continue
        enough = [j for j in range(k + 1) if d.m * _states(d, f"{prefix}@{j}+{tail}") >= MIN_TRIALS]
        keys.append(f"{prefix}@{max(enough or [0])}+{tail}")
    return keys


def bucket_gain(m: Measures, base: Measures, d: Design, key: str) -> float:
    """A run's single-step gain in log-odds on the fresh states of one bucket key (point)."""
    trials = d.m * max(_states(d, key), 1)
    return float(_logit(m, key, trials)[0] - _logit(base, key, trials)[0])


def per_turn(values: list[float]) -> tuple[float, ...]:
    """Per-bucket values spread over turns 1.. (the last entry repeats for every later turn)."""
    last = TURN_BUCKETS[-1][0]
    return tuple(
        values[next(k for k, (lo, hi) in enumerate(TURN_BUCKETS) if lo <= t <= hi)]
        for t in range(1, last + 1)
    )


# ---- 0. the gate and the deficit ----------------------------------------------------------------


def gate(d: Design, base: Measures, arms: dict[str, list[Measures]]) -> Gate:
    trials = _trials(d, np.ones(len(d.fresh_instance), bool))
    gains = {
        arm: Estimate.of_runs(
            [_logit(m, "step", trials) - _logit(base, "step", trials) for m in runs],
            instances=d.instances,
        )
        for arm, runs in arms.items()
    }
    level = ALPHA / max(len(gains), 1)
    return Gate(gains, any(g.p < level for g in gains.values()))


def deficit(
    results: EvalResults, d: Design, base: Measures, base_units: Units, w: np.ndarray
) -> Deficit:
    meta = results.meta
    post, fresh = meta.post_error_states, meta.decision_states
    t_pair = _trials(d, d.matched)
    t_post = _trials(d, np.ones(len(d.post_kind), bool))
    t_fresh = _trials(d, np.ones(len(d.fresh_instance), bool))

    def means(states: list[dict], weights: list[float] | None = None) -> dict[str, float]:
        w = np.array(weights if weights is not None else [1.0] * len(states))
        return {
            k: float(np.average([s[k] for s in states], weights=w)) if states else math.nan
            for k in ("turn", "distance", "optimal")
        }

    paired = [s for s in post if s.get("matches")]
    matched = [meta.matched_states[i] for s in paired for i in s["matches"]]
    weights = [1 / len(s["matches"]) for s in paired for _ in s["matches"]]
    same = [meta.matched_states[i]["seed"] == s["seed"] for s in paired for i in s["matches"]]
    covariates = all("distance" in s for s in post + fresh)
    scores = results.checkpoints["base"].analysis.position
    repeats = (
        [(a, b) for a, b in zip(scores.repeat_pre, scores.repeat_post, strict=True) if a == a]
        if scores
        else []
    )
    return Deficit(
        matched=Estimate.of_runs(
            [_logit(base, "post_m", t_pair) - _logit(base, "matched", t_pair)],
            instances=d.instances,
        ),
        unmatched=Estimate.of_runs(
            [_logit(base, "post_step", t_post) - _logit(base, "step", t_fresh)],
            instances=d.instances,
        ),
        post=Estimate.of_runs([base["post_m"]], instances=d.instances),
        fresh=Estimate.of_runs([base["matched"]], instances=d.instances),
        balance={
            "post-error": means(paired),
            "matched fresh": means(matched, weights),
            "random fresh": means(fresh),
        }
        if covariates
        else {},
        unmatched_states=len(post) - len(paired),
        same_instance=float(np.average(same, weights=weights)) if same else math.nan,
        position=Estimate.of_runs([position_deficit(base_units, d, w)], instances=d.instances)
        if base_units.position_pre.size == d.pair_instance.size
        else Estimate.nan(),
        pairs=len(meta.position_pairs),
        repeat=(
            float(np.mean([a for a, _ in repeats])) if repeats else math.nan,
            float(np.mean([b for _, b in repeats])) if repeats else math.nan,
        ),
    )


# ---- 1. budget dependence -----------------------------------------------------------------------


def _streams(task: str, seeds: list[int], policy: simulate.SimPolicy, ts: list[int]) -> np.ndarray:
    """[SIM_STREAMS, T]: the policy's success per T in independent streams (the same dice for
    every policy: common random numbers)."""
    per = max(SIM_EPISODES // SIM_STREAMS, 1)
    return np.array(
        [
            list(simulate.curve(task, seeds, policy, ts, per, stream=10_000 + s).values())
            for s in range(SIM_STREAMS)
        ]
    )


def calibrate(
    task: str, seeds: list[int], policy: simulate.SimPolicy, ts: list[int], real: np.ndarray
) -> tuple[float, np.ndarray]:
    """The log-odds level c for which the policy's mean success over T equals real's (secant
    steps on a curve that rises with c), and its streams at c."""

    def gap(c: float) -> tuple[float, np.ndarray]:
        streams = _streams(task, seeds, policy.shift(c), ts)
        return float(streams.mean() - real.mean()), streams

    a, (fa, sa) = 0.0, gap(0.0)
    b, (fb, sb) = 0.5 if fa < 0 else -0.5, gap(0.5 if fa < 0 else -0.5)
    for _ in range(3):
        if abs(fb) < 1e-3 or fb == fa:
            break
        c = float(np.clip(b - fb * (b - a) / (fb - fa), -4.0, 4.0))
        a, fa, sa = b, fb, sb
        b, (fb, sb) = c, gap(c)
    return (b, sb) if abs(fb) <= abs(fa) else (a, sa)


def repeat_rate(task: str, d: Design, base: Measures) -> tuple[float, dict[str, float]]:
    """How often the base repeats an error, beyond chance, and per bucket key of post-error
    states the share that follow an error directly (position 1): the null's sticky errors.

    At position 2 the state's last reply is the base's own action after its first error; it
    repeats the error with chance r + (1 - r) c under the null's model, c the chance that a
    uniform non-optimal draw picks it again, (1 - q) / (actions - optimal). So r = (share - c) /
    (1 - c), clipped to [0, 1]. A post-error state right after an error is optimal with chance
    (1 - r) q, so the null's per-turn q is the measured rate over 1 - r * (that share).
    """
    second = d.post_after == 2
    if second.sum() < 10:
        return 0.0, {}
    words = len(tasks.make(task).action_words)
    q = float(base["post_step"][0]) if not math.isnan(base["post_step"][0]) else 0.5
    others = max(words - float(d.post_optimal_n[second].mean()), 1.0)
    c = (1 - q) / others
    share = float(d.post_repeat[second].mean())
    r = min(max((share - c) / (1 - c), 0.0), 1.0)
    after = {}
    for k in bucket_keys(d, "post"):
        j = int(k.split("@")[1].rstrip("+"))
        here = d.post_bucket >= j if k.endswith("+") else d.post_bucket == j
        after[k] = float((d.post_after[here] == 1).mean()) if here.any() else 0.0
    return r, after


def budget_rows(
    task: str,
    d: Design,
    base: Measures,
    arms: dict[str, list[Measures]],
    seeds: list[int],
) -> tuple[dict[str, BudgetRow], NullCheck]:
    """The null's check, then gap, null and the excess's growth for every arm (claim 1)."""
    t_fresh = _trials(d, np.ones(len(d.fresh_instance), bool))
    # The null's base: per turn bucket, on the easier and the harder half of the instances,
    # base's optimal rate in fresh and in post-error states (the harder half as an offset).
    repeat, after_error = repeat_rate(task, d, base)
    levels = {}
    for cls in ("easy", "hard"):
        fresh_keys = bucket_keys(d, "step", cls)
        post_keys = bucket_keys(d, "post", cls) if len(d.post_bucket) else fresh_keys
        post_rates = [
            float(base[k][0]) / (1 - repeat * after_error.get(k.partition("/")[0], 0.0))
            for k in post_keys
        ]
        levels[cls] = (
            fresh_keys,
            [simulate.logit(float(base[k][0])) for k in fresh_keys],
            [simulate.logit(min(r, 0.999)) for r in post_rates],
        )
    seeds_harder = frozenset(s for s, h in zip(seeds, d.harder, strict=True) if h)
    model = simulate.SimPolicy(
        0.5,
        0.5,
        turn_fresh=per_turn(levels["easy"][1]),
        turn_post=per_turn(levels["easy"][2]),
        harder=seeds_harder,
        turn_harder=per_turn(
            [h - e for h, e in zip(levels["hard"][1], levels["easy"][1], strict=True)]
        ),
        repeat=repeat,
    )
    real = np.array([base[f"pass1@{t}"][0] for t in d.ts])
    level, base_streams = calibrate(task, seeds, model, d.ts, real)
    model = model.shift(level)
    real_est = {t: Estimate.of_runs([base[f"pass1@{t}"]], instances=d.instances) for t in d.ts}
    mc = base_streams.var(axis=0, ddof=1) / SIM_STREAMS
    tolerance = {t: math.sqrt(real_est[t].se ** 2 + mc[i]) for i, t in enumerate(d.ts)}
    model_base = dict(zip(d.ts, base_streams.mean(axis=0).tolist(), strict=True))
    check = NullCheck(
        level=level,
        model_base=model_base,
        real=real_est,
        tolerance=tolerance,
        passed=all(abs(model_base[t] - real_est[t].value) <= tolerance[t] for t in d.ts),
    )
    missed = [t for t in d.ts if abs(model_base[t] - real_est[t].value) > tolerance[t]]
    why = (
        "the null's simulated base misses base's real Pass@(1,T) by more than one standard "
        f"error at T = {', '.join(map(str, missed))}"
        if missed
        else ""
    )
    rows = {}
    for arm, runs in arms.items():
        gain_runs = [_logit(m, "step", t_fresh) - _logit(base, "step", t_fresh) for m in runs]
        gains = {
            cls: [float(np.mean([bucket_gain(m, base, d, k) for m in runs])) for k in keys]
            for cls, (keys, _, _) in levels.items()
        }
        easy, hard = per_turn(gains["easy"]), per_turn(gains["hard"])
        shifted = dataclasses.replace(  # the calibrated base, sticky errors and all, plus gains
            model,
            turn_fresh=tuple(a + g for a, g in zip(model.turn_fresh, easy, strict=True)),
            turn_post=tuple(a + g for a, g in zip(model.turn_post, easy, strict=True)),
            turn_harder=tuple(
                a + h - e for a, h, e in zip(model.turn_harder, hard, easy, strict=True)
            ),
        )
        arm_streams = _streams(task, seeds, shifted, d.ts)
        bumped = _streams(task, seeds, shifted.shift(BUMP), d.ts).mean(axis=0)
        null_streams = arm_streams - base_streams  # [S, T], common random numbers
        null = null_streams.mean(axis=0)
        sensitivity = (bumped - arm_streams.mean(axis=0)) / BUMP
        mean_gain = float(np.mean([g[0] for g in gain_runs]))
        growth, excess_runs = [], {t: [] for t in d.ts}
        for m, g in zip(runs, gain_runs, strict=True):
            excess = {
                t: m[f"pass1@{t}"] - base[f"pass1@{t}"] - null[i] - sensitivity[i] * (g - mean_gain)
                for i, t in enumerate(d.ts)
            }
            growth.append(slope(excess))
            for t in d.ts:
                excess_runs[t].append(excess[t])
        mc_growth = slope({t: null_streams[:, i] for i, t in enumerate(d.ts)})
        rows[arm] = BudgetRow(
            gap={t: _runs(runs, f"pass1@{t}", base, d.instances) for t in d.ts},
            null=dict(zip(d.ts, null.tolist(), strict=True)),
            excess={t: Estimate.of_runs(v, instances=d.instances) for t, v in excess_runs.items()},
            step_gain=Estimate.of_runs(gain_runs, instances=d.instances),
            gain_by_turn=[
                float(np.mean([bucket_gain(m, base, d, k) for m in runs]))
                for k in bucket_keys(d, "step")
            ],
            test=Test(
                "budget dependence",
                task,
                arm,
                Estimate.of_runs(
                    growth,
                    extra=(float(mc_growth.var(ddof=1)) / SIM_STREAMS, SIM_STREAMS - 1),
                    instances=d.instances,
                ),
                untestable=why,
            ),
        )
    return rows, check


# ---- 2. where RL helps --------------------------------------------------------------------------


def where_rows(
    task: str,
    d: Design,
    base: Measures,
    arms: dict[str, list[Measures]],
    by_kind: dict[str, tuple[Measures, dict[str, list[Measures]]]],
    per_run: dict[str, list[Units]],
    w: np.ndarray,
) -> dict[str, WhereRow]:
    """Single-step and post-error changes, and the same-position recovery test (claim 2)."""
    t_pair = _trials(d, d.matched)
    no_pairs = "" if d.pair_instance.size else "no failed first error of base to pair"
    base_units = per_run["base"][0]
    if not no_pairs and any(
        u.position_pre.size != d.pair_instance.size for us in per_run.values() for u in us
    ):
        no_pairs = "these results hold no same-position scores (evaluated before they existed)"
    rows = {}
    for arm, runs in arms.items():
        nan = [np.full(w.shape[0], math.nan)]
        gains = [position_gain(u, base_units, d, w) for u in per_run[arm]] if not no_pairs else nan
        raw = (
            [position_gain(u, base_units, d, w, by_turn=False) for u in per_run[arm]]
            if not no_pairs
            else nan
        )
        matched = [
            _logit(m, "post_m", t_pair)
            - _logit(base, "post_m", t_pair)
            - (_logit(m, "matched", t_pair) - _logit(base, "matched", t_pair))
            for m in runs
        ]
        rows[arm] = WhereRow(
            step=_runs(runs, "step", base, d.instances),
            post_step=_runs(runs, "post_step", base, d.instances),
            post_success=_runs(runs, "post_success", base, d.instances),
            by_kind={
                kind: _runs(arm_k[arm], "post_success", base_k, d.instances)
                for kind, (base_k, arm_k) in by_kind.items()
            },
            matched_post=_runs(runs, "post_m", base, d.instances),
            matched_fresh=_runs(runs, "matched", base, d.instances),
            matched=Estimate.of_runs(matched, instances=d.instances),
            uncorrected=Estimate.of_runs(raw, instances=d.instances),
            test=Test(
                "recovery",
                task,
                arm,
                Estimate.of_runs(gains, instances=d.instances),
                untestable=no_pairs,
            ),
        )
    return rows


# ---- 3. robustness, 4. process supervision ------------------------------------------------------


def fixed_budget(arm: str) -> int | None:
    """The training budget in a fixed arm's name ("fixed-T12" -> 12), else None."""
    head, _, budget = arm.partition("-T")
    return int(budget) if head == "fixed" and budget.isdigit() else None


def robust_row(
    task: str, d: Design, arms: dict[str, list[Measures]], mix_range: tuple[int, int] | None
) -> RobustRow | None:
    """BudgetMix at its worst budget against the best fixed arm there (claim 3)."""
    fixed = sorted((fixed_budget(a), a) for a in arms if fixed_budget(a) is not None)
    if "budgetmix" not in arms or len(fixed) < 2:
        return None
    lo, hi = mix_range or (fixed[0][0], fixed[-1][0])
    ts = [t for t in d.ts if lo <= t <= hi] or list(d.ts)
    tight, generous = arms[fixed[0][1]], arms[fixed[-1][1]]

    def spread(runs: list[Measures]) -> list[np.ndarray]:
        return [m[f"pass1@{ts[0]}"] - m[f"pass1@{ts[-1]}"] for m in runs]

    special = Estimate.of_runs(spread(tight), against=spread(generous), instances=d.instances)
    one_sided = t_sf(special.value / special.se, special.df) if special.se > 0 else 1.0
    mean = {a: {t: float(np.mean([m[f"pass1@{t}"][0] for m in arms[a]])) for t in ts} for a in arms}
    best = {t: max((a for _, a in fixed), key=lambda a, t=t: mean[a][t]) for t in ts}
    mix = arms["budgetmix"]
    leads = {
        t: Estimate.of_runs(
            [m[f"pass1@{t}"] for m in mix],
            against=[m[f"pass1@{t}"] for m in arms[best[t]]],
            instances=d.instances,
        )
        for t in ts
    }
    up = [t_sf(e.value / e.se, e.df) if e.se > 0 else float(e.value <= 0) for e in leads.values()]
    down = [
        t_sf(-e.value / e.se, e.df) if e.se > 0 else float(e.value >= 0) for e in leads.values()
    ]
    p = min(1.0, 2 * min(max(up), min(1.0, len(ts) * min(down))))
    worst = min(ts, key=lambda t: leads[t].value)
    bound = max(
        abs(e.value) + (t_quantile(0.95, e.df) * e.se if e.se > 0 else 0.0) for e in leads.values()
    )
    why = (
        ""
        if one_sided < ALPHA and special.value > 0
        else "the fixed arms do not specialise (the tight arm's lead over the generous one is "
        f"not larger at T={ts[0]} than at T={ts[-1]}), so there is no trade-off to be robust to"
    )
    test = Test("robustness", task, "budgetmix vs best fixed", leads[worst], why, p_value=p)
    return RobustRow(special, leads, best, bound, test)


def process_test(task: str, d: Design, arms: dict[str, list[Measures]]) -> Test | None:
    """The process-reward arm against BudgetMix: mean Pass@(1,T) over T, two-sided (claim 4)."""
    if "process" not in arms or "budgetmix" not in arms:
        return None

    def mean_pass(runs: list[Measures]) -> list[np.ndarray]:
        return [np.mean([m[f"pass1@{t}"] for t in d.ts], axis=0) for m in runs]

    lead = Estimate.of_runs(
        mean_pass(arms["process"]), against=mean_pass(arms["budgetmix"]), instances=d.instances
    )
    return Test("process supervision", task, "process vs budgetmix", lead)


# ---- one task, and the whole study -------------------------------------------------------------


def analyse_results(
    task: str,
    results: EvalResults,
    arms: dict[str, list[str]],
    replicates: int = REPLICATES,
    seed: int = 0,
    mix_range: tuple[int, int] | None = None,
    budget: bool = True,
) -> TaskFindings:
    """Every claim's numbers and (unadjusted) tests for one task; `adjust` finishes them.

    `mix_range` is BudgetMix's training range (default: the fixed arms' budgets); `budget=False`
    skips claim 1 (its null simulates for seconds), for checks of the other rules.
    """
    d = design(results)
    w = draws(d.instances, replicates, seed)
    per_run = {"base": [units(results.checkpoints["base"])]}
    per_run |= {
        arm: [units(results.checkpoints[label]) for label in labels] for arm, labels in arms.items()
    }
    measured = {a: [measures(u, d, w) for u in us] for a, us in per_run.items()}
    kinds = sorted(set(d.post_kind), key=KINDS.index)
    by_kind = {
        k: (
            measures(per_run["base"][0], d, w, kind=k),
            {
                a: [measures(u, d, w, kind=k) for u in us]
                for a, us in per_run.items()
                if a != "base"
            },
        )
        for k in kinds
    }
    base = measured["base"][0]
    trained = {a: m for a, m in measured.items() if a != "base"}
    main = {a: m for a, m in trained.items() if a != "process"}
    seeds = list(results.meta.seeds)
    rows, check = budget_rows(task, d, base, main, seeds) if budget else ({}, None)
    return TaskFindings(
        results=results,
        ceiling={t: oracle_success(task, t, seeds) for t in d.ts},
        pass1={
            a: {t: _runs(m, f"pass1@{t}", instances=d.instances) for t in d.ts}
            for a, m in measured.items()
        },
        rates={
            a: {
                k: _runs(m, k, instances=d.instances)
                for k in ("step", "post_step", "post_success", "post_m", "matched")
            }
            for a, m in measured.items()
        },
        gate=gate(d, base, trained),
        deficit=deficit(results, d, base, per_run["base"][0], w),
        check=check,
        budget=rows,
        where=where_rows(task, d, base, trained, by_kind, per_run, w),
        robust=robust_row(task, d, main, mix_range),
        process=process_test(task, d, trained),
        kinds={k: d.post_kind.count(k) for k in kinds},
    )


def adjust(found: dict[str, TaskFindings]) -> list[Test]:
    """Holm-adjust every testable test of the tasks that passed the gate, as one family; mark
    the others not testable; set what each could have detected. Returns the family."""
    for f in found.values():
        if not f.gate.moved:
            for test in f.tests():
                test.untestable = test.untestable or (
                    "RL did not move the policy on this task (no arm's single-step gain "
                    "differs from 0)"
                )
    tests = [t for f in found.values() for t in f.tests()]
    family = [t for t in tests if t.testable and not math.isnan(t.p)]
    for test, p in zip(family, holm([t.p for t in family]), strict=True):
        test.adjusted = p
    for test in tests:
        test.detectable = detectable(test.estimate.se, max(len(family), 1), df=test.estimate.df)
    return family


def analyse(
    task: str,
    results_path: Path,
    arms: dict[str, list[str]],
    mix_range: tuple[int, int] | None = None,
    budget: bool = True,
) -> TaskFindings:
    """One task of a study on disk (call `adjust` over all tasks before reading verdicts)."""
    results = load_results(results_path)
    return analyse_results(task, results, arms, mix_range=mix_range, budget=budget)


def base_deficit(results_path: Path, replicates: int = REPLICATES) -> Deficit:
    """The recovery deficit of the base evaluated in a results file (section 0 of the report)."""
    results = load_results(results_path)
    d = design(results)
    w = draws(d.instances, replicates)
    base_units = units(results.checkpoints["base"])
    return deficit(results, d, measures(base_units, d, w), base_units, w)


def signed(x: float, se: float | None = None) -> str:
    if math.isnan(x):
        return "n/a"
    return f"{x:+.3f}" if se is None or math.isnan(se) else f"{x:+.3f} ± {se:.3f}"
