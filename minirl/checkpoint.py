"""Checkpoints that survive crashes and resume exactly.

A checkpoint is a directory `OUTPUT/checkpoint-<step>/` holding

    adapter_model.safetensors, adapter_config.json   the LoRA adapter in peft's own format
    trainer_state.pt                                  optimizer, RNG states, step (tensors only)
    trainer_state.json                                step, config and the summary so far

It is written to `checkpoint-<step>.tmp/` first and renamed into place, so a run killed mid-write
leaves the previous checkpoint intact; a directory without the `.tmp` suffix is always complete.
Loading uses safetensors and `torch.load(weights_only=True)` only: a checkpoint is data, never code.

The run directory around the checkpoints has rules too, kept here with them: a run never silently
resumes or overwrites an earlier one (`check_output_dir`), a resume must use the flags the run was
started with (`check_resume_config`), and `metrics.jsonl` is cut back to the checkpoint's step
(`metrics_up_to`) so the replayed steps are not logged twice.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import torch
from peft import PeftModel, set_peft_model_state_dict
from safetensors.torch import load_file

from minirl.config import Config
from minirl.errors import CheckpointError, ConfigError

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
    """Complete checkpoints in `output_dir`, oldest first."""
    root = Path(output_dir)
    if not root.is_dir():
        return []
    found = [p for p in root.glob("checkpoint-*") if p.is_dir() and p.suffix != ".tmp"]
    return sorted(found, key=lambda p: int(p.name.split("-")[1]))


def save_checkpoint(
    output_dir: str | Path, model: PeftModel, state: TrainerState, keep: int = 2
) -> Path:
    """Write checkpoint-<step> atomically and prune all but the newest `keep`."""
    for p in model.parameters():
        if p.requires_grad and not torch.isfinite(p).all():
            raise CheckpointError(
                f"refusing to save step {state.step}: adapter weights are not finite"
            )
    root = Path(output_dir)
    final = root / f"checkpoint-{state.step}"
    tmp = root / f"checkpoint-{state.step}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model.save_pretrained(tmp)  # adapter_model.safetensors + adapter_config.json
    torch.save(
        {
            "step": state.step,
            "optimizer": state.optimizer,
            "torch_rng": state.torch_rng,
            # Python's RNG state is (version, tuple of 625 ints, gauss): plain data, safe to load.
            "python_rng": state.python_rng,
        },
        tmp / "trainer_state.pt",
    )
    meta = {"step": state.step, "config": state.config, "summary": state.summary}
    (tmp / "trainer_state.json").write_text(json.dumps(meta, indent=1))
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    for old in checkpoints(root)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def load_checkpoint(path: str | Path, model: PeftModel) -> TrainerState:
    """Load the adapter into `model` and return the trainer state; CheckpointError if unreadable."""
    path = Path(path)
    try:
        weights = load_file(path / "adapter_model.safetensors")
        raw = torch.load(path / "trainer_state.pt", weights_only=True)
        meta = json.loads((path / "trainer_state.json").read_text())
    except Exception as err:  # noqa: BLE001
        # safetensors, torch and json raise many unrelated exception types for truncated or
        # garbled files; any of them means the same thing here.
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise CheckpointError(f"checkpoint {path} is missing or corrupt: {reason}") from err
    result = set_peft_model_state_dict(model, weights)
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


def check_output_dir(out: Path, cfg: Config) -> list[Path]:
    """The run directory's checkpoints, after refusing to silently resume or overwrite them."""
    existing = checkpoints(out)
    if cfg.grpo.resume and not existing:
        raise CheckpointError(f"--resume: no checkpoint found in {out}")
    if existing and not cfg.grpo.resume and not cfg.grpo.overwrite_output_dir:
        raise ConfigError(
            f"{out} already holds {existing[-1].name}; pass --resume to continue it, "
            "--overwrite_output_dir to start afresh, or a new --output_dir"
        )
    return existing


def check_resume_config(saved: dict, cfg: Config) -> None:
    """Refuse to resume with flags that would change the run's results."""
    now = cfg.to_dict()
    # A flag added after the checkpoint was written had its default then.
    defaults = Config().to_dict()
    diffs = [
        f"--{key}"
        for section in now
        for key in now[section]
        if key not in RESUMABLE_CHANGES
        and saved[section].get(key, defaults[section][key]) != now[section][key]
    ]
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
    for line in path.read_text().splitlines():
        try:
            if json.loads(line)["step"] <= step:
                kept.append(line)
        except (json.JSONDecodeError, KeyError, TypeError):
            continue
    return kept
