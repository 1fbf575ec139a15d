"""Checkpoints that survive crashes and resume exactly.

A checkpoint is a directory `OUTPUT/checkpoint-<step>/` holding

    adapter_model.safetensors, adapter_config.json   the LoRA adapter in peft's own format
    trainer_state.pt                                  optimizer, RNG states, step (tensors only)
    trainer_state.json                                step, config and the summary so far

It is written to `checkpoint-<step>.tmp/` first and renamed into place, so a run killed mid-write
leaves the previous checkpoint intact. Only directories named exactly `checkpoint-<N>` count
(not `.tmp`, not a stray `checkpoint-6.bak`). Loading uses safetensors and
`torch.load(weights_only=True)` only: a checkpoint is data, never code.

Checkpoints defend themselves. Adapter weights that are not finite, or have run away
(`weights_problem`), are never saved (a diverged policy stops the run: `check_not_diverged`) and
never loaded. A resume (`resume_point`) reads the checkpoint's config and step before any model
loads: it must use the flags the run was started with (`check_resume_config`), the base they load
must be the one the run recorded (`check_base`; evaluate.py checks an adapter the same way), and
it may not start past `--max_steps`; when the newest checkpoint is corrupt it says so and
continues from the newest intact one, replaying the steps in between exactly.

The run directory around the checkpoints has rules too, kept here with them: its location must be
writable before anything loads (`check_writable`), one process writes it at a time
(`sole_writer`), a run never silently resumes or overwrites an earlier one (`check_output_dir`),
a resumed run keeps only sample episodes that replay true (minirl.rundir.viewer.load_verified), and
`metrics.jsonl` is cut back to the checkpoint's step (`metrics_up_to`) so the replayed steps are
not logged twice.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import re
import shutil
import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch
from peft import PeftModel, set_peft_model_state_dict
from safetensors.torch import load_file

from minirl.config import Config
from minirl.infra.errors import CheckpointError, ConfigError, DataError, RunError
from minirl.infra.readback import parse_json, read_json, shown
from minirl.models import base_identity

try:
    import fcntl  # POSIX: Linux and macOS, where minirl runs
except ImportError:  # pragma: no cover (Windows: no lock, one writer is then the user's care)
    fcntl = None  # type: ignore[assignment]

CHECKPOINT_NAME = re.compile(r"checkpoint-(\d+)")
LOCK = ".lock"  # the file a run directory's writer holds locked (sole_writer)
ADAPTER = "adapter_model.safetensors"
# AdamW moves a weight by about learning_rate per step, and peft starts lora_A near
# 1/sqrt(width) and lora_B at 0, so the adapters of a sane run stay far below 1 (60 steps at the
# default rate: at most 0.06 from where they started). A weight of 1e4 means the updates ran away;
# a few steps more and the logits overflow, and sampling fails on inf/NaN probabilities.
MAX_ADAPTER_WEIGHT = 1e4

# Flags that may differ between a run and its resumption without changing its results.
RESUMABLE_CHANGES = {
    "max_steps",
    "resume",
    "overwrite_output_dir",
    "output_dir",
    "logging_steps",
    "save_steps",
    "report_to",  # where the metrics are also sent
}


@dataclass
class TrainResult:
    """What a finished run hands back (also written to OUTPUT/summary.json)."""

    output_dir: Path
    steps: int
    metrics: list[dict] = field(default_factory=list)
    summary: dict = field(default_factory=dict)


@dataclass
class TrainerState:
    """What, besides the adapter, a run needs to continue exactly where it stopped."""

    step: int
    optimizer: dict
    torch_rng: torch.Tensor
    python_rng: tuple
    config: dict
    summary: dict


def checkpoints(output_dir: str | Path) -> list[Path]:
    """Complete checkpoints in `output_dir` (directories named checkpoint-<N>), oldest first."""
    root = Path(output_dir)
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and CHECKPOINT_NAME.fullmatch(p.name)]
    return sorted(found, key=lambda p: int(p.name.split("-")[1]))


def weights_problem(tensors: dict[str, torch.Tensor]) -> str | None:
    """Why these adapter weights cannot be a trained policy (not finite, or run away), or None."""
    named = [(name, t) for name, t in tensors.items() if t.numel()]
    if not named:
        return None
    # One peak per tensor (max propagates NaN), stacked: a single device sync per check.
    peaks = torch.stack([t.detach().abs().max().float() for _, t in named])
    bad = ~torch.isfinite(peaks) | (peaks > MAX_ADAPTER_WEIGHT)
    if not bad.any():
        return None
    first = int(bad.nonzero()[0])
    name, peak = named[first][0], float(peaks[first])
    if not math.isfinite(peak):
        return f"{name} holds NaN or inf"
    return f"{name} reached {peak:.3g} (a sane run stays below {MAX_ADAPTER_WEIGHT:g})"


def check_not_diverged(model: torch.nn.Module, step: int, learning_rate: float) -> None:
    """Stop a run whose adapters ran away, before the step is saved (RunError, exit status 1)."""
    trained = {n: p.detach() for n, p in model.named_parameters() if p.requires_grad}
    problem = weights_problem(trained)
    if problem:
        raise RunError(
            f"policy diverged at step {step}: {problem}; it was not saved. Start a new run with "
            f"a lower --learning_rate (this one used {learning_rate:g})"
        )


def reason(err: Exception) -> str:
    """The first line of an exception from a file reader, for a one-line message."""
    return str(err).splitlines()[0] if str(err) else type(err).__name__


def read_adapter(path: Path) -> dict[str, torch.Tensor]:
    """The adapter weights in directory `path`, checked; CheckpointError says what is wrong."""
    if not (path / "adapter_config.json").is_file():
        raise CheckpointError(f"{path} is incomplete: it has no adapter_config.json")
    try:
        read_json(path / "adapter_config.json")
    except ValueError as err:
        raise CheckpointError(f"{path}/adapter_config.json is corrupt ({reason(err)})") from err
    if not (path / ADAPTER).is_file():
        if (path / "adapter_model.bin").is_file():
            raise CheckpointError(
                f"{path} holds adapter_model.bin, a pickle, which minirl does not load: load it "
                f"with peft and save_pretrained it again to get {ADAPTER}"
            )
        raise CheckpointError(f"{path} is incomplete: it has no {ADAPTER}")
    try:
        tensors = load_file(path / ADAPTER)
    except Exception as err:  # noqa: BLE001
        # safetensors raises its own error type, or OSError, for truncated or garbled files.
        raise CheckpointError(f"{path / ADAPTER} is corrupt ({reason(err)})") from err
    problem = weights_problem(tensors)
    if problem:
        raise CheckpointError(f"{path} holds unusable weights: {problem}")
    return tensors


def check_init_adapter(path: str, lora_r: int, lora_alpha: int) -> None:
    """--init_adapter: readable, sane weights of the run's rank and alpha (else CheckpointError).

    peft builds a loaded adapter from its own adapter_config.json, so a rank other than --lora_r
    would train silently at the other rank; refused here, before the base model loads.
    """
    where = Path(path)
    if not where.is_dir():
        raise CheckpointError(f"--init_adapter {path}: no such directory")
    read_adapter(where)  # the files are there, parse, and hold finite, sane weights
    conf = read_json(where / "adapter_config.json")
    for key, want, flag in (("r", lora_r, "--lora_r"), ("lora_alpha", lora_alpha, "--lora_alpha")):
        got = conf.get(key) if isinstance(conf, dict) else None
        if type(got) is not int or got < 1:
            raise CheckpointError(
                f"--init_adapter {path}: adapter_config.json has no usable {key!r} ({shown(got)})"
            )
        if got != want:
            raise CheckpointError(
                f"--init_adapter {path} was trained with {key} {got}, this run has {flag} {want}: "
                f"pass {flag} {got}"
            )


def read_meta(path: Path) -> dict:
    """trainer_state.json of a minirl checkpoint: {"step", "config", "summary"}."""
    try:
        meta = read_json(path / "trainer_state.json")
        if not (isinstance(meta.get("step"), int) and isinstance(meta.get("config"), dict)):
            raise ValueError("no step and config")
    except (OSError, ValueError, AttributeError) as err:
        raise CheckpointError(
            f"{path}/trainer_state.json is missing or corrupt ({reason(err)})"
        ) from err
    return meta


def save_checkpoint(
    output_dir: str | Path, model: PeftModel, state: TrainerState, keep: int = 2
) -> Path:
    """Write checkpoint-<step> atomically and prune all but the newest `keep`."""
    trained = {n: p.detach() for n, p in model.named_parameters() if p.requires_grad}
    problem = weights_problem(trained)
    if problem:
        raise RunError(f"refusing to save step {state.step}: {problem}")
    root = Path(output_dir)
    final = root / f"checkpoint-{state.step}"
    tmp = root / f"checkpoint-{state.step}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir(parents=True)
        model.save_pretrained(tmp)  # adapter_model.safetensors + adapter_config.json
        torch.save(
            {
                "step": state.step,
                "optimizer": state.optimizer,
                "torch_rng": state.torch_rng,
                # Python's RNG state is (version, tuple of 625 ints, gauss): plain data.
                "python_rng": state.python_rng,
            },
            tmp / "trainer_state.pt",
        )
        meta = {"step": state.step, "config": state.config, "summary": state.summary}
        (tmp / "trainer_state.json").write_text(json.dumps(meta, indent=1))
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)  # a full disk: give back what the write took
        raise
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    for old in checkpoints(root)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def read_checkpoint(path: Path) -> tuple[dict[str, torch.Tensor], dict, dict]:
    """(adapter weights, trainer_state.pt, trainer_state.json) of a checkpoint, all checked."""
    weights, meta = read_adapter(path), read_meta(path)
    try:
        raw = torch.load(path / "trainer_state.pt", weights_only=True)
        missing = {"step", "optimizer", "torch_rng", "python_rng"} - set(raw)
        if missing:
            raise KeyError(f"no {sorted(missing)[0]}")
    except Exception as err:  # noqa: BLE001 (torch.load raises many types for a garbled file)
        message = f"{path}/trainer_state.pt is missing or corrupt ({reason(err)})"
        raise CheckpointError(message) from err
    return weights, raw, meta


def resume_point(existing: list[Path], cfg: Config) -> Path:
    """The checkpoint `--resume` continues from, checked before any model loads.

    The newest intact checkpoint: a corrupt newer one is named in a warning and skipped (the
    steps after the older one are replayed exactly). Its config must match the flags
    (check_resume_config), and its step must not pass --max_steps.
    """
    # TRL's checkpoints hold no minirl config; the summary.json the run started with does.
    if cfg.grpo.backend == "trl":
        saved = recorded_config(existing[0].parent / "summary.json")
        if saved:
            check_resume_config(saved, cfg)
    broken: list[str] = []
    for path in reversed(existing):
        try:
            step = checkpoint_step(path, cfg)
        except CheckpointError as err:
            broken.append(str(err))
            continue
        if step > cfg.grpo.max_steps:
            raise ConfigError(
                f"--resume: {path.name} is already at step {step}, past --max_steps "
                f"{cfg.grpo.max_steps}; resume with --max_steps {step} or more"
            )
        check_base(path, cfg.model.model, cfg.task.task, "--resume")
        if broken:
            warnings.warn(
                f"{broken[0]}; resuming from {path.name}, the newest intact checkpoint",
                stacklevel=2,
            )
        return path
    raise CheckpointError(f"--resume: {broken[0]}, and no older checkpoint is intact")


def checkpoint_step(path: Path, cfg: Config) -> int:
    """The training step a checkpoint holds, after reading and checking it.

    minirl's checkpoints are read whole and their config compared with the flags. TRL's
    (`--backend trl`) are TRL's own: the adapter is checked, and the name counts optimizer steps,
    num_iterations per minirl step.
    """
    if cfg.grpo.backend == "trl":
        read_adapter(path)
        return int(path.name.split("-")[1]) // cfg.grpo.num_iterations
    _, _, meta = read_checkpoint(path)
    check_resume_config(meta["config"], cfg)
    return meta["step"]


def recorded_config(path: Path) -> dict:
    """The config a run recorded in summary.json ({} if it has none)."""
    try:
        return read_json(path).get("config", {}) if path.is_file() else {}
    except (ValueError, AttributeError) as err:
        raise CheckpointError(f"{path} is corrupt ({reason(err)})") from err


def recorded_base(path: Path) -> str:
    """The base a checkpoint's run was trained on, as it recorded it (summary's base_model,
    minirl.models.base_identity): in the checkpoint's trainer_state.json, or for TRL's
    checkpoints in the run's summary.json. "" where none is recorded (a plain peft adapter, a run
    from before runs recorded their base)."""

    def read(where: Path) -> object:
        try:
            return read_json(where)
        except (OSError, ValueError) as err:
            raise CheckpointError(f"{where} is corrupt ({reason(err)})") from err

    where = path / "trainer_state.json"
    meta = read(where) if where.is_file() else None
    if isinstance(meta, dict) and "summary" in meta:  # minirl's (TRL's holds its own state)
        summary = meta["summary"]
    elif CHECKPOINT_NAME.fullmatch(path.name) and (path.parent / "summary.json").is_file():
        where = path.parent / "summary.json"
        summary = read(where)
    else:
        return ""
    base = summary.get("base_model", "") if isinstance(summary, dict) else None
    if not isinstance(base, str):
        raise CheckpointError(f"{where} is corrupt (its base_model is not a string)")
    return base


def check_base(path: Path, model: str, task: str, flag: str) -> None:
    """Refuse an adapter trained on another base than `--model` loads now (for `task`).

    The flag alone says too little: `tiny-sticky` on fog is another model once its recipe
    changes, and an adapter's weights only mean something on the base they were trained on. A
    run that recorded no base is let through (nothing to compare); the study, which reuses runs
    without being asked, refuses those too (minirl.study.run).
    """
    then, now = recorded_base(path), base_identity(model, task)
    if then and then != now:
        raise ConfigError(
            f"{flag}: {path} was trained on {shown(then, 80)}, but --model {model} "
            f"loads {now} now; use the base it was trained on"
        )


def load_checkpoint(path: str | Path, model: PeftModel) -> TrainerState:
    """Load the adapter into `model` and return the trainer state; CheckpointError if unreadable."""
    path = Path(path)
    weights, raw, meta = read_checkpoint(path)
    try:
        result = set_peft_model_state_dict(model, weights)
    except RuntimeError as err:  # a size mismatch: another --lora_r, another base model
        raise CheckpointError(f"{path} does not fit this model ({reason(err)})") from err
    unexpected = [k for k in getattr(result, "unexpected_keys", []) if "lora" in k]
    if unexpected:
        raise CheckpointError(f"checkpoint {path} does not match this model ({unexpected[0]} ...)")
    version, internal, gauss = raw["python_rng"]
    return TrainerState(
        step=int(raw["step"]),
        optimizer=raw["optimizer"],
        torch_rng=raw["torch_rng"],
        python_rng=(version, tuple(internal), gauss),
        config=meta["config"],
        summary=meta.get("summary", {}),
    )


def restore_rng(state: TrainerState, rng: random.Random) -> None:
    torch.set_rng_state(state.torch_rng)
    rng.setstate(state.python_rng)


def open_run_dir(
    out: Path,
    existing: list[Path],
    resume_from: Path | None,
    model: PeftModel,
    optimizer: torch.optim.Optimizer,
    rng: random.Random,
    cfg: Config,
) -> tuple[int, dict]:
    """Make `out` ready for step 0, or for the step after `resume_from`; returns that step and
    the run's summary so far.

    Resuming loads the checkpoint's weights, optimizer and RNG states, and cuts metrics.jsonl
    back to the checkpoint's step (a killed run may have logged steps it will replay). A fresh
    run empties metrics.jsonl and removes what --overwrite_output_dir replaces: the old
    checkpoints and their sample episodes.
    """
    metrics_path = out / "metrics.jsonl"
    if resume_from is not None:
        state = load_checkpoint(resume_from, model)
        optimizer.load_state_dict(state.optimizer)
        restore_rng(state, rng)
        kept = metrics_up_to(metrics_path, state.step)
        metrics_path.write_text("".join(line + "\n" for line in kept))
        return state.step, state.summary
    out.mkdir(parents=True, exist_ok=True)
    metrics_path.write_text("")
    for old in existing:
        shutil.rmtree(old)
    (out / "episodes.json").unlink(missing_ok=True)
    return 0, {"config": cfg.to_dict()}


def trainer_state(
    step: int, optimizer: torch.optim.Optimizer, rng: random.Random, cfg: Config, summary: dict
) -> TrainerState:
    """Everything besides the weights that --resume needs to continue exactly after `step`."""
    return TrainerState(
        step=step,
        optimizer=optimizer.state_dict(),
        torch_rng=torch.get_rng_state(),
        python_rng=rng.getstate(),
        config=cfg.to_dict(),
        summary=summary,
    )


def check_writable(path: str | Path, flag: str) -> None:
    """Refuse an output location that cannot be written, before any model loads."""
    path = Path(path)
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise ConfigError(
            f"{flag} {path}: {probe} is a file, not a directory; choose another {flag}"
        )
    try:
        with tempfile.TemporaryFile(dir=probe):
            pass
    except OSError as err:
        raise ConfigError(
            f"{flag} {path} cannot be written ({err.strerror}); choose another {flag}"
        ) from err


@contextlib.contextmanager
def sole_writer(directory: str | Path, flag: str) -> Iterator[None]:
    """Hold DIR/.lock while this process writes DIR: a second writer gets a one-line ConfigError.

    Two runs in one directory interleave their metrics.jsonl and leave the last one's checkpoint;
    a `--resume` started while the run is alive replays its steps a second time. The lock is
    `fcntl.flock`, which the operating system drops when the holding process ends, however it
    ends (Ctrl-C, kill -9, a crash), so a killed run never leaves its directory locked: the file
    stays behind and means nothing while unlocked. It holds the writer's pid, for the message.
    The directory is made if missing (and removed again if nothing was written to it).
    """
    directory = Path(directory)
    check_writable(directory, flag)
    made = not directory.exists()
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / LOCK).open("a+") as f:
        if fcntl is not None:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                f.seek(0)
                holder = f.read().strip() or "unknown"
                raise ConfigError(
                    f"{directory} is being written by another process (pid {holder}): wait for "
                    f"it to finish, or choose another {flag}"
                ) from None
            f.seek(0)
            f.truncate()
            f.write(str(os.getpid()))
            f.flush()
        try:
            yield
        finally:
            if made and [p.name for p in directory.iterdir()] == [LOCK]:
                shutil.rmtree(directory, ignore_errors=True)  # a run refused before it wrote


def check_output_dir(out: Path, cfg: Config) -> list[Path]:
    """The run directory's checkpoints, after refusing to silently resume or overwrite them."""
    check_writable(out, "--output_dir")
    existing = checkpoints(out)
    if cfg.grpo.resume and not existing:
        raise CheckpointError(f"--resume: no checkpoint found in {out}")
    if existing and not cfg.grpo.resume and not cfg.grpo.overwrite_output_dir:
        raise ConfigError(
            f"{out} already holds {existing[-1].name}; pass --resume to continue it, "
            "--overwrite_output_dir to start afresh, or a new --output_dir"
        )
    samples = out / "episodes.json"
    if cfg.grpo.resume and samples.exists():  # its base episodes are kept, and shown
        from minirl.rundir.viewer import load_verified

        try:
            load_verified(samples)
        except DataError as err:
            raise DataError(
                f"--resume: {err}; delete that file to resume without its sample episodes"
            ) from err
    return existing


def config_changes(saved: dict, cfg: Config) -> list[str]:
    """The flags, other than RESUMABLE_CHANGES, whose value in `cfg` differs from a recorded
    config (`Config.to_dict()` as a checkpoint or summary.json holds it): "--key (then, now)"."""
    now = cfg.to_dict()
    # A flag added after the checkpoint was written had its default then.
    defaults = Config().to_dict()
    resumable = RESUMABLE_CHANGES
    if cfg.grpo.lr_scheduler_type not in ("constant", "constant_with_warmup"):
        resumable = resumable - {"max_steps"}  # a decaying schedule is laid over max_steps
    diffs = []
    for section, values in now.items():
        recorded = saved.get(section, {}) if isinstance(saved, dict) else {}
        recorded = recorded if isinstance(recorded, dict) else {}
        for key, value in values.items():
            then = recorded.get(key, defaults[section][key])
            if key not in resumable and then != value:
                diffs.append(f"--{key} ({then!r}, now {value!r})")
    return diffs


def check_resume_config(saved: dict, cfg: Config) -> None:
    """Refuse to resume with flags that would change the run's results."""
    diffs = config_changes(saved, cfg)
    if diffs:
        raise ConfigError(
            f"--resume: the checkpoint was made with different {', '.join(diffs)}; "
            "resume with the original flags or use a new --output_dir"
        )


def metrics_up_to(path: Path, step: int) -> list[str]:
    """The metrics lines of steps <= `step`.

    A killed run may have logged steps after its last checkpoint (they will be replayed, so they
    go), and may have died mid-line (a line that does not parse goes too).
    """
    if not path.exists():
        return []
    kept = []
    for raw in path.read_bytes().splitlines():
        try:
            line = raw.decode("utf-8")
            if parse_json(line, str(path))["step"] <= step:
                kept.append(line)
        except (ValueError, KeyError, TypeError):  # UnicodeDecodeError and DataError are too
            continue
    return kept
