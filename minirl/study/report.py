"""Write the study's report.md: one section per claim of the paper, every sentence chosen by a rule.

The numbers and tests come from minirl.study.claims (`analyse` per task, then `adjust` over the
whole study, so every verdict carries its Holm-adjusted p); the planned power from
minirl.study.power; the plots from minirl.study.plots. This module only lays them out:
    power                 -> the planned standard errors and detectable effects, with assumptions,
                             and the verdict rules' error rates on simulated policies
    verdicts at a glance  -> one row per test: statistic, adjusted p, detectable effect, shown?
    1. budget dependence  -> ceiling, base Pass@(1,T), each arm's gap and null
    2. where RL helps     -> fresh and post-error rates, their changes, by kind of error
    3. robustness         -> BudgetMix's lead over each fixed arm, per T
    4. process rewards    -> the process arm against BudgetMix
and ends with links to every results file and the time each part took.
"""

from __future__ import annotations

import math
from pathlib import Path

from minirl.study.bootstrap import Estimate
from minirl.study.claims import ALPHA, REPLICATES, TaskFindings, Test, adjust, analyse
from minirl.study.power import plan
from minirl.study.run import StudyRecord, study_seeds
from minirl.study.validate import Rates, Sizes, Skills, verdict_rates


def fmt(x: float, se: float | None = None) -> str:
    if x is None or math.isnan(x):
        return "n/a"
    return f"{x:.3f}" if se is None or math.isnan(se) else f"{x:.3f} ± {se:.3f}"


def est(e: Estimate, signed: bool = True) -> str:
    return e.text() if signed else fmt(e.value, e.se)


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(r) + " |" for r in rows]


def verdict(test: Test, what: str) -> str:
    """The sentence a test's numbers choose."""
    numbers = f"{test.estimate.text()}, adjusted p = {test.adjusted:.3f}"
    if math.isnan(test.estimate.value):
        return f"undetermined for {test.arm}: {what} has no cases"
    if test.shown:
        return f"**shown** for {test.arm}: {what} is {numbers}"
    if test.opposite:
        return f"**the opposite** for {test.arm}: {what} is {numbers}"
    against = ""
    z = test.estimate.value / test.estimate.se if test.estimate.se > 0 else 0.0
    if not test.two_sided and z < -2:  # a one-sided test cannot say "the opposite"; the data can
        against = f"; the estimate points the other way, {-z:.1f} standard errors below 0"
    return (
        f"not shown for {test.arm}: {what} is {numbers}; the study could have detected "
        f"{test.detectable:.3f} (80% power){against}"
    )


def intro(study: StudyRecord, command: str, family: int) -> list[str]:
    args = study.args
    seeds = study_seeds(args)
    return [
        "# The study, second edition: what does multi-turn RL improve, on toy tasks?",
        "",
        f"Produced by `{command}` at commit {study.commit}"
        + (
            f" (this report written at {study.invoked_at})"
            if study.invoked_at != study.commit
            else ""
        )
        + ". "
        + (
            f"The invocation that measured it took {measured / 60:.1f} minutes; this one "
            f"reused its runs and evaluations and took {study.timings['total_seconds'] / 60:.1f}."
            if (measured := study.timings.get("measured_seconds"))
            else f"This invocation took {study.timings['total_seconds'] / 60:.1f} minutes; what "
            "it reused from an earlier one (status `reused` at the end) took the seconds listed "
            "there when it ran."
        ),
        "",
        f"Arms: (a) base; (b) fixed-T{args.generous}; (c) fixed-T{args.tight}; (d) BudgetMix "
        f"T in [{args.budget_min}, {args.budget_max}]"
        + ("; (e) process: BudgetMix with the per-turn process reward" if args.process else "")
        + f". {args.max_steps} steps each, {args.tasks_per_step} instances x "
        f"G={args.num_generations} per step, training seeds {', '.join(map(str, seeds))}. "
        f"Evaluation: {args.instances} held-out instances, n={args.n} episodes per instance and "
        f"T, budget visible; {args.decision_states} fresh and up to {args.recovery_states} "
        f"post-error states drawn once from base episodes, {args.decision_samples} samples per "
        "state and arm. Every arm plays the same instances and states from the same sampling "
        "seed.",
        "",
        f"Uncertainty: a paired bootstrap ({REPLICATES} replicates) that resamples instances "
        "(with all their episodes and states) once for all arms, and each arm's training runs "
        "(minirl/study/bootstrap.py). ± is one bootstrap standard error. Every verdict is a "
        f"one-sided test (two-sided for process supervision) whose p-value is Holm-adjusted "
        f"over all {family} tests of this report; **shown** means adjusted p < {ALPHA}.",
        "",
    ]


def validation_lines(rates: Rates, task: str, family: int) -> list[str]:
    """The verdict rules' measured error rates on simulated policies (minirl.study.validate)."""
    s = Skills()
    rows = [[name, "no effect", f"{share:.2f}"] for name, share in rates.false_shown.items()]
    rows += [[name, "real effect", f"{share:.2f}"] for name, share in rates.power.items()]
    return [
        f"The rules themselves, checked on {rates.reps} simulated "
        f"{'study' if rates.reps == 1 else 'studies'} of these sizes on "
        f"{task} (python -m minirl.study.validate): policies with known skills, base optimal "
        f"with probability {s.q}, a single-step-only arm (+{s.step} log-odds everywhere), a "
        f"recovery-only arm (+{s.recovery} after an error only), and BudgetMix either equal "
        f"to a fixed arm or ahead of it by +{s.lead} everywhere. Share called shown, read at "
        f"the unadjusted {ALPHA} for no-effect truths (the most Holm can allow one test) and "
        f"at {ALPHA}/{family} for real effects (the least it rejects):",
        "",
        *table(["rule, policy", "truth", "shown"], rows),
        "",
    ]


def power_section(study: StudyRecord, found: dict[str, TaskFindings], family: int) -> list[str]:
    args = study.args
    f = next(iter(found.values()))
    post = min(len(x.results.meta.post_error_states) for x in found.values())
    planned = plan(
        instances=args.instances,
        n=args.n,
        ts=list(f.results.meta.ts),
        fresh_states=args.decision_states,
        post_states=max(post, 1),
        samples=args.decision_samples,
        seeds=len(study_seeds(args)),
        family=family,
    )
    rows = [[p.statistic, p.scale, f"{p.se:.3f}", f"{p.detectable:.3f}"] for p in planned]
    achieved: dict[str, list[float]] = {}
    for x in found.values():
        for t in x.tests():
            achieved.setdefault(t.claim, []).append(t.estimate.se)
    lines = [
        "## Power",
        "",
        "Planned from the sizes above (minirl/study/power.py), assuming rates near 0.5, an "
        "intra-instance correlation of 0.3 and a seed spread of 0.05, with the family's "
        f"Bonferroni level {ALPHA}/{family}. The detectable effect has 80% power:",
        "",
        *table(["statistic", "scale", "planned SE", "detectable"], rows),
        "",
        "Achieved bootstrap SEs (median over tasks and arms): "
        + ", ".join(f"{claim} {sorted(v)[len(v) // 2]:.3f}" for claim, v in achieved.items())
        + ". Each verdict below states the effect its own SE could have detected.",
        "",
    ]
    task = "fog" if "fog" in found else next(iter(found))
    sizes = Sizes(
        runs=len(study_seeds(args)),
        instances=args.instances,
        n=args.n,
        ts=tuple(f.results.meta.ts),
        fresh_states=args.decision_states,
        post_states=args.recovery_states,
        samples=args.decision_samples,
        state_episodes=args.state_episodes,
    )
    rates = verdict_rates(
        task, Skills(), args.validation_reps, replicates=200, family=family, sizes=sizes
    )
    return lines + validation_lines(rates, task, family)


def answer(test: Test) -> str:
    """The glance table's last column."""
    if test.shown:
        return "**yes**"
    if test.opposite:
        return "opposite"
    se = test.estimate.se
    if not test.two_sided and se > 0 and test.estimate.value < -2 * se:
        return "no (points the other way)"
    return "no"


def glance(found: dict[str, TaskFindings]) -> list[str]:
    rows = []
    for task, f in found.items():
        for t in f.tests():
            rows.append(
                [
                    task,
                    t.claim,
                    t.arm,
                    t.estimate.text(),
                    f"{t.adjusted:.3f}",
                    f"{t.detectable:.3f}",
                    answer(t),
                ]
            )
    header = ["task", "claim", "arm", "statistic", "adjusted p", "detectable", "shown?"]
    return ["## Verdicts at a glance", "", *table(header, rows), ""]


def budget_section(found: dict[str, TaskFindings], plots: dict[str, dict[str, str]]) -> list[str]:
    lines = [
        "## 1. Budget dependence",
        "",
        "The paper: the advantage of trajectory-level RL over the base model needs a sufficient "
        "turn budget, and shrinks when budgets tighten. Gap = Pass@(1,T) of the arm minus base. "
        "A gain in single-step quality alone already makes the gap grow with T (it compounds, "
        "and a tight T caps every policy at the oracle's ceiling), so each gap is set against "
        "its null: what the arm's single-step gain on the fresh states, carried through the "
        "turns by a simulated policy on the real task, buys at T (minirl/study/simulate.py). "
        "The statistic is the growth of gap − null from the smallest to the largest T. The "
        'null is only as good as its model: the row "the null\'s simulated base" is the '
        "simulated policy at base's measured single-step rates, and where it lags base's real "
        "Pass@(1,T) at large T (its errors cost more turns than the model's real ones), the "
        "null has more room to grow there than the arms had, and a negative growth is partly "
        "the model's.",
        "",
    ]
    for task, f in found.items():
        ts = f.results.meta.ts
        rows = [["oracle's success (ceiling)"] + [fmt(*f.ceiling[t]) for t in ts]]
        rows.append(["base Pass@(1,T)"] + [est(f.pass1["base"][t], False) for t in ts])
        rows.append(["the null's simulated base"] + [fmt(f.model_base[t]) for t in ts])
        for arm, row in f.budget.items():
            rows.append([f"gap {arm}"] + [est(row.gap[t]) for t in ts])
            rows.append([f"null {arm}"] + [f"{row.null[t]:+.3f}" for t in ts])
        lines += [f"### {task}", "", *table(["", *[f"T={t}" for t in ts]], rows), ""]
        for row in f.budget.values():
            lines.append(
                f"- {verdict(row.test, 'the growth of the excess gain')} (single-step gain "
                f"{row.step_gain.text()} in log-odds)."
            )
        lines += ["", f"![gap against T]({plots[task]['gap']})", ""]
    return lines


def where_section(found: dict[str, TaskFindings], plots: dict[str, dict[str, str]]) -> list[str]:
    lines = [
        "## 2. Where RL helps",
        "",
        "The paper: RL does not uniformly raise single-step decision quality; its strength is "
        "error recovery. Both are asked of every arm in the same fixed states: fresh states "
        "(no error in their history) for single-step quality, and the states just after a "
        "base-policy error for recovery (minirl/eval/recovery.py). A policy that only gains "
        "single-step quality gains the same log-odds in both; the test is whether the "
        "post-error gain is larger. Success from the post-error states within the turns left "
        "is reported beside it (it compounds single-step gains, so no verdict reads it).",
        "",
    ]
    names = {"step": "optimal, fresh", "post_step": "optimal, post-error"}
    names["post_success"] = "success from post-error"
    for task, f in found.items():
        base = f.rates["base"]
        rows = [["base", *[est(base[k], False) for k in names]]]
        for arm, row in f.where.items():
            rows.append([f"Δ {arm}", est(row.step), est(row.post_step), est(row.post_success)])
        kinds = ", ".join(f"{k} {v}" for k, v in f.kinds.items()) or "none"
        lines += [f"### {task}", "", *table(["", *names.values()], rows), ""]
        lines += [f"Post-error states by kind of error: {kinds}.", ""]
        if len(f.kinds) > 1:
            header = ["Δ success from post-error", *f.kinds]
            kind_rows = [
                [arm, *[est(row.by_kind[k]) for k in f.kinds]] for arm, row in f.where.items()
            ]
            lines += [*table(header, kind_rows), ""]
        for row in f.where.values():
            lines.append(f"- {verdict(row.test, 'dlogit(post-error) − dlogit(fresh)')}.")
        old = f.results.checkpoints
        lines.append(
            "- For comparison, the first edition's \"success after an error\" over each arm's "
            "own episodes (a selected set; lesson 7): base "
            + fmt(old["base"].analysis.recovery.after_error.rate)
            + "; "
            + ", ".join(
                f"{label} {fmt(old[label].analysis.recovery.after_error.rate)}"
                for label in old
                if label != "base"
            )
            + "."
        )
        lines += ["", f"![where RL helps]({plots[task]['where']})", ""]
    return lines


def robustness_section(found: dict[str, TaskFindings]) -> list[str]:
    lines = [
        "## 3. BudgetMix robustness",
        "",
        "The paper: varying the budget during training gives robust performance across "
        "execution budgets. Lead = BudgetMix's Pass@(1,T) minus a fixed arm's, per T and "
        "averaged over T. Shown when BudgetMix leads every fixed arm.",
        "",
    ]
    for task, f in found.items():
        if not f.robust:
            lines += [f"- {task}: no BudgetMix arm.", ""]
            continue
        ts = f.results.meta.ts
        rows = [
            [arm, est(row.lead), *[est(row.per_t[t]) for t in ts]] for arm, row in f.robust.items()
        ]
        header = ["BudgetMix against", "mean lead", *[f"T={t}" for t in ts]]
        lines += [f"### {task}", "", *table(header, rows), ""]
        every = all(row.test.shown for row in f.robust.values())
        lines.append(
            f"- {'**shown**' if every else 'not shown'}: BudgetMix leads "
            + ("every" if every else "not every")
            + " fixed arm beyond noise."
        )
        lines += [f"- {verdict(row.test, 'the mean lead')}." for row in f.robust.values()]
        lines += ["", f"![Pass@(K,T) curves]({task}/passkt_curves.png)", ""]
    return lines


def process_section(found: dict[str, TaskFindings]) -> list[str]:
    lines = ["## 4. Process supervision", ""]
    for task, f in found.items():
        if not f.process:
            lines.append(f"- {task}: not run (pass --process true to add the process arm).")
            continue
        for name, test in f.process.items():
            lines.append(f"- {task}: {verdict(test, f'process − budgetmix in {name}')}.")
    return [*lines, ""]


def files_section(study: StudyRecord) -> list[str]:
    lines = ["## Files", ""]
    for task in study.tasks:
        lines.append(f"- {task}: [results.json]({task}/results.json)")
    timing = ", ".join(
        f"{k} {v['seconds']:.0f} s" + (" (reused)" if v.get("status") == "reused" else "")
        for k, v in study.timings.items()
        if isinstance(v, dict)
    )
    return [*lines, "", f"Timings: {timing}.", ""]


def write_report(study: StudyRecord, root: Path, command: str) -> Path:
    """Analyse every task of `study` (results under `root`), draw its plots, write report.md."""
    from minirl.study import plots as study_plots  # matplotlib loads only when a report is drawn

    found = {
        task: analyse(task, root / entry.results, entry.arms) for task, entry in study.tasks.items()
    }
    family = len(adjust(found))
    plots = study_plots.draw(found, root)
    lines = intro(study, command, family) + power_section(study, found, family) + glance(found)
    lines += budget_section(found, plots) + where_section(found, plots)
    lines += robustness_section(found) + process_section(found) + files_section(study)
    path = root / "report.md"
    path.write_text("\n".join(lines))
    return path
