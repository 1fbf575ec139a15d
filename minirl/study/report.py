"""Write the study's report.md: one section per claim of the paper, every sentence chosen by a rule.

The numbers and verdicts come from minirl.study.claims (`analyse`, one `TaskFindings` per task);
the plots from minirl.study.plots. This module only lays them out as Markdown:
    verdicts at a glance  -> one row per task, claim and arm
    1. budget dependence  -> base Pass@(1,T), each arm's gap against base, the solvable share
    2. where RL helps     -> base rates and each arm's change in them
    3. robustness         -> mean, worst case and regret of each arm over T
    4. process rewards    -> the process arm against BudgetMix, where it was run
and ends with links to every results file and heatmap, and the time each part took.
"""

from __future__ import annotations

import math
from pathlib import Path

from minirl.study.claims import TaskFindings, analyse, curve, signed
from minirl.study.run import StudyRecord, study_seeds


def fmt(x: float, se: float | None = None) -> str:
    if x is None or math.isnan(x):
        return "n/a"
    return f"{x:.3f}" if se is None or math.isnan(se) else f"{x:.3f} ± {se:.3f}"


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(r) + " |" for r in rows]


def intro(study: StudyRecord, command: str) -> list[str]:
    args = study.args
    seeds = study_seeds(args)
    return [
        "# The study: what does multi-turn RL improve, on toy tasks?",
        "",
        f"Produced by `{command}` at commit {study.commit}, in "
        f"{study.timings['total_seconds'] / 60:.1f} minutes (training runs reused from an "
        "earlier invocation count as 0).",
        "",
        f"Arms: (a) base; (b) fixed-T{args.generous}; (c) fixed-T{args.tight}; (d) BudgetMix "
        f"T in [{args.budget_min}, {args.budget_max}]"
        + ("; (e) process: BudgetMix with process reward" if args.process else "")
        + f". {args.max_steps} steps each, {args.tasks_per_step} instances x "
        f"G={args.num_generations} per step, training seeds {', '.join(map(str, seeds))}. "
        f"Evaluation: {args.instances} held-out instances, n={args.n} episodes per instance and "
        "T, budget visible, every arm on the same instances and sampling seed.",
        "",
        "Uncertainties are ± 1 standard error over instances"
        + (
            " plus the spread over training seeds."
            if len(seeds) > 1
            else "; with one training seed there is no seed spread, so a difference of a few "
            "hundredths is not a finding."
        ),
        "",
    ]


def glance(found: dict[str, TaskFindings]) -> list[str]:
    yes = {True: "yes", False: "no"}
    rows = []
    for task, f in found.items():
        for arm, v in f.budget.verdicts.items():
            rows.append([task, "1. budget dependence", arm, yes[v.shown]])
        for arm, v in f.where.verdicts.items():
            rows.append([task, "2. where RL helps", arm, yes[v.shown]])
        rows.append([task, "3. BudgetMix robustness", "budgetmix", yes[f.robust.verdict.shown]])
    header = ["task", "claim", "arm", "shown on this run?"]
    return ["## Verdicts at a glance", "", *table(header, rows), ""]


def budget_section(found: dict[str, TaskFindings], plots: dict[str, dict[str, str]]) -> list[str]:
    lines = [
        "## 1. Budget dependence",
        "",
        "The paper: the advantage of trajectory-level RL over the base model depends on a "
        "sufficient turn budget, and shrinks when budgets tighten. Gap = Pass@(1,T) of the "
        "arm minus that of base.",
        "",
    ]
    for task, f in found.items():
        ts = f.results.meta.ts
        base = curve(f.results, ["base"])
        rows = [["base Pass@(1,T)"] + [fmt(*base[t][:2]) for t in ts]]
        rows += [
            [f"gap {arm}"] + [signed(*gap[t]) for t in ts] for arm, gap in f.budget.gaps.items()
        ]
        rows.append(["instances solvable within T"] + [f"{f.solvable[t]:.2f}" for t in ts])
        lines += [f"### {task}", "", *table(["", *[f"T={t}" for t in ts]], rows), ""]
        lines += [f"- {v.text}." for v in f.budget.verdicts.values()]
        lines += ["", f"![gap against T]({plots[task]['gap']})", ""]
    return lines


def where_section(
    found: dict[str, TaskFindings], plots: dict[str, dict[str, str]], decision_states: int
) -> list[str]:
    lines = [
        "## 2. Where RL helps",
        "",
        "The paper: RL does not uniformly raise single-step decision quality; its strength "
        "is error recovery and long-horizon resilience. Single-step quality is measured on "
        f"{decision_states} states sampled once from the base policy and shared by "
        "every arm; recovery and horizon at the largest evaluated T. An error is any "
        "non-optimal action.",
        "",
    ]
    for task, f in found.items():
        w = f.where
        rows = [["base", *[fmt(*w.base[m]) for m in w.base]]]
        rows += [
            [f"Δ {arm}", *[signed(*d) for d in deltas.values()]] for arm, deltas in w.deltas.items()
        ]
        lines += [f"### {task}", "", *table(["", *w.base], rows), ""]
        lines += [f"- {v.text}." for v in w.verdicts.values()]
        lines += [
            "",
            f"![where RL helps]({plots[task]['where']}) ![behaviour]({task}/behaviour.png)",
            "",
        ]
    return lines


def robustness_section(found: dict[str, TaskFindings]) -> list[str]:
    lines = [
        "## 3. BudgetMix robustness",
        "",
        "The paper: varying the budget during training gives robust performance across "
        "execution budgets. Regret = the largest shortfall from the best arm at any T.",
        "",
    ]
    header = ["arm", "mean Pass@(1,T)", "worst Pass@(1,T)", "regret"]
    for task, f in found.items():
        rows = [
            [
                arm,
                f"{r.mean:.3f}",
                f"{r.worst:.3f} (T={r.worst_t})",
                f"{r.regret:.3f} (T={r.regret_t})",
            ]
            for arm, r in f.robust.table.items()
        ]
        lines += [f"### {task}", "", *table(header, rows), ""]
        lines += [
            f"- {f.robust.verdict.text}.",
            "",
            f"![Pass@(K,T) curves]({task}/passkt_curves.png)",
            "",
        ]
    return lines


def process_section(found: dict[str, TaskFindings]) -> list[str]:
    lines = ["## 4. Process supervision", ""]
    for task, f in found.items():
        p = f.process
        lines.append(f"- {task}: process arm against BudgetMix (outcome reward): {p.text}.")
        if p.run:
            lines.append(
                "  Differences (process − budgetmix): "
                + ", ".join(f"{k} {signed(*d)}" for k, d in p.diffs.items())
            )
    return [*lines, ""]


def files_section(study: StudyRecord, root: Path) -> list[str]:
    lines = ["## Files", ""]
    for task in study.tasks:
        heatmaps = sorted(p.name for p in (root / task).glob("heatmap_*.png"))
        lines.append(
            f"- {task}: [results.json]({task}/results.json), "
            + ", ".join(f"[{h}]({task}/{h})" for h in heatmaps)
        )
    timing = ", ".join(
        f"{k} {v['seconds']:.0f} s" for k, v in study.timings.items() if isinstance(v, dict)
    )
    return [*lines, "", f"Timings: {timing}.", ""]


def write_report(study: StudyRecord, root: Path, command: str) -> Path:
    """Analyse every task of `study` (results under `root`), draw its plots, write report.md."""
    from minirl.study import plots as study_plots  # matplotlib loads only when a report is drawn

    found = {
        task: analyse(task, root / entry.results, entry.arms) for task, entry in study.tasks.items()
    }
    plots = study_plots.draw(found, root)
    lines = intro(study, command) + glance(found)
    lines += budget_section(found, plots)
    lines += where_section(found, plots, study.args.decision_states)
    lines += robustness_section(found) + process_section(found) + files_section(study, root)
    path = root / "report.md"
    path.write_text("\n".join(lines))
    return path
