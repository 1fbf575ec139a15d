"""Write the study's report.md: one section per claim of the paper, every sentence chosen by a rule.

The numbers and tests come from minirl.study.claims (`analyse` per task, then `adjust` over the
whole study, so every verdict carries its Holm-adjusted p); the planned power from
minirl.study.power; the rules' behaviour on simulated truths from minirl.study.validate; the
plots from minirl.study.plots. This module only lays them out:
    what it shows         -> the verdicts counted: shown, the opposite, neither, not testable
    power and the rules   -> planned standard errors, and the rules on simulated truths
    0. gate and deficit   -> did RL move each task; each base's recovery deficit, in the same
                             position and matched
    verdicts at a glance  -> one row per test: statistic, df, adjusted p, detectable, verdict
    1. budget dependence  -> the null's check, then each arm's gap, null and excess
    2. where RL helps     -> random fresh, matched post-error and matched fresh rates, by kind;
                             the same-position recovery test
    3. robustness         -> the fixed arms' specialisation, BudgetMix against the best per T
    4. process rewards    -> the process arm against BudgetMix
and ends with links to every results file and the time each part took.
"""

from __future__ import annotations

import math
from pathlib import Path

from minirl.study.bootstrap import Estimate
from minirl.study.claims import ALPHA, REPLICATES, TaskFindings, Test, adjust, analyse
from minirl.study.power import detectable, plan
from minirl.study.run import StudyRecord, study_seeds
from minirl.study.validate import HEADER, Rates, Sizes, table_rows, verdict_rates


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
    e = test.estimate
    if math.isnan(e.value):
        return f"undetermined for {test.arm}: {what} has no cases"
    if not test.testable:
        return f"not testable for {test.arm}: {test.untestable} ({what} {e.text()})"
    numbers = f"{e.text()} (df {e.df:.0f}), adjusted p = {test.adjusted:.3g}"
    if test.shown:
        return f"**shown** for {test.arm}: {what} is {numbers}"
    if test.opposite:
        return f"**the opposite** for {test.arm}: {what} is {numbers}"
    return (
        f"not shown either way for {test.arm}: {what} is {numbers}; the study could have "
        f"detected ±{test.detectable:.3f} (80% power)"
    )


def intro(study: StudyRecord, command: str, family: int) -> list[str]:
    args = study.args
    seeds = study_seeds(args)
    return [
        "# The study, third edition: what does multi-turn RL improve, on toy tasks?",
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
        f"Base: `{args.model}` (its recovery deficit is measured in section 0"
        + (f", beside the control base `{args.control}`" if args.control else "")
        + f"). Arms: (a) base; (b) fixed-T{args.generous}; (c) fixed-T{args.tight}; (d) "
        f"BudgetMix T in [{args.budget_min}, {args.budget_max}]"
        + ("; (e) process: BudgetMix with the per-turn process reward" if args.process else "")
        + f". {args.max_steps} steps each, {args.tasks_per_step} instances x "
        f"G={args.num_generations} per step, training seeds {', '.join(map(str, seeds))}. "
        f"Evaluation: {args.instances} held-out instances, n={args.n} episodes per instance and "
        f"T, budget visible; {args.decision_states} random fresh states, up to "
        f"{args.recovery_states} post-error states at positions 1..{args.recovery_horizon} "
        f"after a base error with up to {args.recovery_matches} matched fresh states each, all "
        f"drawn once from {args.state_episodes} base episodes per instance; "
        f"{args.decision_samples} samples per state and arm. Every arm plays the same instances "
        "and states from the same sampling seed.",
        "",
        f"Uncertainty: a bootstrap over instances ({REPLICATES} replicates, every episode and "
        "state of a drawn instance, once for all arms) and, for the trained arms, the spread of "
        "their runs, read at the run level with Student's t (Welch-Satterthwaite degrees of "
        "freedom; minirl/study/bootstrap.py). ± is one standard error. Every verdict is a "
        "two-sided test: **shown** when the statistic is positive and its Holm-adjusted p < "
        f"{ALPHA}, **the opposite** when it is negative and adjusted p < {ALPHA}. The family "
        f"is the {family} testable tests of the tasks where RL moved the policy; a test that "
        "cannot be tested (the gate, the null's check, the fixed arms' specialisation) says why "
        "and leaves it.",
        "",
    ]


def summary(found: dict[str, TaskFindings]) -> list[str]:
    """What the study shows, what it shows the opposite of, and what it cannot test."""
    tests = [t for f in found.values() for t in f.tests()]

    def named(group: list[Test]) -> str:
        return "; ".join(f"{t.task} {t.claim} ({t.arm})" for t in group) or "nothing"

    neither = [t for t in tests if t.testable and not (t.shown or t.opposite)]
    return [
        "## What the study shows",
        "",
        f"- **Shown**: {named([t for t in tests if t.shown])}.",
        f"- **The opposite**: {named([t for t in tests if t.opposite])}.",
        f"- Neither, within what the study could detect: {len(neither)} tests.",
        f"- **Not testable**: {named([t for t in tests if not t.testable])}.",
        "",
    ]


def validation_lines(rates: Rates, task: str) -> list[str]:
    """The verdict rules on simulated truths (minirl.study.validate), at these sizes."""
    checks = ", ".join(f"{w} world {s:.2f}" for w, s in rates.check_passed.items())
    return [
        f"The rules themselves, on {rates.reps} simulated "
        f"{'study' if rates.reps == 1 else 'studies'} per world at these sizes on {task} "
        "(python -m minirl.study.validate; the worlds and truths are described there): truths "
        "outside the null's own model (instances of unequal difficulty, gains front-loaded in "
        "the turn, on hard instances, largest where the policy is weak; budget-aware policies; "
        "errors repeated rather than uniform). Mean z is the estimate over its SE, averaged "
        "(for a no-effect truth: its bias in SEs); bias is (estimate - estimand) / SE where the "
        "estimand is known; right is the share of verdicts in the truth's direction at "
        f"{ALPHA}/{rates.family}, wrong the share against it (or on a no-effect truth) at the "
        f"unadjusted {ALPHA}.",
        "",
        *table(HEADER, table_rows(rates)),
        "",
        f"The null passed its own check in: {checks or 'no world that tests it'}.",
        "",
    ]


def power_section(study: StudyRecord, found: dict[str, TaskFindings], family: int) -> list[str]:
    args = study.args
    f = next(iter(found.values()))
    matched = min(len(x.results.meta.matched_states) for x in found.values())
    post = min(len(x.results.meta.post_error_states) for x in found.values())
    planned = plan(
        instances=args.instances,
        n=args.n,
        ts=list(f.results.meta.ts),
        fresh_states=max(matched, 1),
        post_states=max(post, 1),
        samples=args.decision_samples,
        seeds=len(study_seeds(args)),
        family=max(family, 1),
    )
    rows = [[p.statistic, p.scale, f"{p.se:.3f}", f"{p.detectable:.3f}"] for p in planned]
    achieved: dict[str, list[float]] = {}
    for x in found.values():
        for t in x.tests():
            achieved.setdefault(t.claim, []).append(t.estimate.se)
    lines = [
        "## Power, and the rules on simulated truths",
        "",
        "Planned from the sizes above (minirl/study/power.py), assuming rates near 0.5, an "
        "intra-instance correlation of 0.3 and a seed spread of 0.05, with the family's "
        f"Bonferroni level {ALPHA}/{max(family, 1)}, two-sided. The detectable effect has 80% "
        "power:",
        "",
        *table(["statistic", "scale", "planned SE", "detectable"], rows),
        "",
        "Achieved SEs (median over tasks and arms): "
        + ", ".join(
            f"{claim} {sorted(v)[len(v) // 2]:.3f}"
            for claim, v in achieved.items()
            if not any(math.isnan(x) for x in v)
        )
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
        recovery_horizon=args.recovery_horizon,
        matches=args.recovery_matches,
    )
    rates = verdict_rates(
        task, args.validation_reps, replicates=200, family=max(family, 1), sizes=sizes
    )
    return lines + validation_lines(rates, task)


def gate_section(found: dict[str, TaskFindings], control: dict[str, TaskFindings]) -> list[str]:
    lines = [
        "## 0. Did RL move the policy, and has the base anything to recover from?",
        "",
        "The gate: each arm's single-step gain, the change in log-odds of an optimal action on "
        "the random fresh states, with the smallest gain the study could detect. A task where "
        f"no arm's gain differs from 0 (at {ALPHA} / arms) is not testable: RL did not move "
        "the policy there. The deficit, in the same position: the base's log-odds of an optimal "
        "action just after each failed first error of its own minus just before it, where "
        "nothing but the failed attempt differs (exact chances, minirl/eval/position.py); "
        "below 0, the base acts worse after a failure, and has something to recover from. "
        "Beside it P(repeat), its chance of playing the failed action again, and two "
        "comparisons with other states: with the post-error states' matched fresh states (same "
        "turn, distance and number of optimal actions) and with random fresh states. Both carry "
        "selection (a post-error state is one where the base has just erred), which the control "
        "base, uniform noise with no reason to act differently after an error, shows.",
        "",
    ]
    for task, f in found.items():
        arms = max(len(f.gate.gains), 1)
        rows = [
            [arm, g.text(), f"{g.df:.0f}", f"{g.p:.3g}", fmt(detectable(g.se, arms, df=g.df))]
            for arm, g in f.gate.gains.items()
        ]
        moved = "RL moved the policy" if f.gate.moved else "RL did not move it: not testable"
        lines += [
            f"### {task}: {moved}",
            "",
            *table(["arm", "single-step gain (log-odds)", "df", "p", "detectable"], rows),
            "",
        ]
        bases = [("base", f)] + ([("control", control[task])] if task in control else [])
        rows = [
            [
                f"{name} ({x.results.meta.model})",
                x.deficit.position.text(),
                f"{fmt(x.deficit.repeat[0])} → {fmt(x.deficit.repeat[1])}",
                str(x.deficit.pairs),
                x.deficit.matched.text(),
                x.deficit.unmatched.text(),
                fmt(x.deficit.post.value, x.deficit.post.se),
                fmt(x.deficit.fresh.value, x.deficit.fresh.se),
                f"{len(x.results.meta.post_error_states)} / {x.deficit.unmatched_states}",
            ]
            for name, x in bases
        ]
        header = [
            "base",
            "deficit, same position",
            "P(repeat) before → after",
            "pairs",
            "deficit, matched",
            "vs random fresh",
            "optimal, post-error",
            "optimal, matched fresh",
            "post-error states / unmatched",
        ]
        lines += [*table(header, rows), ""]
        balance = f.deficit.balance
        same = f.deficit.same_instance
        share = "none" if math.isnan(same) else f"{same:.0%}"
        if balance:
            rows = [[k, *[fmt(v) for v in means.values()]] for k, means in balance.items()]
            lines += [
                "Covariate means of the states (the matched fresh states weighted as the "
                f"comparison weighs them; {share} of the matches come from the post-error "
                "state's own instance):",
                "",
                *table(["states", "turn", "distance", "optimal actions"], rows),
                "",
            ]
    return lines


def answer(test: Test) -> str:
    """The glance table's last column."""
    if not test.testable:
        return "not testable"
    if test.shown:
        return "**shown**"
    if test.opposite:
        return "**the opposite**"
    return "neither"


def glance(found: dict[str, TaskFindings]) -> list[str]:
    rows = [
        [
            task,
            t.claim,
            t.arm,
            t.estimate.text(),
            f"{t.estimate.df:.0f}" if not math.isnan(t.estimate.df) else "n/a",
            f"{t.adjusted:.3g}" if t.testable else "—",
            f"{t.detectable:.3f}",
            answer(t),
        ]
        for task, f in found.items()
        for t in f.tests()
    ]
    header = ["task", "claim", "arm", "statistic", "df", "adjusted p", "detectable", "verdict"]
    return ["## Verdicts at a glance", "", *table(header, rows), ""]


def budget_section(found: dict[str, TaskFindings], plots: dict[str, dict[str, str]]) -> list[str]:
    lines = [
        "## 1. Budget dependence",
        "",
        "The paper: the advantage of trajectory-level RL over the base model needs a sufficient "
        "turn budget, and shrinks when budgets tighten. Gap = Pass@(1,T) of the arm minus base. "
        "A gain in single-step quality alone already makes the gap grow with T, so each gap is "
        "set against its null: what the arm's single-step gains, measured per turn on the "
        "fresh states and carried through the turns by a simulated policy on the real task, "
        "buy at T (minirl/study/simulate.py). The statistic is the least-squares slope of "
        "gap − null over every T, times the T range. The null may judge only if its simulated "
        "base (base's measured rates per turn, fresh and after an error, and one log-odds "
        "level fitted to base's mean Pass@(1,T)) is within one standard error of base's real "
        "Pass@(1,T) at every T; the table shows the check.",
        "",
    ]
    for task, f in found.items():
        ts = f.results.meta.ts
        rows = [["oracle's success (ceiling)"] + [fmt(*f.ceiling[t]) for t in ts]]
        rows.append(["base Pass@(1,T)"] + [est(f.pass1["base"][t], False) for t in ts])
        if f.check is not None:
            rows.append(["the null's simulated base"] + [fmt(f.check.model_base[t]) for t in ts])
            rows.append(["one SE of their difference"] + [fmt(f.check.tolerance[t]) for t in ts])
        for arm, row in f.budget.items():
            rows.append([f"gap {arm}"] + [est(row.gap[t]) for t in ts])
            rows.append([f"null {arm}"] + [f"{row.null[t]:+.3f}" for t in ts])
            rows.append([f"gap − null {arm}"] + [est(row.excess[t]) for t in ts])
        lines += [f"### {task}", "", *table(["", *[f"T={t}" for t in ts]], rows), ""]
        if f.check is not None:
            lines.append(
                f"- The null's check: {'passed' if f.check.passed else '**failed**'} (fitted "
                f"level {f.check.level:+.2f} log-odds)."
            )
        for row in f.budget.values():
            lines.append(
                f"- {verdict(row.test, 'the growth of gap − null')} (single-step gain "
                f"{row.step_gain.text()} in log-odds)."
            )
        lines += ["", f"![gap against T]({plots[task]['gap']})", ""]
    return lines


def where_section(found: dict[str, TaskFindings], plots: dict[str, dict[str, str]]) -> list[str]:
    lines = [
        "## 2. Where RL helps",
        "",
        "The paper: RL does not uniformly raise single-step decision quality; its strength is "
        "error recovery. Every arm is asked in the same fixed states: random fresh states (no "
        "error in their history), post-error states (the base's own conversation 1 to h "
        "actions after its first error, so a policy that gets back on track one move late is "
        "seen), and for each post-error state its matched fresh states, with the same turn, "
        "distance to the goal and number of optimal actions (minirl/eval/recovery.py). The "
        "test is in the same position (section 0's pairs), from exact chances: per pair, the "
        "arm's change of log-odds against base just after the failed error minus just before "
        "it, less the arm's gain difference between the two states' turns (fitted on the "
        "states before the errors, one level per instance), averaged over the pairs. A policy "
        "whose gain depends only on where it is and when scores 0, whatever its size; one that "
        "acts better after a failure than its base did, above 0. The second edition's "
        "dlogit(post-error) − "
        "dlogit(matched fresh) is shown beside it as a description, not a test (it carries "
        "selection; section 0). Success from the post-error states within the turns left is "
        "reported too (it compounds single-step gains, so no verdict reads it).",
        "",
    ]
    names = {
        "step": "optimal, random fresh",
        "post_m": "optimal, post-error",
        "matched": "optimal, matched fresh",
        "post_success": "success from post-error",
    }
    for task, f in found.items():
        base = f.rates["base"]
        rows = [["base", *[est(base[k], False) for k in names]]]
        for arm, row in f.where.items():
            rows.append(
                [
                    f"Δ {arm}",
                    est(row.step),
                    est(row.matched_post),
                    est(row.matched_fresh),
                    est(row.post_success),
                ]
            )
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
            what = (
                "the gain over base just after a failed error less just before it, turn-corrected"
            )
            lines.append(
                f"- {verdict(row.test, what)} "
                f"(not tested: without the turn correction {row.uncorrected.text()}; on "
                f"matched states {row.matched.text()})."
            )
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
        "execution budgets, i.e. BudgetMix holds its own against the specialist at each budget "
        "of its range. First the fixed arms must specialise: (tight − generous) at the range's "
        "smallest T minus at its largest, positive at one-sided "
        f"{ALPHA}. Then BudgetMix's lead over the fixed arm that is best at each T: shown when "
        "it leads at every T, the opposite when it trails at some T; the estimate is the lead "
        "at its worst budget. Where neither, the equivalence bound says how close it is "
        "(within ± bound of the best fixed arm at every T of the range, two one-sided tests at "
        "5% each).",
        "",
    ]
    for task, f in found.items():
        r = f.robust
        if r is None:
            lines += [f"- {task}: no BudgetMix arm or fewer than two fixed arms.", ""]
            continue
        rows = [[f"T={t}", r.best[t], est(lead)] for t, lead in r.leads.items()]
        lines += [
            f"### {task}",
            "",
            f"Specialisation of the fixed arms: {r.specialisation.text()} "
            f"(df {r.specialisation.df:.0f}).",
            "",
            *table(["budget", "best fixed arm there", "BudgetMix − it"], rows),
            "",
            f"- {verdict(r.test, 'the lead at the worst budget')}.",
        ]
        if r.test.testable and not (r.test.shown or r.test.opposite):
            lines.append(
                f"- Equivalence: BudgetMix is within ±{r.bound:.3f} of the best fixed arm at "
                "every budget of its range."
            )
        lines += ["", f"![Pass@(K,T) curves]({task}/passkt_curves.png)", ""]
    return lines


def process_section(found: dict[str, TaskFindings]) -> list[str]:
    lines = ["## 4. Process supervision", ""]
    for task, f in found.items():
        if f.process is None:
            lines.append(f"- {task}: not run (pass --process true to add the process arm).")
            continue
        lines.append(f"- {task}: {verdict(f.process, 'process − budgetmix in mean Pass@(1,T)')}.")
        row = f.where.get("process")
        mix = f.where.get("budgetmix")
        if row and mix:
            lines.append(
                f"  Beside it (no verdict): single-step gain process {row.step.text()}, "
                f"budgetmix {mix.step.text()}."
            )
    return [*lines, ""]


def files_section(study: StudyRecord) -> list[str]:
    lines = ["## Files", ""]
    for task, entry in study.tasks.items():
        lines.append(f"- {task}: [results.json]({entry.results})")
        if entry.control:
            lines.append(f"- {task}, control base: [results.json]({entry.control})")
    timing = ", ".join(
        f"{k} {v['seconds']:.0f} s" + (" (reused)" if v.get("status") == "reused" else "")
        for k, v in study.timings.items()
        if isinstance(v, dict)
    )
    return [*lines, "", f"Timings: {timing}.", ""]


def write_report(study: StudyRecord, root: Path, command: str) -> Path:
    """Analyse every task of `study` (results under `root`), draw its plots, write report.md."""
    from minirl.study import plots as study_plots  # matplotlib loads only when a report is drawn

    mix = (study.args.budget_min, study.args.budget_max)
    found = {
        task: analyse(task, root / entry.results, entry.arms, mix)
        for task, entry in study.tasks.items()
    }
    control = {
        task: analyse(task, root / entry.control, {}, mix, budget=False)
        for task, entry in study.tasks.items()
        if entry.control
    }
    family = len(adjust(found))
    plots = study_plots.draw(found, root)
    lines = intro(study, command, family) + summary(found)
    lines += power_section(study, found, family) + gate_section(found, control) + glance(found)
    lines += budget_section(found, plots) + where_section(found, plots)
    lines += robustness_section(found) + process_section(found) + files_section(study)
    path = root / "report.md"
    path.write_text("\n".join(lines))
    return path
