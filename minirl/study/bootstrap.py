"""The uncertainty behind every verdict of the study: an instance bootstrap and run-level t tests.

What the arms share, and what varies:
- Every arm is evaluated on the same held-out instances, and asked in the same fixed states
  (fresh, post-error and matched fresh), which belong to instances. Differences between arms are
  therefore *paired*: an instance that is hard for base is hard for the RL arm too, and
  resampling the instances once per replicate, for all arms together, keeps that pairing.
- Episodes of one instance, and states drawn from one instance, are not independent of each
  other, so the unit of resampling is the instance (a *cluster*): a replicate draws I instances
  with replacement and takes every episode and state of each, as many times as it was drawn.
- A trained arm is R runs, one per training seed. Each run gets its own statistic (its gap, its
  recovery, ...), and the arm's estimate is their mean. Runs are few (five by default), so their
  spread is read at the run level with Student's t, not by resampling five numbers.

A replicate is a weight vector w over instances (how often each was drawn). A run's rate under w
is sum_i w_i x_i / sum_i w_i m_i (x successes of m trials in the instance's episodes or states);
replicate 0 is the point estimate (all weights 1). For a statistic with per-run values s_r (each
an array over the replicates), `Estimate.of_runs` combines two independent parts,

    var = var_w(mean_r s_r)            the instances: which ones the evaluation happened to draw
        + var_r(s_r[0]) / R            the runs: seed-to-seed spread (each arm compared)
        + extra                        e.g. the null's own Monte-Carlo noise,

(the runs share the instances, so their spread around their mean is free of the first part), and
tests value / sqrt(var) two-sided against Student's t with the Welch-Satterthwaite degrees of
freedom, df = var^2 / sum_k (v_k^2 / df_k), each part with its own (I - 1, R - 1, ...).

Why by hand: scipy.stats.bootstrap resamples one flat sample; it has no clusters, no pairing of
several statistics through shared draws, and no run level. Student's t distribution is written
here too (a continued fraction for the incomplete beta function) rather than adding scipy for two
functions; tests/test_study_bootstrap.py checks it against printed tables.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from minirl.eval.results import CheckpointResult, EvalResults

# Turn buckets of the null's per-turn calibration and of the arms' per-turn gains: turn 1, 2, 3,
# 4-5 and 6 on. Later turns are pooled because few fresh states reach them.
TURN_BUCKETS: tuple[tuple[int, int], ...] = ((1, 1), (2, 2), (3, 3), (4, 5), (6, 99))


def bucket(turn: int) -> int:
    return next(k for k, (lo, hi) in enumerate(TURN_BUCKETS) if lo <= turn <= hi)


@dataclass
class Units:
    """One run's counts per unit: the instances' episodes and the fixed states."""

    successes: dict[int, np.ndarray]  # T -> [I] successes of n episodes
    fresh: np.ndarray  # [S_f] optimal replies of m, fresh states
    post_optimal: np.ndarray  # [S_p] optimal next replies of m, post-error states
    post_success: np.ndarray  # [S_p] continuations of m that succeeded (may be empty)
    matched: np.ndarray  # [S_m] optimal replies of m, fresh states matched to post-error ones
    # [P] exact P(optimal) before each same-position pair's failed error, and just after it
    position_pre: np.ndarray = field(default_factory=lambda: np.zeros(0))
    position_post: np.ndarray = field(default_factory=lambda: np.zeros(0))


@dataclass
class Design:
    """What every run shares: the instances, and the instance and turn of each fixed state."""

    n: int  # episodes per instance and T
    m: int  # samples per state
    ts: list[int]
    instances: int
    fresh_instance: np.ndarray  # [S_f] index of the state's instance
    post_instance: np.ndarray  # [S_p]
    post_kind: list[str]
    fresh_bucket: np.ndarray  # [S_f] turn bucket
    post_bucket: np.ndarray  # [S_p]
    post_after: np.ndarray  # [S_p] actions since the first error (1 = just after it)
    matched: np.ndarray  # [S_p] bool: the post-error state has matched fresh states
    matched_instance: np.ndarray  # [S_m]
    matched_bucket: np.ndarray  # [S_m]
    post_repeat: np.ndarray  # [S_p] bool: at position 2, the base repeated its first error
    post_optimal_n: np.ndarray  # [S_p] optimal actions in the state
    harder: np.ndarray  # [I] bool: the harder half of the instances for base (`harder_half`)
    pairs: np.ndarray  # [S_p, S_m]: 1 / |matches of p| where f is one of them, else 0
    # [P] the instance of each same-position pair (minirl.eval.position), and the turn of the
    # state before its failed error (the state after it is one turn later)
    pair_instance: np.ndarray = field(default_factory=lambda: np.zeros(0, int))
    pair_turn: np.ndarray = field(default_factory=lambda: np.zeros(0, int))


def harder_half(results: EvalResults) -> np.ndarray:
    """[I] bool: the instances on which base errs more often than on the median one.

    By base's share of non-optimal actions per turn in the fixed states' episodes
    (EvalMeta.base_error_rate: 30 to 60 turns an instance), not by its successes at the largest T
    (4 episodes, 5 outcomes): a noisy split puts many hard instances in the easier half, and an
    arm whose gain is confined to hard instances then shows a gain on "easy" ones that the budget
    null turns into budget dependence (measured on simulated studies, lesson 7). Files written
    before the error rates were kept fall back to the successes.
    """
    meta = results.meta
    rates = meta.base_error_rate
    if len(rates) == len(meta.seeds) and all(isinstance(r, (int, float)) for r in rates):
        errs = np.array(rates, float)
        if np.isfinite(errs).all():
            return errs > np.median(errs)
    base = results.checkpoints.get("base")
    wins = np.array(base.successes.get(max(meta.ts), []) if base else [], float)
    if wins.size != len(meta.seeds):
        return np.zeros(len(meta.seeds), bool)
    return wins < np.median(wins)


def design(results: EvalResults) -> Design:
    meta = results.meta
    index = {s: i for i, s in enumerate(meta.seeds)}
    for p in meta.position_pairs:
        good = isinstance(p, dict) and p.get("seed") in index
        if not good or not isinstance(p.get("replies"), list) or not p["replies"]:
            raise ValueError(f"results.json: the same-position pair {p!r:.80} is not one")
    post = meta.post_error_states
    pairs = np.zeros((len(post), len(meta.matched_states)))
    for p, state in enumerate(post):
        for f in state.get("matches", []):
            pairs[p, f] = 1 / len(state["matches"])
    return Design(
        n=meta.n,
        m=max(meta.decision_samples, 1),
        ts=list(meta.ts),
        instances=len(meta.seeds),
        fresh_instance=np.array([index[s["seed"]] for s in meta.decision_states], int),
        post_instance=np.array([index[s["seed"]] for s in post], int),
        post_kind=[s["kind"] for s in post],
        fresh_bucket=np.array([bucket(s["turn"]) for s in meta.decision_states], int),
        post_bucket=np.array([bucket(s["turn"]) for s in post], int),
        post_after=np.array([s.get("after", 1) for s in post], int),
        matched=np.array([bool(s.get("matches")) for s in post], bool),
        matched_instance=np.array([index[s["seed"]] for s in meta.matched_states], int),
        matched_bucket=np.array([bucket(s["turn"]) for s in meta.matched_states], int),
        post_repeat=np.array(
            [s.get("after") == 2 and s["replies"][-1] == s["replies"][-2] for s in post], bool
        ),
        pair_instance=np.array([index[p["seed"]] for p in meta.position_pairs], int),
        pair_turn=np.array([len(p["replies"]) for p in meta.position_pairs], int),
        post_optimal_n=np.array([s.get("optimal", 1) for s in post], float),
        harder=harder_half(results),
        pairs=pairs,
    )


def units(entry: CheckpointResult) -> Units:
    analysis = entry.analysis
    if not entry.successes or not analysis.decision.optimal_counts:
        raise ValueError(
            "these results hold no per-instance counts (written before the second edition of "
            "the study): evaluate again"
        )
    post = analysis.from_errors
    position = analysis.position
    return Units(
        successes={t: np.array(c, float) for t, c in entry.successes.items()},
        fresh=np.array(analysis.decision.optimal_counts, float),
        post_optimal=np.array(post.optimal_counts if post else [], float),
        post_success=np.array(post.success_counts if post else [], float),
        matched=np.array(analysis.matched.optimal_counts if analysis.matched else [], float),
        position_pre=np.array(position.optimal_pre if position else [], float),
        position_post=np.array(position.optimal_post if position else [], float),
    )


def draws(instances: int, replicates: int, seed: int = 0) -> np.ndarray:
    """[B + 1, I] instance weights: row 0 all ones (the point estimate), then B resamples."""
    rng = np.random.default_rng(seed)
    drawn = rng.multinomial(instances, np.full(instances, 1 / instances), size=replicates)
    return np.vstack([np.ones(instances), drawn]).astype(float)


def rate(x: np.ndarray, trials: float, where: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Per replicate: sum_u w[where[u]] x_u / (trials * sum_u w[where[u]]) (NaN if no units)."""
    if x.size == 0:
        return np.full(weights.shape[0], math.nan)
    w = weights[:, where]  # [B + 1, U]
    total = w.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (w @ x) / (trials * total)


def measures(u: Units, d: Design, w: np.ndarray, kind: str | None = None) -> dict[str, np.ndarray]:
    """One run's rates under every replicate.

    pass1@T; step (random fresh states); step@k and step@k+ (every fresh state, random or
    matched, of turn bucket k, or of k and later), post@k and post@k+ alike, and each of these
    on the easier and the harder half of the instances (`/easy`, `/hard`); post_step and
    post_success (all post-error states, or those of one kind); and, on the post-error states
    that have matches, post_m (their optimal rate) and matched (their matches' rate, each
    post-error state's matches averaged, so every post-error state weighs the same). The
    same-position pairs' exact chances are read per pair (minirl.study.claims.position_gain).
    """
    everyone = np.arange(d.instances)
    out = {f"pass1@{t}": rate(u.successes[t], d.n, everyone, w) for t in d.ts}
    out["step"] = rate(u.fresh, d.m, d.fresh_instance, w)
    # Per turn bucket (and from each bucket on: `@k+`), every fresh state asked, the random and
    # the matched ones together (the matched ones reach the later turns), and the post-error.
    fresh = np.concatenate([u.fresh, u.matched])
    fresh_instance = np.concatenate([d.fresh_instance, d.matched_instance])
    fresh_bucket = np.concatenate([d.fresh_bucket, d.matched_bucket])
    fresh_hard, post_hard = d.harder[fresh_instance], d.harder[d.post_instance]
    for k in range(len(TURN_BUCKETS)):
        for tag, pick in (("", np.equal), ("+", np.greater_equal)):
            for cls, f_in, p_in in (
                ("", True, True),
                ("/easy", ~fresh_hard, ~post_hard),
                ("/hard", fresh_hard, post_hard),
            ):
                here = pick(fresh_bucket, k) & f_in
                out[f"step@{k}{tag}{cls}"] = rate(fresh[here], d.m, fresh_instance[here], w)
                there = pick(d.post_bucket, k) & p_in
                out[f"post@{k}{tag}{cls}"] = rate(
                    u.post_optimal[there], d.m, d.post_instance[there], w
                )
    post = np.array([kind is None or k == kind for k in d.post_kind], bool)
    out["post_step"] = rate(u.post_optimal[post], d.m, d.post_instance[post], w)
    if u.post_success.size:
        out["post_success"] = rate(u.post_success[post], d.m, d.post_instance[post], w)
    else:
        out["post_success"] = np.full(w.shape[0], math.nan)
    pair = post & d.matched
    out["post_m"] = rate(u.post_optimal[pair], d.m, d.post_instance[pair], w)
    out["matched"] = matched_rate(
        u.matched, d.m, d.pairs[pair], d.post_instance[pair], d.matched_instance, w
    )
    return out


def matched_rate(
    x: np.ndarray,
    trials: float,
    pairs: np.ndarray,
    post_instance: np.ndarray,
    fresh_instance: np.ndarray,
    weights: np.ndarray,
) -> np.ndarray:
    """Per replicate, the matched fresh states' rate, each post-error state's matches averaged:

        sum_{p,f} w[i_p] A[p, f] w[i_f] x_f / (trials * sum_{p,f} w[i_p] A[p, f] w[i_f]),

    A[p, f] = 1 / |matches of p|. A fresh state may serve post-error states of other instances,
    so both the post-error state's instance and its match's are resampled (crossed clusters).
    """
    if x.size == 0 or pairs.shape[0] == 0:
        return np.full(weights.shape[0], math.nan)
    mass = (weights[:, post_instance] @ pairs) * weights[:, fresh_instance]  # [B + 1, S_m]
    with np.errstate(invalid="ignore", divide="ignore"):
        return (mass @ x) / (trials * mass.sum(axis=1))


def empirical_logit(p: np.ndarray, trials: float) -> np.ndarray:
    """log(p / (1 - p)), with p kept half a trial away from 0 and 1 so it stays finite."""
    eps = 0.5 / max(trials, 1.0)
    q = np.clip(p, eps, 1 - eps)
    return np.log(q / (1 - q))


# ---- Student's t, by hand ----------------------------------------------------------------------


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularized incomplete beta function (modified Lentz)."""
    tiny, c, d = 1e-300, 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        for num in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1 + num * d
            d = 1 / (d if abs(d) > tiny else tiny)
            c = 1 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1) < 1e-14:
            break
    return h


def incomplete_beta(a: float, b: float, x: float) -> float:
    """I_x(a, b), the regularized incomplete beta function, for x in [0, 1]."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x < (a + 1) / (a + b + 2):
        return math.exp(log_front) * _beta_fraction(a, b, x) / a
    return 1 - math.exp(log_front) * _beta_fraction(b, a, 1 - x) / b


def t_sf(t: float, df: float) -> float:
    """P(T > t) for Student's t with df degrees of freedom (df = inf: the normal)."""
    if math.isinf(df):
        return 0.5 * math.erfc(t / math.sqrt(2))
    tail = 0.5 * incomplete_beta(df / 2, 0.5, df / (df + t * t))
    return tail if t >= 0 else 1 - tail


def t_quantile(p: float, df: float) -> float:
    """The t with P(T <= t) = p (bisection on t_sf; p in (0, 1))."""
    lo, hi = -1e3, 1e3
    for _ in range(200):
        mid = (lo + hi) / 2
        if not lo < mid < hi:  # lo and hi are neighbouring floats: more halving returns this
            return mid
        if 1 - t_sf(mid, df) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


# ---- estimates ---------------------------------------------------------------------------------


@dataclass
class Estimate:
    """A statistic's estimate, standard error, 95% interval, two-sided p and degrees of freedom."""

    value: float
    se: float
    low: float
    high: float
    p: float  # two-sided p-value of "the statistic is 0" (Student's t, df)
    df: float = math.inf

    @classmethod
    def nan(cls) -> Estimate:
        return cls(math.nan, math.nan, math.nan, math.nan, math.nan, math.nan)

    @classmethod
    def from_parts(cls, value: float, parts: list[tuple[float, float]]) -> Estimate:
        """value with variance components (v_k, df_k): the Welch-Satterthwaite t estimate."""
        parts = [(v, df) for v, df in parts if v > 0]
        var = sum(v for v, _ in parts)
        if math.isnan(value) or math.isnan(var):
            return cls.nan()
        if var <= 1e-24:  # no spread (but rounding): certain, one way or the other, or 0
            p = 1.0 if value == 0 else 0.0
            return cls(value, 0.0, value, value, p, math.inf)
        spread = sum(v**2 / df for v, df in parts)  # 0 when every part's df is infinite
        df = var**2 / spread if spread > 0 else math.inf
        se = math.sqrt(var)
        half = t_quantile(0.975, df) * se
        p = min(1.0, 2 * t_sf(abs(value) / se, df))
        return cls(value, se, value - half, value + half, p, df)

    @classmethod
    def of(cls, stat: np.ndarray) -> Estimate:
        """A statistic of the instances alone (row 0 the estimate, rows 1.. the replicates)."""
        return cls.of_runs([stat])

    @classmethod
    def of_runs(
        cls,
        runs: list[np.ndarray],
        against: list[np.ndarray] | None = None,
        extra: tuple[float, float] = (0.0, math.inf),
        instances: int = 0,
    ) -> Estimate:
        """The mean over `runs` of a per-run statistic, minus the mean over `against` (another
        arm's runs, trained independently); `extra` is one more (variance, df) part. See the
        module docstring. `instances` is I (df I - 1 of the instance part; 0: normal)."""
        against = against or []
        series = np.mean(runs, axis=0) - (np.mean(against, axis=0) if against else 0.0)
        reps = series[1:][~np.isnan(series[1:])]
        if math.isnan(series[0]) or reps.size < 2:
            return cls.nan()
        parts = [(float(reps.var(ddof=1)), instances - 1 if instances > 1 else math.inf)]
        for group in (runs, against):
            if len(group) > 1:
                values = np.array([r[0] for r in group])
                parts.append((float(values.var(ddof=1)) / len(group), len(group) - 1))
        parts.append(extra)
        return cls.from_parts(float(series[0]), parts)

    def text(self) -> str:
        if math.isnan(self.value):
            return "n/a"
        return f"{self.value:+.3f} ± {self.se:.3f}"


def holm(pvalues: list[float]) -> list[float]:
    """Holm's step-down adjustment: controls the chance of any false verdict among them all.

    The i-th smallest of m p-values is multiplied by (m - i + 1), and the adjusted values are
    made non-decreasing; a NaN stays NaN and does not count towards m.
    """
    valid = sorted((p, i) for i, p in enumerate(pvalues) if not math.isnan(p))
    adjusted = [math.nan] * len(pvalues)
    running = 0.0
    for rank, (p, i) in enumerate(valid):
        running = max(running, min(1.0, (len(valid) - rank) * p))
        adjusted[i] = running
    return adjusted
