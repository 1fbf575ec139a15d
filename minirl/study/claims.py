"""The paper's claims as numbers, uncertainties and verdict rules, computed from the evaluations.

Each claim becomes a number with an uncertainty and a rule; minirl.study.report writes the
sentence the rule chooses, never one written by hand:
1. Budget dependence: gap(T) = Pass@(1,T)[RL] - Pass@(1,T)[base]. Shown when the gap at the
   largest T is positive and larger than the gap at the smallest T, both beyond 2 stderr.
2. Where RL helps: per RL arm, the change in the single-step optimal-action rate (fixed states)
   against the change in P(success | >= 1 error) and in success on the longest horizons. Shown
   when recovery gains exceed single-step gains by more than 2 stderr.
3. BudgetMix robustness: mean and worst-case Pass@(1,T) over T, and the *regret*, the largest
   shortfall from the best arm at any T. Shown when BudgetMix has the smallest regret.
4. Process supervision: the process-reward arm against BudgetMix with outcome reward.
Standard errors treat the compared grids as independent (a conservative choice: the instances are
shared). With several training seeds the seed spread is reported and added to the error.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import tasks
from minirl.eval.results import Analysis, EvalResults, Rate, load_results

Z = 2.0  # "beyond 2 stderr"
Estimate = tuple[float, float]  # (value, standard error)
Measure = Callable[[Analysis], Rate | None]  # picks one rate out of a checkpoint's analyses


@dataclass
class Verdict:
    shown: bool
    text: str


@dataclass
class BudgetDependence:
    gaps: dict[str, dict[int, Estimate]]  # arm -> T -> gap against base
    verdicts: dict[str, Verdict]


@dataclass
class WhereRLHelps:
    base: dict[str, Estimate]  # measure -> base rate
    deltas: dict[str, dict[str, Estimate]]  # arm -> measure -> change against base
    verdicts: dict[str, Verdict]
    bucket: str | None  # the longest horizon bucket measured


@dataclass
class RobustRow:
    mean: float
    worst: float
    worst_t: int
    regret: float
    regret_t: int


@dataclass
class Robustness:
    table: dict[str, RobustRow]
    verdict: Verdict


@dataclass
class ProcessSupervision:
    run: bool
    text: str
    diffs: dict[str, Estimate] = field(default_factory=dict)


@dataclass
class TaskFindings:
    """Every claim's numbers and verdict for one task."""

    results: EvalResults
    solvable: dict[int, float]
    budget: BudgetDependence
    where: WhereRLHelps
    robust: Robustness
    process: ProcessSupervision


# ---- numbers -----------------------------------------------------------------------------------


def curve(
    results: EvalResults, labels: list[str], k: int = 1
) -> dict[int, tuple[float, float, float]]:
    """Per T: (mean over the labels' runs, stderr incl. seed spread, seed std or NaN)."""
    out = {}
    for t in results.meta.ts:
        cells = [results.checkpoints[label].cell(k, t) for label in labels]
        means = [c.mean for c in cells]
        mean = sum(means) / len(means)
        inst_se = math.sqrt(sum(c.stderr**2 for c in cells)) / len(cells)
        if len(cells) > 1:
            sd = math.sqrt(sum((m - mean) ** 2 for m in means) / (len(means) - 1))
            se = math.hypot(inst_se, sd / math.sqrt(len(means)))
        else:
            sd, se = math.nan, inst_se
        out[t] = (mean, se, sd)
    return out


def rate_stat(results: EvalResults, labels: list[str], measure: Measure) -> Estimate:
    """Mean over runs of an analysis rate, with a binomial stderr from its pooled count."""
    rates, counts = [], []
    for label in labels:
        found = measure(results.checkpoints[label].analysis) or Rate(math.nan, 0)
        rates.append(found.rate)
        counts.append(found.count)
    if not counts or sum(counts) == 0 or any(math.isnan(r) for r in rates):
        return math.nan, math.nan
    p = sum(rates) / len(rates)
    return p, math.sqrt(max(p * (1 - p), 1e-12) / sum(counts))


def longest_bucket(results: EvalResults, minimum: int = 20) -> str | None:
    """The longest optimal-length bucket with at least `minimum` base episodes."""
    horizon = results.checkpoints["base"].analysis.horizon
    ok = [b for b, r in horizon.items() if r.count >= minimum]
    return ok[-1] if ok else (list(horizon)[-1] if horizon else None)


def solvable_fraction(task: str, seeds: list[int], ts: list[int]) -> dict[int, float]:
    """Share of the instances whose optimal solution fits in T turns (what any policy can reach)."""
    env = tasks.make(task)
    lengths = []
    for s in seeds:
        env.reset(s)
        lengths.append(env.optimal_length)
    return {t: sum(n <= t for n in lengths) / len(lengths) for t in ts}


def signed(x: float, se: float | None = None) -> str:
    if math.isnan(x):
        return "n/a"
    return f"{x:+.3f}" if se is None or math.isnan(se) else f"{x:+.3f} ± {se:.3f}"


# ---- claims ------------------------------------------------------------------------------------


def budget_dependence(results: EvalResults, arms: dict[str, list[str]]) -> BudgetDependence:
    base = curve(results, ["base"])
    ts = results.meta.ts
    gaps = {}
    for arm, labels in arms.items():
        rl = curve(results, labels)
        gaps[arm] = {t: (rl[t][0] - base[t][0], math.hypot(rl[t][1], base[t][1])) for t in ts}
    lo, hi = ts[0], ts[-1]
    verdicts = {}
    for arm, gap in gaps.items():
        change = gap[hi][0] - gap[lo][0]
        change_se = math.hypot(gap[hi][1], gap[lo][1])
        if gap[hi][0] > Z * gap[hi][1] and change > Z * change_se:
            verdict = (
                f"shown: the gain of {arm} over base grows from {signed(*gap[lo])} at "
                f"T={lo} to {signed(*gap[hi])} at T={hi}"
            )
        elif gap[hi][0] <= Z * gap[hi][1]:
            verdict = (
                f"not shown: at the largest evaluated T={hi} the gain of {arm} over base is "
                f"{signed(*gap[hi])}, not beyond 2 stderr"
            )
        elif change < -Z * change_se:
            verdict = (
                f"the opposite: the gain of {arm} shrinks from {signed(*gap[lo])} at T={lo} "
                f"to {signed(*gap[hi])} at T={hi}"
            )
        else:
            verdict = (
                f"not shown: the gain of {arm} is {signed(*gap[lo])} at T={lo} and "
                f"{signed(*gap[hi])} at T={hi}; the change {signed(change, change_se)} is "
                "within 2 stderr"
            )
        verdicts[arm] = Verdict(verdict.startswith("shown"), verdict)
    return BudgetDependence(gaps, verdicts)


def where_rl_helps(results: EvalResults, arms: dict[str, list[str]]) -> WhereRLHelps:
    bucket = longest_bucket(results)
    measures: dict[str, Measure] = {
        "single-step optimal rate": lambda a: a.decision.optimal,
        "success after an error": lambda a: a.recovery.after_error,
        f"success at optimal length {bucket}": lambda a: a.horizon.get(bucket or ""),
    }
    base = {m: rate_stat(results, ["base"], p) for m, p in measures.items()}
    deltas, verdicts = {}, {}
    for arm, labels in arms.items():
        own = {m: rate_stat(results, labels, p) for m, p in measures.items()}
        deltas[arm] = {
            m: (own[m][0] - base[m][0], math.hypot(own[m][1], base[m][1])) for m in measures
        }
        (d_step, se_step), (d_rec, se_rec), (d_long, se_long) = deltas[arm].values()
        margin = d_rec - d_step
        if math.isnan(margin):
            text = f"undetermined for {arm}: a rate has no cases"
        elif margin > Z * math.hypot(se_step, se_rec):
            text = (
                f"shown for {arm}: single-step quality changed by {signed(d_step, se_step)} "
                f"while recovery after an error changed by {signed(d_rec, se_rec)} "
                f"(long horizons {signed(d_long, se_long)})"
            )
        else:
            text = (
                f"not shown for {arm}: single-step quality changed by "
                f"{signed(d_step, se_step)} and recovery after an error by "
                f"{signed(d_rec, se_rec)}; recovery did not gain more, beyond 2 stderr "
                f"(long horizons {signed(d_long, se_long)})"
            )
        verdicts[arm] = Verdict(text.startswith("shown"), text)
    return WhereRLHelps(base, deltas, verdicts, bucket)


def robustness(results: EvalResults, arms: dict[str, list[str]]) -> Robustness:
    curves = {arm: curve(results, labels) for arm, labels in arms.items()}
    ts = results.meta.ts
    best = {t: max(c[t][0] for c in curves.values()) for t in ts}
    table = {}
    for arm, c in curves.items():
        means = [c[t][0] for t in ts]
        table[arm] = RobustRow(
            mean=sum(means) / len(means),
            worst=min(means),
            worst_t=ts[means.index(min(means))],
            regret=max(best[t] - c[t][0] for t in ts),
            regret_t=max(ts, key=lambda t: best[t] - c[t][0]),
        )
    se = max(c[t][1] for c in curves.values() for t in ts)
    mix = next((a for a in arms if a.startswith("budgetmix")), None)
    if mix is None:
        return Robustness(table, Verdict(False, "no BudgetMix arm"))
    others = {a: r for a, r in table.items() if a != mix}
    rival = min(others, key=lambda a: others[a].regret)
    lead = others[rival].regret - table[mix].regret
    worst_text = ", ".join(f"{a} {r.worst:.3f} (T={r.worst_t})" for a, r in table.items())
    summary = (
        f"BudgetMix's largest shortfall from the best arm at any T is {table[mix].regret:.3f} "
        f"(at T={table[mix].regret_t}), against {others[rival].regret:.3f} for the most "
        f"robust fixed arm ({rival})"
    )
    if lead > Z * se:
        text = f"shown: {summary}"
    elif lead > 0:
        text = f"not shown beyond noise: {summary}; the margin {lead:.3f} is within 2 stderr"
    else:
        text = f"not shown: {summary}"
    text += f". Worst-case Pass@(1,T): {worst_text}"
    return Robustness(table, Verdict(text.startswith("shown"), text))


def process_supervision(results: EvalResults, arms: dict[str, list[str]]) -> ProcessSupervision:
    if "process" not in arms or "budgetmix" not in arms:
        return ProcessSupervision(False, "not run (pass --process to add the process-reward arm)")
    proc, mix = curve(results, arms["process"]), curve(results, arms["budgetmix"])
    diffs = {
        f"Pass@(1,{t})": (proc[t][0] - mix[t][0], math.hypot(proc[t][1], mix[t][1]))
        for t in results.meta.ts
    }
    measures: dict[str, Measure] = {
        "single-step optimal rate": lambda a: a.decision.optimal,
        "success after an error": lambda a: a.recovery.after_error,
    }
    for m, p in measures.items():
        a, b = rate_stat(results, arms["process"], p), rate_stat(results, arms["budgetmix"], p)
        diffs[m] = (a[0] - b[0], math.hypot(a[1], b[1]))
    gains = [k for k, (d, se) in diffs.items() if d > Z * se]
    losses = [k for k, (d, se) in diffs.items() if d < -Z * se]
    text = (
        f"gains beyond 2 stderr: {', '.join(gains) or 'none'}; "
        f"losses beyond 2 stderr: {', '.join(losses) or 'none'}"
    )
    return ProcessSupervision(True, text, diffs)


def analyse(task: str, results_path: Path, arms: dict[str, list[str]]) -> TaskFindings:
    """Every claim's numbers and verdict for one task of the study."""
    results = load_results(results_path)
    main = {a: v for a, v in arms.items() if a != "process"}  # (b), (c), (d)
    return TaskFindings(
        results=results,
        solvable=solvable_fraction(task, results.meta.seeds, results.meta.ts),
        budget=budget_dependence(results, main),
        where=where_rl_helps(results, arms),
        robust=robustness(results, main),
        process=process_supervision(results, arms),
    )
