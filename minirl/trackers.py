"""`--report_to`: where a run's numbers go besides metrics.jsonl (tensorboard, trackio, wandb).

metrics.jsonl is the record and is always written; trackers are for watching a run live and
comparing runs. Every tracker named in `--report_to` (TRL's field, with TRL's names) gets:

- every step's metrics as scalars `train/<key>` at that step: exactly the numeric keys and values
  of that step's line of metrics.jsonl;
- the before/after evaluation as `eval/<field>_T<t>` (success, invalid_rate, optimal_rate,
  mean_turns) at step 0 for the base and at the last step for the trained policy, so each is a
  line from before to after;
- a sample of episodes as a text table: one row per episode (instance, T, policy, outcome, and
  each reply with the oracle's mark), from minirl.samples.

Where each one writes, without a network or an account:

- tensorboard: event files in OUTPUT/tensorboard/ (torch's SummaryWriter); watch with
  `tensorboard --logdir runs`. A resumed run passes `purge_step`, so TensorBoard drops what the
  killed run logged after its last checkpoint, as metrics.jsonl does (minirl.checkpoint).
- trackio: its local SQLite store (~/.cache/huggingface/trackio, or $TRACKIO_DIR), project
  "minirl", one run per output directory (a --resume continues it); `trackio show`.
- wandb: OUTPUT/wandb/, in offline mode unless a W&B login (an API key) or WANDB_MODE says
  otherwise, so it never waits for a network; `wandb sync OUTPUT/wandb/offline-run-*` uploads it
  later. Steps go in the `train/global_step` field, TRL's x axis, so a step may be logged out of
  order (the base evaluation, at step 0, after training with --backend trl).

Each library is imported only when named: each takes seconds to import. `--backend trl` hands
the same names to GRPOConfig, whose callbacks log TRL's own metrics; `environment` points them at
the same places, and the run's evaluation and episodes are logged here afterwards.
"""

from __future__ import annotations

import contextlib
import netrc
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PROJECT = "minirl"  # the trackio and wandb project every run goes to
STEP_KEY = "train/global_step"  # wandb's x axis, as TRL's WandbCallback names it
EVAL_FIELDS = ("success", "invalid_rate", "optimal_rate", "mean_turns")


def wandb_mode() -> str:
    """WANDB_MODE if set; else 'online' with a W&B API key (env or ~/.netrc), else 'offline'."""
    if os.environ.get("WANDB_MODE"):
        return os.environ["WANDB_MODE"]
    if os.environ.get("WANDB_API_KEY"):
        return "online"
    with contextlib.suppress(OSError, netrc.NetrcParseError):
        if netrc.netrc().authenticators("api.wandb.ai"):
            return "online"
    return "offline"


def environment(report_to: list[str], out: Path) -> dict[str, str]:
    """Environment variables that send TRL's tracker callbacks where minirl's trackers write.

    transformers' callbacks read these (the TensorBoard directory, the W&B project, directory and
    mode); trackio's project and run name are GRPOConfig fields (minirl.trl_backend).
    """
    env = {}
    if "tensorboard" in report_to:
        env["TENSORBOARD_LOGGING_DIR"] = str(out / "tensorboard")
    if "wandb" in report_to:
        env.update(WANDB_PROJECT=PROJECT, WANDB_DIR=str(out), WANDB_MODE=wandb_mode())
    return env


@dataclass
class Trackers:
    """The open trackers of one run; a run with `--report_to none` has none and logs nothing."""

    tensorboard: Any = None  # torch.utils.tensorboard.SummaryWriter
    trackio: Any = None  # the trackio module, with this run open
    wandb: Any = None  # a wandb Run
    names: list[str] = field(default_factory=list)

    def log(self, scalars: dict[str, float], step: int) -> None:
        if self.tensorboard is not None:
            for tag, value in scalars.items():
                self.tensorboard.add_scalar(tag, value, step)
        if self.trackio is not None:
            self.trackio.log(scalars, step=step)
        if self.wandb is not None:
            self.wandb.log({**scalars, STEP_KEY: step})

    def log_metrics(self, metrics: dict) -> None:
        """One line of metrics.jsonl: every numeric value except the step, under train/."""
        scalars = {
            f"train/{key}": float(value)
            for key, value in metrics.items()
            if key != "step" and isinstance(value, int | float) and not isinstance(value, bool)
        }
        self.log(scalars, metrics["step"])

    def log_eval(self, results: dict[str, dict], step: int) -> None:
        """A summary.json evaluation ({"T": BudgetResult fields}) at `step`."""
        self.log(
            {
                f"eval/{name}_T{t}": float(result[name])
                for t, result in results.items()
                for name in EVAL_FIELDS
            },
            step,
        )

    def log_episodes(self, samples: dict, step: int) -> None:
        """The sample episodes (minirl.samples) as a table: text in tensorboard, a Table else."""
        columns, rows = episode_table(samples)
        if not rows:
            return
        if self.tensorboard is not None:
            # TensorBoard renders text summaries as markdown.
            lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
            lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
            self.tensorboard.add_text("episodes", "\n".join(lines), step)
        if self.trackio is not None:
            import pandas as pd  # trackio's Table takes a DataFrame

            table = self.trackio.Table(dataframe=pd.DataFrame(rows, columns=columns))
            self.trackio.log({"episodes": table}, step=step)
        if self.wandb is not None:
            import wandb

            self.wandb.log({"episodes": wandb.Table(columns=columns, data=rows), STEP_KEY: step})

    def close(self) -> None:
        """Flush and close; everything logged so far is on disk afterwards."""
        if self.tensorboard is not None:
            self.tensorboard.close()
        if self.trackio is not None:
            self.trackio.finish()
        if self.wandb is not None:
            self.wandb.finish()
        self.tensorboard = self.trackio = self.wandb = None


def episode_table(samples: dict) -> tuple[list[str], list[list]]:
    """Columns and rows: one row per sample episode, its replies marked by the oracle.

    A reply is followed by + (optimal), ! (a mistake), ? (invalid) or nothing (valid, not optimal).
    """
    columns = ["seed", "T", "policy", "success", "turns", "replies"]
    rows = []
    for policy, episodes in samples.get("episodes", {}).items():
        for e in episodes:
            marked = [
                t["reply"].strip()
                + ("?" if not t["valid"] else "!" if t["mistake"] else "+" if t["optimal"] else "")
                for t in e["turns"]
            ]
            rows.append(
                [e["seed"], e["budget"], policy, e["success"], len(e["turns"]), " ".join(marked)]
            )
    return columns, rows


def open_trackers(
    report_to: list[str],
    out: Path,
    config: dict,
    *,
    resume: bool = False,
    purge_step: int | None = None,
) -> Trackers:
    """Open every tracker in `report_to` for the run in `out` (see the module docstring).

    `resume` continues the run's trackio run; `purge_step` makes TensorBoard drop the events an
    earlier writer logged at that step or later (a resumed run logs them again).
    """
    trackers = Trackers(names=[n for n in report_to if n != "none"])
    if "tensorboard" in report_to:
        from torch.utils.tensorboard import SummaryWriter

        trackers.tensorboard = SummaryWriter(str(out / "tensorboard"), purge_step=purge_step)
    if "trackio" in report_to:
        import trackio

        trackio.init(
            project=PROJECT,
            name=out.name,
            config=config,
            resume="allow" if resume else "never",
            auto_log_cpu=False,  # system metrics are not what a student opened the page for
        )
        trackers.trackio = trackio
    if "wandb" in report_to:
        import wandb

        # TRL's WandbCallback may have opened this run already; then keep logging into it.
        trackers.wandb = wandb.run or wandb.init(
            project=PROJECT,
            name=out.name,
            dir=str(out),
            config=config,
            mode=wandb_mode(),
        )
        trackers.wandb.define_metric(STEP_KEY)
        trackers.wandb.define_metric("*", step_metric=STEP_KEY)
    return trackers


@contextlib.contextmanager
def tracking(
    report_to: list[str],
    out: Path,
    config: dict,
    *,
    resume: bool = False,
    purge_step: int | None = None,
) -> Iterator[Trackers]:
    """open_trackers, closed (flushed) on the way out, also when the run dies."""
    trackers = open_trackers(report_to, out, config, resume=resume, purge_step=purge_step)
    try:
        yield trackers
    finally:
        trackers.close()
