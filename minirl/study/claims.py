"""The paper's claims as statistics, bootstrap uncertainties and verdict rules.

Every number comes from minirl.study.bootstrap (paired over the shared instances and states,
clustered by instance, with the spread over training seeds); minirl.study.report writes the
sentence each rule chooses, never one written by hand. The rules, per task and arm:

1. Budget dependence. gap(T) = Pass@(1,T)[arm] - Pass@(1,T)[base] grows with T for two reasons:
   a real need for turns, and plain compounding (a better single step is worth more over more
   turns, and a tight T caps every policy at the task's ceiling). The null removes the second:
   the arm's single-step gain d (log-odds, fixed fresh states) is carried through the turns by
   the simulated policy of minirl.study.simulate, giving null(T), what d alone buys at T. The
   statistic is the excess's growth,
       `growth = [gap - null](T_max) - [gap - null](T_min)`,
   and the claim is shown when it is positive (Holm-adjusted p < 0.05). The null is a model:
   its simulated errors are uniform over the other actions, and the report prints its base
   curve beside base's real one so that a reader can see where it is off.
2. Where RL helps (recovery). On the fixed post-error states and the fixed fresh states, the
   change of the optimal-action rate in log-odds, post-error minus fresh:
       `recovery = dlogit(post-error) - dlogit(fresh)`.
   A policy that only gains single-step quality gains the same log-odds everywhere (0); one that
   learned to recover gains more after an error. Shown when positive (Holm). The rates are
   pooled over states, and a uniform shift moves a pooled rate's log-odds by exactly d only when
   the states are alike; how much unlike states (e.g. where every action is optimal) bias the
   rule is measured, not assumed: minirl.study.validate's false-"shown" rate. Success within the
   remaining turns from the post-error states, and its split by kind of error, are reported
   beside it; no verdict reads them, because they compound single-step gains too.
3. BudgetMix robustness. For each fixed-budget arm a: mean over T of Pass@(1,T)[mix] -
   Pass@(1,T)[a]. Shown when that is positive for *every* fixed arm (each Holm-adjusted): the
   mix is ahead of each specialist over the budgets, not only of a straw one. (The first
   edition's regret, a maximum over noisy differences, was biased upwards: identical arms
   scored 0.088 on average.)
4. Process supervision. The process-reward arm against BudgetMix with outcome reward, on the mean
   Pass@(1,T), single-step quality and recovery: gains and losses, two-sided, Holm-adjusted.

Every test of the whole study is one family for Holm's adjustment (`adjust`), so "shown"
anywhere means the chance of any false "shown" in the report is at most 5%. Each test also
reports the smallest effect it could have detected with 80% power at its adjusted level
(minirl.study.power.detectable).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from minirl.eval.recovery import KINDS
from minirl.eval.results import EvalResults, load_results
from minirl.study import simulate
from minirl.study.bootstrap import (
    Design,
    Draws,
    Estimate,
    arm_measures,
    design,
    draws,
    empirical_logit,
    holm,
    units,
)
from minirl.study.power import detectable
from tasks.history import oracle_success

ALPHA = 0.05
REPLICATES = 2000
SHIFTS = tuple(np.round(np.arange(-3.0, 3.01, 0.25), 2))  # log-odds shifts of the null's table


@dataclass
class Test:
    """One verdict: its statistic, the p-value after Holm's adjustment, and what it could see."""

    claim: str
    task: str
    arm: str
    estimate: Estimate
    two_sided: bool = False
    adjusted: float = math.nan  # Holm-adjusted p (set by `adjust`)
    detectable: float = math.nan  # smallest effect with 80% power at the adjusted level

    @property
    def p(self) -> float:
        """Raw p: one-sided for "positive", or two-sided."""
        p = self.estimate.p
        return min(1.0, 2 * min(p, 1 - p)) if self.two_sided else p

    @property
    def shown(self) -> bool:
        return self.adjusted < ALPHA and self.estimate.value > 0

    @property
    def opposite(self) -> bool:
        return self.two_sided and self.adjusted < ALPHA and self.estimate.value < 0


@dataclass
class BudgetRow:
    gap: dict[int, Estimate]  # observed Pass@(1,T) gap against base
    null: dict[int, float]  # what the single-step gain alone buys at T
    step_gain: Estimate  # single-step gain in log-odds on the fresh states
    test: Test  # growth of (gap - null) from T_min to T_max


@dataclass
class WhereRow:
    step: Estimate  # change of the optimal rate on fresh states
    post_step: Estimate  # ... on post-error states
    post_success: Estimate  # change of success within the turns left, from post-error states
    by_kind: dict[str, Estimate]  # post_success change per kind of error
    test: Test  # recovery = dlogit(post-error) - dlogit(fresh)


@dataclass
class RobustRow:
    lead: Estimate  # mean over T of Pass@(1,T)[mix] - [fixed arm]
    per_t: dict[int, Estimate]
    test: Test


@dataclass
class TaskFindings:
    """Every claim's numbers and tests for one task."""

    results: EvalResults
    ceiling: dict[int, tuple[float, float]]  # T -> the oracle's success and its stderr
    pass1: dict[str, dict[int, Estimate]]  # arm (incl. base) -> T -> Pass@(1,T)
    rates: dict[str, dict[str, Estimate]]  # arm -> step / post_step / post_success
    budget: dict[str, BudgetRow]
    where: dict[str, WhereRow]
    robust: dict[str, RobustRow]
    process: dict[str, Test] = field(default_factory=dict)
    kinds: dict[str, int] = field(default_factory=dict)  # post-error states per kind
    # The null's own base: the simulated policy at base's measured rates, per T. The null is
    # only as good as this curve is close to base's real Pass@(1,T): a simulated base that lags
    # at large T leaves the null room to grow there, and overstates it.
    model_base: dict[int, float] = field(default_factory=dict)

    def tests(self) -> list[Test]:
        return (
            [r.test for r in self.budget.values()]
            + [r.test for r in self.where.values()]
            + [r.test for r in self.robust.values()]
            + list(self.process.values())
        )


# ---- the statistics ----------------------------------------------------------------------------


def _diff(a: np.ndarray, b: np.ndarray) -> Estimate:
    return Estimate.of(a - b)


def _dlogit(arm: dict, base: dict, key: str, trials: float) -> np.ndarray:
    return empirical_logit(arm[key], trials) - empirical_logit(base[key], trials)


def _mean_over_t(m: dict[str, np.ndarray], ts: list[int]) -> np.ndarray:
    return np.mean([m[f"pass1@{t}"] for t in ts], axis=0)


def budget_rows(
    task: str,
    d: Design,
    base: dict[str, np.ndarray],
    arms: dict[str, dict[str, np.ndarray]],
    seeds: list[int],
    sim_n: int,
) -> tuple[dict[str, BudgetRow], dict[int, float]]:
    """Gap, null and the excess's growth for every arm (claim 1), and the null's base curve."""
    policy = simulate.SimPolicy(float(base["step"][0]), float(base["post_step"][0]))
    if math.isnan(policy.q_post):
        policy = simulate.SimPolicy(policy.q_fresh, policy.q_fresh)
    trials = d.m * max(len(d.fresh_instance), 1)
    shifts = {arm: _dlogit(m, base, "step", trials) for arm, m in arms.items()}
    # Only the grid points the replicates' shifts fall between (the curves cost seconds each).
    seen = np.concatenate([s[~np.isnan(s)] for s in shifts.values()] + [np.zeros(1)])
    grid = [s for s in SHIFTS if seen.min() - 0.25 <= s <= seen.max() + 0.25]
    table = simulate.null_table(task, seeds, policy, d.ts, sorted({0.0, *grid}), n=sim_n)
    lo, hi = d.ts[0], d.ts[-1]
    rows = {}
    for arm, m in arms.items():
        shift = shifts[arm]
        null = {
            t: np.array([simulate.interpolate(table, s, t) for s in shift])
            - simulate.interpolate(table, 0.0, t)
            for t in d.ts
        }
        gap = {t: m[f"pass1@{t}"] - base[f"pass1@{t}"] for t in d.ts}
        growth = (gap[hi] - null[hi]) - (gap[lo] - null[lo])
        rows[arm] = BudgetRow(
            gap={t: Estimate.of(g) for t, g in gap.items()},
            null={t: float(v[0]) for t, v in null.items()},
            step_gain=Estimate.of(shift),
            test=Test("budget dependence", task, arm, Estimate.of(growth)),
        )
    return rows, {t: table[0.0][t] for t in d.ts}


def where_rows(
    task: str,
    d: Design,
    base: dict[str, np.ndarray],
    arms: dict[str, dict[str, np.ndarray]],
    by_kind: dict[str, tuple[dict, dict[str, dict]]],
) -> dict[str, WhereRow]:
    """Single-step and post-error changes, and the recovery test, for every arm (claim 2)."""
    trials_f = d.m * max(len(d.fresh_instance), 1)
    trials_p = d.m * max(len(d.post_instance), 1)
    rows = {}
    for arm, m in arms.items():
        recovery = _dlogit(m, base, "post_step", trials_p) - _dlogit(m, base, "step", trials_f)
        rows[arm] = WhereRow(
            step=_diff(m["step"], base["step"]),
            post_step=_diff(m["post_step"], base["post_step"]),
            post_success=_diff(m["post_success"], base["post_success"]),
            by_kind={
                kind: _diff(arm_k[arm]["post_success"], base_k["post_success"])
                for kind, (base_k, arm_k) in by_kind.items()
            },
            test=Test("recovery", task, arm, Estimate.of(recovery)),
        )
    return rows


def robust_rows(
    task: str, ts: list[int], arms: dict[str, dict[str, np.ndarray]]
) -> dict[str, RobustRow]:
    """BudgetMix's lead over each fixed-budget arm across the budgets (claim 3)."""
    mix = next((a for a in arms if a.startswith("budgetmix")), None)
    if mix is None:
        return {}
    rows = {}
    for arm, m in arms.items():
        if arm == mix or not arm.startswith("fixed"):
            continue
        lead = _mean_over_t(arms[mix], ts) - _mean_over_t(m, ts)
        rows[arm] = RobustRow(
            lead=Estimate.of(lead),
            per_t={t: _diff(arms[mix][f"pass1@{t}"], m[f"pass1@{t}"]) for t in ts},
            test=Test("robustness", task, f"budgetmix vs {arm}", Estimate.of(lead)),
        )
    return rows


def process_tests(task: str, d: Design, arms: dict[str, dict[str, np.ndarray]]) -> dict[str, Test]:
    """The process-reward arm against BudgetMix, two-sided (claim 4)."""
    if "process" not in arms or "budgetmix" not in arms:
        return {}
    p, b = arms["process"], arms["budgetmix"]
    diffs = {
        "mean Pass@(1,T)": _mean_over_t(p, d.ts) - _mean_over_t(b, d.ts),
        "single-step optimal rate": p["step"] - b["step"],
        "post-error optimal rate": p["post_step"] - b["post_step"],
    }
    return {
        name: Test(
            "process supervision",
            task,
            f"process vs budgetmix: {name}",
            Estimate.of(x),
            two_sided=True,
        )
        for name, x in diffs.items()
    }


# ---- one task, and the whole study -------------------------------------------------------------


def analyse_results(
    task: str,
    results: EvalResults,
    arms: dict[str, list[str]],
    replicates: int = REPLICATES,
    seed: int = 0,
    sim_n: int = 8,
) -> TaskFindings:
    """Every claim's numbers and (unadjusted) tests for one task; `adjust` finishes them."""
    d = design(results)
    runs = {"base": [units(results.checkpoints["base"])]}
    runs |= {
        arm: [units(results.checkpoints[label]) for label in labels] for arm, labels in arms.items()
    }
    draw: Draws = draws(d.instances, {a: len(r) for a, r in runs.items()}, replicates, seed)
    measured = {a: arm_measures(r, d, draw, a) for a, r in runs.items()}
    kinds = sorted({k for k in d.post_kind}, key=KINDS.index)
    by_kind = {
        k: (
            arm_measures(runs["base"], d, draw, "base", kind=k),
            {a: arm_measures(r, d, draw, a, kind=k) for a, r in runs.items() if a != "base"},
        )
        for k in kinds
    }
    base = measured["base"]
    trained = {a: m for a, m in measured.items() if a != "base"}
    main = {a: m for a, m in trained.items() if a != "process"}
    seeds = list(results.meta.seeds)
    budget, model_base = budget_rows(task, d, base, main, seeds, sim_n)
    return TaskFindings(
        results=results,
        ceiling={t: oracle_success(task, t, seeds) for t in d.ts},
        pass1={a: {t: Estimate.of(m[f"pass1@{t}"]) for t in d.ts} for a, m in measured.items()},
        rates={
            a: {k: Estimate.of(m[k]) for k in ("step", "post_step", "post_success")}
            for a, m in measured.items()
        },
        budget=budget,
        where=where_rows(task, d, base, trained, by_kind),
        robust=robust_rows(task, d.ts, main),
        process=process_tests(task, d, trained),
        kinds={k: d.post_kind.count(k) for k in kinds},
        model_base=model_base,
    )


def adjust(found: dict[str, TaskFindings]) -> list[Test]:
    """Holm-adjust every test of the study as one family; set what each could have detected."""
    tests = [t for f in found.values() for t in f.tests()]
    for test, p in zip(tests, holm([t.p for t in tests]), strict=True):
        test.adjusted = p
        test.detectable = detectable(test.estimate.se, len(tests), two_sided=test.two_sided)
    return tests


def analyse(task: str, results_path: Path, arms: dict[str, list[str]]) -> TaskFindings:
    """One task of a study on disk (call `adjust` over all tasks before reading verdicts)."""
    return analyse_results(task, load_results(results_path), arms)


def signed(x: float, se: float | None = None) -> str:
    if math.isnan(x):
        return "n/a"
    return f"{x:+.3f}" if se is None or math.isnan(se) else f"{x:+.3f} ± {se:.3f}"
