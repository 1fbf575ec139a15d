"""What a training run leaves for people to look at, besides metrics.jsonl and its checkpoints.

Both backends (minirl.trainer and minirl.trl_backend) call these two, so their runs look alike:

- `evaluate_policy`, before the first step and after the last: held-out success at the tight,
  middle and generous budget (minirl.eval.sampler; summary.json stores it), a few of the episodes
  it played, kept in OUTPUT/episodes.json (minirl.samples), and the numbers sent to the trackers
  (minirl.trackers) at step 0 or the last step;
- `finish_run`, at the end: the training curves, OUTPUT/curves.png (minirl.curves), the episode
  viewer page, OUTPUT/episodes.html (minirl.viewer), and the sample episodes as a table in every
  tracker. Both can be redrawn later from the files alone: `python -m minirl.curves OUTPUT`,
  `python -m minirl.viewer OUTPUT`.
"""

from __future__ import annotations

from pathlib import Path

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from minirl import curves, viewer
from minirl.config import Config
from minirl.eval.sampler import run_evaluation
from minirl.samples import add_samples, load_samples
from minirl.trackers import Trackers


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
    add_samples(
        out / "episodes.json",
        policy,
        played,
        task=cfg.task.task,
        budget_visible=cfg.budget.budget_visible,
    )
    trackers.log_eval(results, step)
    return results


def finish_run(out: Path, trackers: Trackers, step: int) -> list[Path]:
    """The curves, the viewer page (when episodes were kept) and the trackers' episode table."""
    written = [curves.write_curves(out)]
    if (out / "episodes.json").exists():
        written.append(viewer.write_page(out))
        trackers.log_episodes(load_samples(out / "episodes.json"), step)
    return written
