"""What a training run leaves for people to look at, besides metrics.jsonl and its checkpoints.

Both backends (minirl.trainer and minirl.trl_backend) call these two, so their runs look alike:

- `evaluate_policy`, before the first step and after the last: held-out success at the tight,
  middle and generous budget (minirl.eval.sampler; summary.json stores it) with the policy's
  feedback use there (minirl.eval.feedback, from the same episodes), a few of the episodes
  it played, kept in OUTPUT/episodes.json (minirl.rundir.sample_episodes), and the numbers sent to
  the trackers (minirl.rundir.trackers) at step 0 or the last step;
- `open_loop`, once per run: what the best policy that never reads an observation wins at the
  same budgets (minirl.eval.openloop, cached), summary.json's "open_loop": the line a trained
  policy must clear before its gain is multi-turn skill;
- `finish_run`, at the end: the training curves, OUTPUT/curves.png (minirl.rundir.curves), the
  episode viewer page, OUTPUT/episodes.html (minirl.rundir.viewer), and the sample episodes as a
  table in every tracker. Both can be redrawn later from the files alone:
  `python -m minirl.rundir.curves OUTPUT`, `python -m minirl.rundir.viewer OUTPUT`.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from minirl.config import Config
from minirl.eval.feedback import feedback_use
from minirl.eval.openloop import yardsticks
from minirl.eval.sampler import run_evaluation
from minirl.rundir import curves, viewer
from minirl.rundir.sample_episodes import add_samples, load_samples
from minirl.rundir.trackers import Trackers


def evaluate_policy(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    cfg: Config,
    out: Path,
    policy: str,
    trackers: Trackers,
    step: int,
) -> dict[str, dict]:
    """Held-out success of `policy` ("base" or "trained"), as summary.json stores it."""
    results, played = run_evaluation(model, tokenizer, cfg)
    for t, episodes in played.items():  # no extra rollout: the episodes success was counted on
        used = feedback_use(episodes)
        results[str(t)].update(feedback_use=used.bits, feedback_use_sd=used.null_sd)
    add_samples(
        out / "episodes.json",
        policy,
        played,
        task=cfg.task.task,
        budget_visible=cfg.budget.budget_visible,
        stats={t: {k: r[k] for k in STATS} for t, r in results.items()},
        open_loop=open_loop(cfg),
    )
    trackers.log_eval(results, step)
    return results


STATS = ("success", "feedback_use", "feedback_use_sd")  # what episodes.json keeps per T


def open_loop(cfg: Config) -> dict[str, dict]:
    """The open-loop yardstick at the run's evaluation budgets, as summary.json stores it."""
    found = yardsticks(cfg.task.task, cfg.eval_budgets())
    return {str(t): dataclasses.asdict(y) for t, y in found.items()}


def _number(record: object, key: str) -> float | None:
    """record[key] if it is a real number (summary.json may come from a file): else None."""
    value = record.get(key) if isinstance(record, dict) else None
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


def before_after(summary: dict, task: str) -> list[str]:
    """train.py's closing table: held-out success base -> trained at each budget, beside the
    open-loop yardstick, and feedback use base -> trained (left out where a summary lacks them,
    as older ones do)."""
    base, trained = summary.get("base"), summary.get("trained")
    if not isinstance(base, dict) or not isinstance(trained, dict):
        return []
    reference = summary.get("open_loop")
    reference = reference if isinstance(reference, dict) else {}
    lines = [
        f"held-out success on {task} (base -> trained), beside the best feedback-blind policy "
        "(open-loop); feedback use in bits per turn (0: the replies ignore the observations; "
        "± its spread for a policy that does):"
    ]
    for budget in base:
        before, after = _number(base[budget], "success"), _number(trained.get(budget), "success")
        if before is None or after is None:
            continue
        line = f"  T={budget:>2}: {before:.3f} -> {after:.3f}"
        y, se = _number(reference.get(budget), "success"), _number(reference.get(budget), "stderr")
        if y is not None and se is not None:
            line += f"   open-loop {y:.3f} ± {se:.3f}"
        used = [
            (_number(r, "feedback_use"), _number(r, "feedback_use_sd"))
            for r in (base[budget], trained.get(budget))
        ]
        if all(None not in pair for pair in used):
            shown = [f"{bits:.2f}±{sd:.2f}" for bits, sd in used]
            line += f"   feedback use {shown[0]} -> {shown[1]}"
        lines.append(line)
    return lines


def finish_run(out: Path, trackers: Trackers, step: int) -> list[Path]:
    """The curves, the viewer page (when episodes were kept) and the trackers' episode table."""
    written = [curves.write_curves(out)]
    if (out / "episodes.json").exists():
        written.append(viewer.write_page(out))
        trackers.log_episodes(load_samples(out / "episodes.json"), step)
    return written
