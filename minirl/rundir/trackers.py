"""`--report_to`: where a run's numbers go besides metrics.jsonl (tensorboard, trackio, wandb).

metrics.jsonl is the record and is always written; trackers are for watching a run live and
comparing runs. Every tracker named in `--report_to` (TRL's field, with TRL's names) gets:

- every step's metrics as scalars `train/<key>` at that step: exactly the numeric keys and values
  of that step's line of metrics.jsonl;
- the before/after evaluation as `eval/<field>_T<t>` (success, invalid_rate, optimal_rate,
  mean_turns) at step 0 for the base and at the last step for the trained policy, so each is a
  line from before to after;
- a sample of episodes as a text table: one row per episode (instance, T, policy, outcome, and
  each reply with the oracle's mark), from minirl.rundir.sample_episodes. TensorBoard renders text
  as Markdown, so every cell is escaped for it (`markdown_cell`): a reply is data, and
  `<img src=...>`, `![](...)`, a `|` or a newline in one must not become a remote image, a cut or
  a forged row.

Where each one writes, without a network or an account:

- tensorboard: event files in OUTPUT/tensorboard/ (torch's SummaryWriter); watch with
  `tensorboard --logdir runs`. A resumed run passes `purge_step`, so TensorBoard drops what the
  killed run logged after its last checkpoint, as metrics.jsonl does (minirl.rundir.checkpoint).
- trackio: its local SQLite store (~/.cache/huggingface/trackio, or $TRACKIO_DIR), project
  "minirl", one run per output directory (a --resume continues it); `trackio show`.
- wandb: OUTPUT/wandb/, in offline mode unless a W&B login (an API key) or WANDB_MODE says
  otherwise, so it never waits for a network; `wandb sync OUTPUT/wandb/offline-run-*` uploads it
  later. Steps go in the `train/global_step` field, TRL's x axis, so a step may be logged out of
  order (the base evaluation, at step 0, after training with --backend trl).

Each library is imported only when named: each takes seconds to import. `--backend trl` hands
the same names to GRPOConfig, whose callbacks log TRL's own metrics; `environment` points them at
the same places, and the run's evaluation and episodes are logged here afterwards.

A tracker that cannot log must not lose a run's metrics silently: `check_trackers` refuses,
before the model loads, what would fail later (OUTPUT/tensorboard a file, a WANDB_MODE wandb does
not know, WANDB_MODE=online without a login, a wandb or trackio directory that cannot be
written); a tracker that fails anyway stops the run with one line (RunError) rather than a
traceback after it, and metrics.jsonl holds every step either way.
"""

from __future__ import annotations

import contextlib
import html
import netrc
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from minirl.infra.errors import ConfigError, RunError

PROJECT = "minirl"  # the trackio and wandb project every run goes to
STEP_KEY = "train/global_step"  # wandb's x axis, as TRL's WandbCallback names it
EVAL_FIELDS = ("success", "invalid_rate", "optimal_rate", "mean_turns")
WANDB_MODES = ("online", "offline", "disabled", "shared", "dryrun", "run")  # wandb's Settings.mode
WANDB_ONLINE = ("online", "shared", "run")


def wandb_login() -> bool:
    """Whether a W&B API key is set up: WANDB_API_KEY, or `wandb login`'s entry in ~/.netrc."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    with contextlib.suppress(OSError, netrc.NetrcParseError):
        if netrc.netrc().authenticators("api.wandb.ai"):
            return True
    return False


def wandb_mode() -> str:
    """WANDB_MODE if set; else 'online' with a W&B API key (env or ~/.netrc), else 'offline'."""
    if os.environ.get("WANDB_MODE"):
        return os.environ["WANDB_MODE"]
    return "online" if wandb_login() else "offline"


def check_trackers(report_to: list[str], out: Path) -> None:
    """Refuse, before the model loads, a tracker that would fail or lose metrics (ConfigError)."""
    from minirl.rundir.checkpoint import check_writable

    if "tensorboard" in report_to and (out / "tensorboard").exists():
        if not (out / "tensorboard").is_dir():
            raise ConfigError(
                f"--report_to tensorboard writes to {out / 'tensorboard'}, which is a file: "
                "move it away, or choose another --output_dir"
            )
    if "wandb" in report_to:
        mode = wandb_mode()
        if mode not in WANDB_MODES:
            raise ConfigError(
                f"WANDB_MODE={mode!r}: wandb knows {', '.join(WANDB_MODES)}; unset it to log "
                "offline into OUTPUT/wandb"
            )
        if mode in WANDB_ONLINE and not wandb_login():
            raise ConfigError(
                f"WANDB_MODE={mode} needs a W&B login (`wandb login`, or WANDB_API_KEY); unset "
                "WANDB_MODE to log offline into OUTPUT/wandb and `wandb sync` it later"
            )
        for name, default in wandb_directories().items():
            where = os.environ.get(name) or default
            if where:
                check_writable(where, name)
    if "trackio" in report_to:
        home = os.environ.get("HF_HOME") or Path("~/.cache/huggingface").expanduser()
        where = os.environ.get("TRACKIO_DIR") or Path(home) / "trackio"
        check_writable(where, "TRACKIO_DIR" if os.environ.get("TRACKIO_DIR") else "HF_HOME")


def wandb_directories() -> dict[str, str]:
    """The directories wandb writes outside OUTPUT, by the variable that moves each, with their
    defaults (platformdirs is wandb's own dependency, which picks them)."""
    import platformdirs

    return {
        "WANDB_DATA_DIR": platformdirs.user_data_dir("wandb"),  # staged tables and artifacts
        "WANDB_CACHE_DIR": platformdirs.user_cache_dir("wandb"),
        "WANDB_CONFIG_DIR": "",  # only when set: its default is under the home directory
    }


# Characters Markdown (python-markdown, as TensorBoard runs it, with its tables extension) reads
# as syntax; each is shown as itself when escaped with a backslash.
MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|>])")
CONTROL = re.compile(r"[\x00-\x1f\x7f\u2028\u2029]")


def markdown_cell(value: object) -> str:
    """Any value as the literal text of one Markdown table cell: HTML-escaped, Markdown's syntax
    characters backslash-escaped, and a line break (which would end the row and could forge a
    new one) or any other control character shown as a visible mark."""
    text = str(value).replace("\r\n", "\n")
    text = CONTROL.sub(lambda m: "\u23ce" if m.group() in "\r\n" else "\ufffd", text)
    return MARKDOWN_SPECIAL.sub(r"\\\1", html.escape(text, quote=False))


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
            with failing("tensorboard"):
                for tag, value in scalars.items():
                    self.tensorboard.add_scalar(tag, value, step)
        if self.trackio is not None:
            with failing("trackio"):
                self.trackio.log(scalars, step=step)
        if self.wandb is not None:
            with failing("wandb"):
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
        """The sample episodes (minirl.rundir.sample_episodes) as a table: text in tensorboard, a
        Table else."""
        columns, rows = episode_table(samples)
        if not rows:
            return
        if self.tensorboard is not None:
            with failing("tensorboard"):
                self.tensorboard.add_text("episodes", markdown_table(columns, rows), step)
        if self.trackio is not None:
            import pandas as pd  # trackio's Table takes a DataFrame

            with failing("trackio"):
                table = self.trackio.Table(dataframe=pd.DataFrame(rows, columns=columns))
                self.trackio.log({"episodes": table}, step=step)
        if self.wandb is not None:
            import wandb

            with failing("wandb"):
                table = wandb.Table(columns=columns, data=rows)
                self.wandb.log({"episodes": table, STEP_KEY: step})

    def close(self) -> None:
        """Flush and close; everything logged so far is on disk afterwards."""
        opened = [
            ("tensorboard", self.tensorboard, "close"),
            ("trackio", self.trackio, "finish"),
            ("wandb", self.wandb, "finish"),
        ]
        self.tensorboard = self.trackio = self.wandb = None
        for name, tracker, method in opened:
            if tracker is not None:
                with failing(name):
                    getattr(tracker, method)()


@contextlib.contextmanager
def failing(name: str) -> Iterator[None]:
    """A tracker library's own error as one line (RunError, exit status 1), not a traceback."""
    try:
        yield
    except Exception as err:  # noqa: BLE001 (each tracker library raises its own types)
        why = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise RunError(
            f"--report_to {name} could not log ({why}); metrics.jsonl and summary.json hold "
            f"what the run wrote: fix {name}, or run with --report_to none"
        ) from err


def markdown_table(columns: list[str], rows: list[list]) -> str:
    """The episode table as Markdown (TensorBoard's text), every cell escaped (markdown_cell)."""
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(markdown_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


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

        with failing("tensorboard"):
            trackers.tensorboard = SummaryWriter(str(out / "tensorboard"), purge_step=purge_step)
    if "trackio" in report_to:
        import trackio

        with failing("trackio"):
            trackio.init(
                project=PROJECT,
                name=out.name,
                config=config,
                resume="allow" if resume else "never",
                auto_log_cpu=False,  # system metrics are not what a student opened the page for
            )
        trackers.trackio = trackio
    if "wandb" in report_to:
        # wandb builds its global settings, and starts reaching for its servers, from the
        # environment when it first sets up, before `mode=` below is read: without a login, a
        # run with mode="offline" alone still resolved a remote host (seen in strace). So the
        # mode goes into the environment first, as minirl.trl_backend does (`environment`).
        os.environ["WANDB_MODE"] = wandb_mode()
        import wandb

        with failing("wandb"):
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
