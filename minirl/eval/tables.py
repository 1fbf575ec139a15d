"""Rich terminal tables of an evaluation: one Pass@(K,T) grid per checkpoint, deltas, behaviour.

The delta table subtracts the first checkpoint's grid (usually `base`) cell by cell and marks a
difference larger than twice its standard error (the two grids' errors added in quadrature) with
a star; with paired instances that is conservative, not a test to publish. The open-loop table
puts every checkpoint's Pass@(1,T) and feedback use beside what the best feedback-blind policy
wins (minirl.eval.openloop, minirl.eval.feedback): a checkpoint at or below that line has learned
nothing a script that never reads an observation does not do.
"""

from __future__ import annotations

import math
import sys

from rich.console import Console
from rich.table import Table

from minirl.eval.passkt import Cell
from minirl.eval.results import CheckpointResult, EvalResults, Rate


def _cells(entry: CheckpointResult) -> dict[tuple[int, int], Cell]:
    return {(c.k, c.t): c for c in entry.grid}


def grid_table(name: str, entry: CheckpointResult, ks: list[int], ts: list[int]) -> Table:
    cells = _cells(entry)
    table = Table(title=f"Pass@(K,T): {name}  (mean ± stderr over instances)")
    table.add_column("K \\ T", justify="right", style="bold")
    for t in ts:
        table.add_column(str(t), justify="right")
    for k in ks:
        table.add_row(str(k), *(f"{cells[(k, t)].mean:.3f}±{cells[(k, t)].stderr:.3f}" for t in ts))
    return table


def delta_table(
    name: str,
    entry: CheckpointResult,
    ref_name: str,
    ref: CheckpointResult,
    ks: list[int],
    ts: list[int],
) -> Table:
    a, b = _cells(entry), _cells(ref)
    table = Table(title=f"{name} − {ref_name}  (* = beyond 2 stderr)")
    table.add_column("K \\ T", justify="right", style="bold")
    for t in ts:
        table.add_column(str(t), justify="right")
    for k in ks:
        row = []
        for t in ts:
            d = a[(k, t)].mean - b[(k, t)].mean
            se = math.hypot(a[(k, t)].stderr, b[(k, t)].stderr)
            mark = "*" if se > 0 and abs(d) > 2 * se else " "
            colour = "green" if d > 0 else "red" if d < 0 else "white"
            row.append(f"[{colour}]{d:+.3f}{mark}[/]")
        table.add_row(str(k), *row)
    return table


def open_loop_table(results: EvalResults) -> Table:
    """Pass@(1,T) and feedback use per checkpoint, and the open-loop yardstick, against T."""
    ts = [t for t in results.meta.ts if t in results.open_loop]
    table = Table(
        title="Pass@(1,T) beside the best feedback-blind policy (open-loop); "
        "feedback use in bits per turn (0: replies ignore the observations; ± its spread "
        "for a policy that does)"
    )
    table.add_column("", justify="right", style="bold")
    for t in ts:
        table.add_column(f"T={t}", justify="right")
    for name, entry in results.checkpoints.items():
        cells = _cells(entry)
        table.add_row(
            f"{name} Pass@1", *(f"{cells[(1, t)].mean:.3f}±{cells[(1, t)].stderr:.3f}" for t in ts)
        )
        used = [entry.feedback_use.get(t) for t in ts]
        table.add_row(
            f"{name} feedback use",
            *("n/a" if u is None else f"{u.bits:.2f}±{u.null_sd:.2f}" for u in used),
        )
    table.add_row(
        "open-loop best",
        *(f"{results.open_loop[t].success:.3f}±{results.open_loop[t].stderr:.3f}" for t in ts),
    )
    return table


def _rate(r: Rate) -> str:
    if math.isnan(r.rate):
        return "n/a"
    return f"{r.rate:.3f} ({r.count})"


def behaviour_table(results: EvalResults) -> Table:
    t_max = results.meta.analysis_budget
    table = Table(title=f"Behaviour at T={t_max}  (rate (count))")
    for column in (
        "checkpoint",
        "optimal action, fixed states",
        "success | no error",
        "success | ≥1 error",
        "invalid replies",
        "turns on success",
    ):
        table.add_column(column, justify="right")
    for name, entry in results.checkpoints.items():
        a = entry.analysis
        eff = a.efficiency[t_max].mean_turns
        table.add_row(
            name,
            _rate(a.decision.optimal),
            _rate(a.recovery.no_error),
            _rate(a.recovery.after_error),
            f"{a.invalid_rate:.3f}",
            "n/a" if math.isnan(eff) else f"{eff:.2f}",
        )
    return table


def print_tables(results: EvalResults, console: Console | None = None) -> None:
    # Off a terminal (a log file, CI) rich assumes 80 columns and would cut numbers short.
    console = console or Console(width=None if sys.stdout.isatty() else 160)
    meta = results.meta
    ks, ts = meta.ks, meta.ts
    entries = results.checkpoints
    ref_name = next(iter(entries))
    for name, entry in entries.items():
        console.print(grid_table(name, entry, ks, ts))
    for name, entry in list(entries.items())[1:]:
        console.print(delta_table(name, entry, ref_name, entries[ref_name], ks, ts))
    if results.open_loop and 1 in ks:
        console.print(open_loop_table(results))
    console.print(behaviour_table(results))
    console.print(
        f"mode: budget {meta.mode}; {len(meta.seeds)} instances × n={meta.n}, seed {meta.seed}"
    )
