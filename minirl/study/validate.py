"""How the verdict rules behave on simulated policies whose truths are known, at a study's sizes.

A verdict rule is only as good as its error rates, and a rule validated only on the world its own
null assumes proves little. Here simulated checkpoints (minirl.study.simulate) are put through
the study's own analysis (minirl.study.claims), many times over, in worlds built to break the
null's assumptions:

  deficit world   base optimal w.p. 0.6 fresh and 0.35 after an error, instances of unequal
                  difficulty (log-odds spread 0.6). Arms: single-step (+0.6 everywhere);
                  front-loaded (+1.0 on turn 1, +0.2 later); hard instances (+1.0 on the harder
                  half); weak states (a gain of up to +1.2, largest where the policy is weak);
                  recovery (+1.0 after an error only); patient (+1.0 while >= 6 turns are left:
                  it reads its budget); hurried (+1.0 when <= 2 turns are left).
  sticky world    base optimal w.p. 0.6 / 0.45 that repeats an error w.p. 0.5 (non-uniform
                  errors, as the `sticky` tiny base learned). Arms: single-step (+0.6, still
                  sticky); unstuck (repeats w.p. 0.1 only: it learned to recover); looping
                  (repeats w.p. 0.8: training made the loop worse, the opposite).
  budget world    fixed-T4 hurried (+1.2 when <= 2 left), fixed-T12 patient (+1.2 while >= 6
                  left): they specialise. BudgetMix has both skills, so it leads at T = 8 and
                  12 but equals fixed-T4 at T = 4, its worst budget (truth 0: equivalent);
                  process = BudgetMix. In the trailing world BudgetMix is fixed-T12 and trails
                  fixed-T4 at T = 4 (the opposite).
  flat world      fixed arms alike (+0.6 each) and BudgetMix too: nothing to be robust to.

Each truth says what each rule should find: 0 (no effect), + or -, or "estimand" where the
answer is the statistic's own value at the exact chances (`chance`) rather than a conceptual
sign (a gain that is largest where the policy is weak is larger after an error, where it is
weak). Every trained run differs from its arm's policy by a uniform shift and by its own noise
per kind of state (minirl.study.simulate.sim_results: seed_sd, state_sd), as two real training
seeds differ. As in the study, the budget null carries the arm's fresh-state gains only, so a gain
after errors (the recovery arm's, the weak-states arm's) is a skill that needs turns: "+".
Per rule and truth, over the simulated studies:
    mean z         estimate / SE, averaged: a no-effect truth's bias in standard errors
    bias           (estimate - estimand) / SE, averaged, where the estimand is known (the
                   recovery test reads exact chances, so at an "estimand" truth its estimate
                   is its estimand: bias 0 by construction)
    right, wrong   shares of verdicts in the truth's direction (read at alpha / family,
                   Holm's strictest step) and against it or on a no-effect truth (read at the
                   unadjusted alpha, the most Holm can allow one test)
    untestable     share of studies in which the rule declared itself not testable

    python -m minirl.study.validate --reps 100      # the rates the closing notes report

Its flags are the fields of `ValidateArgs`, parsed and checked as every other command's are
(minirl.infra.cli, minirl.infra.validation): a bad value is one line naming the flag, and exit
status 2.
"""

from __future__ import annotations

import copy
import math
import sys
from dataclasses import dataclass, field
from typing import Annotated

import numpy as np
from transformers.hf_argparser import HfArg

import tasks
from minirl.infra.progress import progress_bar
from minirl.infra.validation import Range
from minirl.study import simulate
from minirl.study.claims import ALPHA, TaskFindings, Test, analyse_results

Sim = simulate.SimPolicy


@dataclass(frozen=True)
class Sizes:
    """A study's sizes, as minirl.study.simulate.sim_results takes them (defaults: the study's:
    5 training seeds, 60 instances, n = 4, T in {2, 4, 8, 12}, 200 + 200 states drawn from 8
    base episodes per instance, positions 1..3 after an error, up to 4 matches each)."""

    runs: int = 5
    instances: int = 60
    n: int = 4
    ts: tuple[int, ...] = (2, 4, 8, 12)
    fresh_states: int = 200
    post_states: int = 200
    samples: int = 2
    state_episodes: int = 8
    recovery_horizon: int = 3
    matches: int = 4


@dataclass(frozen=True)
class Truth:
    """One simulated arm and what each rule should say of it ("0", "+", "-" or "estimand")."""

    world: str
    arm: str
    rule: str
    direction: str
    describe: str


DEFICIT = Sim(0.6, 0.35, spread=0.6)
STICKY = Sim(0.6, 0.45, repeat=0.5)
PLAIN = Sim(0.6, 0.6)
WORLDS: dict[str, dict[str, Sim]] = {
    "deficit": {
        "base": DEFICIT,
        "single-step": DEFICIT.shift(0.6),
        "front-loaded": DEFICIT.shift(0.2).add(early=0.8),
        "hard-instances": DEFICIT.add(hard=1.0),
        "weak-states": DEFICIT.add(rate=1.2),
        "recovery": DEFICIT.shift(1.0, post_only=True),
        "patient": DEFICIT.add(patient=1.0),
        "hurried": DEFICIT.add(hurry=1.0),
    },
    "sticky": {
        "base": STICKY,
        "single-step": STICKY.shift(0.6),
        "unstuck": Sim(0.6, 0.45, repeat=0.1),
        "looping": Sim(0.6, 0.45, repeat=0.8),
    },
    "budget": {
        "base": PLAIN,
        "fixed-T4": PLAIN.add(hurry=1.2),
        "fixed-T12": PLAIN.add(patient=1.2),
        "budgetmix": PLAIN.add(hurry=1.2, patient=1.2),
        "process": PLAIN.add(hurry=1.2, patient=1.2),
    },
    "trailing": {
        "base": PLAIN,
        "fixed-T4": PLAIN.add(hurry=1.2),
        "fixed-T12": PLAIN.add(patient=1.2),
        "budgetmix": PLAIN.add(patient=1.2),
    },
    "flat": {
        "base": PLAIN,
        "fixed-T4": PLAIN.shift(0.6),
        "fixed-T12": PLAIN.shift(0.6),
        "budgetmix": PLAIN.shift(0.6),
    },
}
TRUTHS: tuple[Truth, ...] = (
    Truth("deficit", "single-step", "recovery", "0", "+0.6 log-odds everywhere"),
    Truth("deficit", "front-loaded", "recovery", "0", "+1.0 on turn 1, +0.2 later"),
    Truth("deficit", "hard-instances", "recovery", "0", "+1.0 on the harder instances"),
    Truth("deficit", "weak-states", "recovery", "estimand", "gain largest where it is weak"),
    Truth("deficit", "recovery", "recovery", "+", "+1.0 after an error only"),
    Truth("deficit", "patient", "recovery", "0", "+1.0 while >= 6 turns are left"),
    Truth("sticky", "single-step", "recovery", "estimand", "+0.6, repeats errors as base"),
    Truth("sticky", "unstuck", "recovery", "+", "repeats errors w.p. 0.1, not 0.5"),
    Truth("sticky", "looping", "recovery", "-", "repeats errors w.p. 0.8, not 0.5"),
    Truth("deficit", "single-step", "budget dependence", "0", "+0.6 log-odds everywhere"),
    Truth("deficit", "front-loaded", "budget dependence", "0", "+1.0 on turn 1, +0.2 later"),
    Truth("deficit", "hard-instances", "budget dependence", "0", "+1.0 on the harder instances"),
    Truth("deficit", "weak-states", "budget dependence", "+", "gains most after errors"),
    Truth("deficit", "recovery", "budget dependence", "+", "+1.0 after an error only"),
    Truth("deficit", "patient", "budget dependence", "+", "+1.0 while >= 6 turns are left"),
    Truth("deficit", "hurried", "budget dependence", "-", "+1.0 when <= 2 turns are left"),
    Truth("sticky", "single-step", "budget dependence", "0", "+0.6, repeats errors as base"),
    Truth("budget", "budgetmix", "robustness", "0", "both skills: = fixed-T4 at T=4"),
    Truth("trailing", "budgetmix", "robustness", "-", "is fixed-T12: trails fixed-T4 at T=4"),
    Truth("flat", "budgetmix", "robustness", "untestable", "fixed arms alike"),
    Truth("budget", "process", "process supervision", "0", "the same policy as BudgetMix"),
)


@dataclass
class Row:
    """One truth's results over the simulated studies."""

    truth: Truth
    z: list[float] = field(default_factory=list)
    bias: list[float] = field(default_factory=list)
    right: int = 0
    wrong: int = 0
    untestable: int = 0
    reps: int = 0

    @property
    def mean_z(self) -> float:
        return float(np.mean(self.z)) if self.z else math.nan

    @property
    def mean_bias(self) -> float:
        return float(np.mean(self.bias)) if self.bias else math.nan


@dataclass
class Rates:
    """Per truth: mean z, bias and verdict shares (see the module docstring)."""

    rows: list[Row]
    reps: int
    family: int
    check_passed: dict[str, float]  # world -> share of studies whose null passed its check

    def row(self, world: str, arm: str, rule: str) -> Row:
        return next(
            r for r in self.rows if (r.truth.world, r.truth.arm, r.truth.rule) == (world, arm, rule)
        )


def expected(study: simulate.SimStudy) -> simulate.SimStudy:
    """The study with every fixed state's counts replaced by their expectations (the exact
    chance times the samples): the statistics computed from it are their own estimands."""
    exact = copy.deepcopy(study)
    m = exact.results.meta.decision_samples
    for label, entry in exact.results.checkpoints.items():
        truth = exact.truth[label]
        entry.analysis.decision.optimal_counts = [m * q for q in truth["fresh"]]
        entry.analysis.matched.optimal_counts = [m * q for q in truth["matched"]]
        entry.analysis.from_errors.optimal_counts = [m * q for q in truth["post"]]
    return exact


def _test(found: TaskFindings, truth: Truth) -> Test:
    if truth.rule == "recovery":
        return found.where[truth.arm].test
    if truth.rule == "budget dependence":
        return found.budget[truth.arm].test
    if truth.rule == "robustness":
        return found.robust.test
    return found.process


def one_study(task: str, rep: int, replicates: int, sizes: Sizes) -> dict[Truth, tuple]:
    """Every truth's (z, bias, raw p, testable, estimand, null check) in one simulated study
    of each world."""
    out = {}
    for world, arms in WORLDS.items():
        truths = [t for t in TRUTHS if t.world == world]
        budget = any(t.rule == "budget dependence" for t in truths)
        study = simulate.sim_results(task, arms, seed=rep, continuations=False, **vars(sizes))
        mix = (min(sizes.ts[1:] or sizes.ts), max(sizes.ts))
        found = analyse_results(
            task, study.results, study.arms, replicates, rep, mix_range=mix, budget=budget
        )
        exact = None
        if any(t.direction == "estimand" for t in truths):
            exact = analyse_results(
                task, expected(study).results, study.arms, 2, rep, mix_range=mix, budget=False
            )
        for truth in truths:
            test = _test(found, truth)
            e = test.estimate
            z = e.value / e.se if e.se > 0 else math.nan
            target = 0.0 if truth.direction == "0" else math.nan
            if exact is not None and truth.direction == "estimand":
                target = _test(exact, truth).estimate.value
            bias = (e.value - target) / e.se if e.se > 0 else math.nan
            out[truth] = (z, bias, test.p, test.testable, target, found.check)
    return out


def verdict_rates(
    task: str = "fog",
    reps: int = 20,
    replicates: int = 400,
    family: int = 20,
    progress: bool = False,
    sizes: Sizes = Sizes(),
) -> Rates:
    """Run `reps` simulated studies of every world at `sizes` and tally each truth."""
    rows = {t: Row(t) for t in TRUTHS}
    passed: dict[str, list[bool]] = {}
    with progress_bar(disable=not progress) as bar:  # minirl's bar: plain lines in a notebook
        studies = [
            one_study(task, rep, replicates, sizes)
            for rep in bar.track(range(reps), description="simulated studies")
        ]
    for study in studies:
        for truth, (z, bias, p, testable, target, check) in study.items():
            row = rows[truth]
            row.reps += 1
            if check is not None and truth.rule == "budget dependence":
                passed.setdefault(truth.world, []).append(check.passed)
            if not testable:
                row.untestable += 1
                continue
            if not math.isnan(z):
                row.z.append(z)
            if not math.isnan(bias):
                row.bias.append(bias)
            sign = {"+": 1, "-": -1}.get(truth.direction, 0)
            if truth.direction == "estimand":
                sign = 0 if abs(target) < 1e-9 else int(math.copysign(1, target))
            positive = z > 0
            if sign and p < ALPHA / family and positive == (sign > 0):
                row.right += 1
            elif p < ALPHA and (not sign or positive != (sign > 0)):
                row.wrong += 1
    return Rates(
        list(rows.values()),
        reps,
        family,
        {w: float(np.mean(v)) for w, v in passed.items()},
    )


def table_rows(rates: Rates) -> list[list[str]]:
    """The report's and the CLI's rows: rule, world, arm, truth, mean z, bias, shares."""

    def share(k: int, row: Row) -> str:
        return f"{k / row.reps:.2f}" if row.reps else "n/a"

    def num(x: float) -> str:
        return "n/a" if math.isnan(x) else f"{x:+.2f}"

    return [
        [
            r.truth.rule,
            f"{r.truth.world}: {r.truth.arm} ({r.truth.describe})",
            r.truth.direction,
            num(r.mean_z),
            num(r.mean_bias),
            share(r.right, r),
            share(r.wrong, r),
            share(r.untestable, r),
        ]
        for r in rates.rows
    ]


HEADER = ["rule", "world: arm", "truth", "mean z", "bias (SE)", "right", "wrong", "untestable"]


@dataclass
class ValidateArgs:
    """python -m minirl.study.validate: the verdict rules on simulated studies with known truths."""

    task: str = HfArg(default="fog", help="Task the simulated policies play (see tasks/).")
    reps: Annotated[int, Range(ge=1, le=10_000, why="each simulated study takes seconds")] = HfArg(
        default=100, help="Simulated studies per world."
    )
    replicates: Annotated[int, Range(ge=10, le=100_000)] = HfArg(
        default=400, help="Bootstrap replicates of each test."
    )
    family: Annotated[int, Range(ge=1, le=10_000)] = HfArg(
        default=20, help="Tests in the real study (the size of Holm's family)."
    )


def main(argv: list[str] | None = None) -> int:
    from minirl.infra.cli import ArgParser, run_cli
    from minirl.infra.errors import ConfigError
    from minirl.infra.validation import check_fields

    parser = ArgParser(
        ValidateArgs,
        prog="minirl.study.validate",
        description=__doc__.splitlines()[0],
        allow_abbrev=False,
    )
    (args,) = parser.parse_args_into_dataclasses(args=argv)

    def work() -> int:
        check_fields(args)
        if args.task not in tasks.NAMES:
            raise ConfigError(f"--task {args.task!r}: valid tasks are {', '.join(tasks.NAMES)}")
        rates = verdict_rates(args.task, args.reps, args.replicates, args.family, True)
        print(f"{args.task}, {rates.reps} simulated studies per world at the study's sizes")
        widths = [19, 62, 9, 7, 9, 6, 6, 10]
        print(" ".join(h.ljust(w) for h, w in zip(HEADER, widths, strict=True)))
        for row in table_rows(rates):
            print(" ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
        checks = ", ".join(f"{w} {s:.2f}" for w, s in rates.check_passed.items())
        print(f"the null passed its check in: {checks}")
        return 0

    return run_cli("minirl.study.validate", work, lambda: "nothing was written")


if __name__ == "__main__":
    sys.exit(main())
