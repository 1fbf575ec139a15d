"""How often each verdict rule says "shown", measured on simulated policies with known skills.

A verdict rule is only as good as its error rates at the study's sizes. Here they are measured:
simulated checkpoints (minirl.study.simulate) whose skills are known by construction are put
through the study's own analysis (minirl.study.claims), many times over, and the verdicts counted.

The policies of one simulated study, against a base that is optimal with probability q:
    fixed-T4    single-step only: its log-odds rise by `step` in every state (no recovery skill)
    fixed-T12   recovery only: its log-odds rise by `recovery` after an error, nowhere else
    budgetmix   the same policy as fixed-T12 (so BudgetMix's lead over fixed-T12 is truly 0)
and of a second, for robustness: fixed-T12 = base, budgetmix = base shifted by `lead` everywhere.

Two rates per rule, each conservative for Holm's adjustment over a study of `family` tests:
    false "shown"  a test whose truth is "no effect", read at the unadjusted level alpha (Holm can
                   at best reach it, when every other test is rejected first);
    power          a test with a real effect, read at Bonferroni's alpha / family (Holm's first,
                   strictest step: it rejects at least this often).

    python -m minirl.study.validate --reps 100      # the rates the closing notes report

Its flags are the fields of `ValidateArgs`, parsed and checked as every other command's are
(minirl.cli, minirl.validation): a bad value is one line naming the flag, and exit status 2.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Annotated

from transformers.hf_argparser import HfArg

import tasks
from minirl.progress import progress_bar
from minirl.study import simulate
from minirl.study.claims import ALPHA, analyse_results
from minirl.validation import Range


@dataclass(frozen=True)
class Skills:
    """The simulated arms' true effects, in log-odds (see the module docstring)."""

    q: float = 0.6  # the base's chance of an optimal action
    step: float = 0.6
    recovery: float = 1.0
    lead: float = 1.0


@dataclass(frozen=True)
class Sizes:
    """A study's sizes, as minirl.study.simulate.sim_results takes them (defaults: the committed
    study's: 3 training seeds, 60 instances, n = 4, T in {2, 4, 8, 12}, 200 + 200 states)."""

    runs: int = 3
    instances: int = 60
    n: int = 4
    ts: tuple[int, ...] = (2, 4, 8, 12)
    fresh_states: int = 200
    post_states: int = 200
    samples: int = 2
    state_episodes: int = 4


@dataclass
class Rates:
    """Per rule, the share of simulated studies that called it shown."""

    false_shown: dict[str, float]  # rules whose truth is "no effect", at alpha
    power: dict[str, float]  # rules with a real effect, at alpha / family
    reps: int


def p_values(
    task: str, skills: Skills, rep: int, replicates: int, sizes: Sizes = Sizes()
) -> dict[str, float]:
    """The raw p of every rule in one simulated study pair (keys say which truth they test)."""
    base = simulate.SimPolicy(skills.q, skills.q)
    recovering = base.shift(skills.recovery, post_only=True)
    at = vars(sizes)
    one = simulate.sim_results(
        task,
        {
            "base": base,
            "fixed-T4": base.shift(skills.step),
            "fixed-T12": recovering,
            "budgetmix": recovering,
        },
        seed=rep,
        **at,
    )
    found = analyse_results(task, one.results, one.arms, replicates=replicates, seed=rep)
    two = simulate.sim_results(
        task,
        {"base": base, "fixed-T12": base, "budgetmix": base.shift(skills.lead)},
        seed=rep,
        **at,
    )
    ahead = analyse_results(task, two.results, two.arms, replicates=replicates, seed=rep)
    return {
        "null: recovery, single-step-only arm": found.where["fixed-T4"].test.p,
        "null: budget dependence, single-step-only arm": found.budget["fixed-T4"].test.p,
        "null: robustness, BudgetMix = fixed-T12": found.robust["fixed-T12"].test.p,
        "effect: recovery, recovery-only arm": found.where["fixed-T12"].test.p,
        "effect: budget dependence, recovery-only arm": found.budget["fixed-T12"].test.p,
        "effect: robustness, BudgetMix ahead everywhere": ahead.robust["fixed-T12"].test.p,
    }


def verdict_rates(
    task: str = "fog",
    skills: Skills = Skills(),
    reps: int = 20,
    replicates: int = 400,
    family: int = 36,
    progress: bool = False,
    sizes: Sizes = Sizes(),
) -> Rates:
    """Run `reps` simulated studies of `sizes` and count each rule's verdicts (the docstring)."""
    with progress_bar(disable=not progress) as bar:  # minirl's bar: plain lines in a notebook
        runs = [
            p_values(task, skills, rep, replicates, sizes)
            for rep in bar.track(range(reps), description="simulated studies")
        ]

    def share(key: str, level: float) -> float:
        return sum(r[key] < level for r in runs) / reps

    keys = list(runs[0])
    return Rates(
        false_shown={k[6:]: share(k, ALPHA) for k in keys if k.startswith("null")},
        power={k[8:]: share(k, ALPHA / family) for k in keys if k.startswith("effect")},
        reps=reps,
    )


@dataclass
class ValidateArgs:
    """python -m minirl.study.validate: the verdict rules' error rates on simulated studies."""

    task: str = HfArg(default="fog", help="Task the simulated policies play (see tasks/).")
    reps: Annotated[int, Range(ge=1, le=10_000, why="each simulated study takes ~5 s")] = HfArg(
        default=100, help="Simulated studies."
    )
    replicates: Annotated[int, Range(ge=10, le=100_000)] = HfArg(
        default=1000, help="Bootstrap replicates of each test."
    )
    family: Annotated[int, Range(ge=1, le=10_000)] = HfArg(
        default=36, help="Tests in the real study (the size of Holm's family)."
    )


def main(argv: list[str] | None = None) -> int:
    from minirl.cli import ArgParser, run_cli
    from minirl.errors import ConfigError
    from minirl.validation import check_fields

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
        rates = verdict_rates(args.task, Skills(), args.reps, args.replicates, args.family, True)
        print(f"{args.task}, {rates.reps} simulated studies at the study's sizes, {Skills()}")
        for name, share in rates.false_shown.items():
            print(f"  false 'shown' (alpha {ALPHA}): {share:.2f}  {name}")
        for name, share in rates.power.items():
            print(f"  shown (alpha/{args.family}):   {share:.2f}  {name}")
        return 0

    return run_cli("minirl.study.validate", work, lambda: "nothing was written")


if __name__ == "__main__":
    sys.exit(main())
