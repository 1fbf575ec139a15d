"""Checkpoints: --resume reproduces an uninterrupted run, files are safe, bad states are refused.

The runs use the quick tiny base, whose replies are nearly all invalid. With one token per reply
and a penalty of 1 per invalid action, the rare valid word still gives groups a reward spread, so
the adapter and the AdamW moments really move and resume has something to get wrong.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from torch.utils.tensorboard import SummaryWriter

import minirl.grpo
from minirl.checkpoint import (
    TrainerState,
    checkpoints,
    load_checkpoint,
    save_checkpoint,
)
from minirl.config import BudgetArgs, Config, GRPOArgs, ModelArgs, TaskArgs
from minirl.errors import CheckpointError, ConfigError
from minirl.models import load_policy
from minirl.trainer import train

TIMING_KEYS = {"seconds", "rollout_seconds"}
ADAPTER = "adapter_model.safetensors"


def small_config(model: str, output_dir: Path, max_steps: int, **grpo: object) -> Config:
    return Config(
        model=ModelArgs(model=model),
        grpo=GRPOArgs(
            num_generations=4,
            max_steps=max_steps,
            save_steps=2,
            eval_seeds=0,
            seed=0,
            output_dir=str(output_dir),
            **grpo,
        ),
        budget=BudgetArgs(mode="budgetmix", budget_min=2, budget_max=4),
        task=TaskArgs(tasks_per_step=2, max_new_tokens=1, invalid_penalty=1.0),
    )


def read_metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def runs(quick_tiny_path: str, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """An uninterrupted 4-step run, and one killed after step 3 (checkpoint at 2) then resumed."""
    tmp = tmp_path_factory.mktemp("resume")
    full, part = tmp / "full", tmp / "part"
    train(small_config(quick_tiny_path, full, 4), progress=False)
    train(small_config(quick_tiny_path, part, 2), progress=False)
    at_kill = read_metrics(part)
    # The killed process logged step 3 but died before its next checkpoint (at 4).
    fake = {**at_kill[-1], "step": 3, "reward": 123.0, "loss": 456.0}
    with (part / "metrics.jsonl").open("a") as f:
        f.write(json.dumps(fake) + "\n")
    # ... and to its tracker (--report_to's default), which the resumed run must forget too.
    writer = SummaryWriter(str(part / "tensorboard"))
    writer.add_scalar("train/reward", 123.0, 3)
    writer.close()
    shutil.copytree(part, tmp / "part_copy")  # for the mismatched-config test, before resuming
    train(small_config(quick_tiny_path, part, 4, resume=True), progress=False)
    return {"full": full, "part": part, "part_copy": tmp / "part_copy", "at_kill": at_kill}


def test_tensorboard_forgets_what_the_killed_run_logged(runs: dict) -> None:
    """After kill + resume, TensorBoard's own reader sees exactly metrics.jsonl: every key, every
    step once, and not the killed run's step 3 (the resumed writer's purge_step drops it)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(runs["part"] / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    metrics = read_metrics(runs["part"])
    assert [m["step"] for m in metrics] == [1, 2, 3, 4]
    numeric = [
        k for k, v in metrics[0].items() if isinstance(v, int | float) and not isinstance(v, bool)
    ]
    keys = [k for k in numeric if k != "step"]
    assert {f"train/{k}" for k in keys} == set(events.Tags()["scalars"])
    for key in keys:
        logged = [(e.step, e.value) for e in events.Scalars(f"train/{key}")]
        assert logged == [(m["step"], np.float32(m[key])) for m in metrics], key
    assert 123.0 not in [e.value for e in events.Scalars("train/reward")]


def test_the_runs_really_learn_something(runs: dict) -> None:
    # Otherwise "resume is exact" could hold trivially with a frozen adapter.
    metrics = read_metrics(runs["full"])
    assert any(m["grad_norm"] > 0 for m in metrics[2:]), metrics
    assert all(2 <= m["budget"] <= 4 for m in metrics)  # BudgetMix drew from 2..4
    a2 = load_file(runs["full"] / "checkpoint-2" / ADAPTER)
    a4 = load_file(runs["full"] / "checkpoint-4" / ADAPTER)
    assert any(not torch.equal(a2[k], a4[k]) for k in a2)


def test_resume_reproduces_the_uninterrupted_run(runs: dict) -> None:
    full, resumed = read_metrics(runs["full"]), read_metrics(runs["part"])
    # The fake step-3 line is gone and step 3 was replayed: one line per step, in order.
    assert [m["step"] for m in resumed] == [1, 2, 3, 4]
    assert resumed[:2] == runs["at_kill"]  # lines from before the checkpoint are kept untouched
    for a, b in zip(full, resumed, strict=True):
        assert set(a) == set(b)
        for key in set(a) - TIMING_KEYS:
            x, y = a[key], b[key]
            if isinstance(x, float) and math.isnan(x):
                assert math.isnan(y), (a["step"], key)
            else:
                assert y == pytest.approx(x, abs=1e-6), (a["step"], key, x, y)


def test_resumed_adapter_equals_uninterrupted_adapter(runs: dict) -> None:
    a = load_file(runs["full"] / "checkpoint-4" / ADAPTER)
    b = load_file(runs["part"] / "checkpoint-4" / ADAPTER)
    assert a.keys() == b.keys() and len(a) > 0
    for key in a:
        torch.testing.assert_close(b[key], a[key], rtol=0, atol=1e-6)


def test_checkpoint_layout_and_safe_loading(runs: dict, quick_tiny_path: str) -> None:
    full = runs["full"]
    assert [p.name for p in checkpoints(full)] == ["checkpoint-2", "checkpoint-4"]
    assert not list(full.glob("*.tmp"))
    ckpt = full / "checkpoint-4"
    for name in (ADAPTER, "adapter_config.json", "trainer_state.pt", "trainer_state.json"):
        assert (ckpt / name).is_file(), name
    raw = torch.load(ckpt / "trainer_state.pt", weights_only=True)  # plain data, no pickled code
    assert raw["step"] == 4 and raw["torch_rng"].dtype == torch.uint8
    assert raw["optimizer"]["state"], "AdamW moments must be saved for an exact resume"
    meta = json.loads((ckpt / "trainer_state.json").read_text())
    assert meta["step"] == 4
    assert meta["config"] == small_config(quick_tiny_path, full, 4).to_dict()
    summary = json.loads((full / "summary.json").read_text())
    assert summary["steps"] == 4


def test_resume_with_a_changed_flag_is_a_config_error(runs: dict, quick_tiny_path: str) -> None:
    run = runs["part_copy"]
    before = (run / "metrics.jsonl").read_text()
    cfg = small_config(quick_tiny_path, run, 4, resume=True, learning_rate=5e-4)
    with pytest.raises(ConfigError, match="--learning_rate"):
        train(cfg, progress=False)
    assert (run / "metrics.jsonl").read_text() == before  # refused before touching anything
    assert [p.name for p in checkpoints(run)] == ["checkpoint-2"]


def test_resume_after_a_kill_mid_line(runs: dict, quick_tiny_path: str, tmp_path: Path) -> None:
    run = tmp_path / "cut"
    shutil.copytree(runs["part_copy"], run)
    with (run / "metrics.jsonl").open("a") as f:
        f.write('{"step": 4, "rew')  # the process died while writing this line
    train(small_config(quick_tiny_path, run, 4, resume=True), progress=False)
    assert [m["step"] for m in read_metrics(run)] == [1, 2, 3, 4]


@pytest.fixture()
def policy(quick_tiny_path: str):
    # A private copy: these tests poison weights, which must not leak into shared fixtures.
    return load_policy(quick_tiny_path, quant="nf4")


def state_at(step: int) -> TrainerState:
    return TrainerState(
        step=step,
        optimizer={"state": {}, "param_groups": []},
        torch_rng=torch.get_rng_state(),
        python_rng=(3, tuple(range(625)), None),
        config={"note": "test"},
        summary={},
    )


def test_only_the_newest_two_are_kept_and_tmp_dirs_are_ignored(policy, tmp_path: Path) -> None:
    model, _ = policy
    for step in (1, 2, 3):
        save_checkpoint(tmp_path, model, state_at(step))
    (tmp_path / "checkpoint-9.tmp").mkdir()  # a write killed half-way
    assert [p.name for p in checkpoints(tmp_path)] == ["checkpoint-2", "checkpoint-3"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "checkpoint-2",
        "checkpoint-3",
        "checkpoint-9.tmp",
    ]
    state = load_checkpoint(checkpoints(tmp_path)[-1], model)
    assert state.step == 3 and state.python_rng == (3, tuple(range(625)), None)


def test_nan_weights_are_refused_and_the_last_checkpoint_survives(policy, tmp_path: Path) -> None:
    model, _ = policy
    good = save_checkpoint(tmp_path, model, state_at(1))
    saved = (good / ADAPTER).read_bytes()
    lora = next(p for n, p in model.named_parameters() if "lora_A" in n)
    with torch.no_grad():
        lora[0, 0] = float("nan")
    with pytest.raises(CheckpointError, match="not finite"):
        save_checkpoint(tmp_path, model, state_at(2))
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint-1"]
    assert (good / ADAPTER).read_bytes() == saved


def test_nan_loss_warns_and_skips_the_update(
    quick_tiny_path: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = minirl.grpo.policy_loss

    def nan_loss(*args, **kwargs):
        loss, stats = real(*args, **kwargs)
        return loss * float("nan"), stats

    # The trainer calls grpo.policy_loss through the module, so patching the attribute reaches it.
    monkeypatch.setattr(minirl.grpo, "policy_loss", nan_loss)
    run = tmp_path / "nan"
    cfg = small_config(quick_tiny_path, run, 1)
    with pytest.warns(UserWarning, match="non-finite loss"):
        result = train(cfg, progress=False)
    (m,) = result.metrics
    assert m["skipped_updates"] == 1 and math.isnan(m["loss"]) and m["grad_norm"] == 0.0
    saved = load_file(run / "checkpoint-1" / ADAPTER)
    assert all(torch.isfinite(t).all() for t in saved.values())
    # Unchanged from initialisation: peft starts every lora_B at zero, and no step was taken.
    b_weights = [t for k, t in saved.items() if "lora_B" in k]
    assert b_weights and all(torch.count_nonzero(t) == 0 for t in b_weights)
    torch.manual_seed(cfg.grpo.seed)  # the trainer seeds before building the adapter
    fresh, _ = load_policy(quick_tiny_path, quant="nf4")
    init = {n: p for n, p in fresh.named_parameters() if p.requires_grad}
    assert len(init) == len(saved)
    for key, tensor in saved.items():
        match = [p for n, p in init.items() if n.replace(".default", "") == key]
        assert len(match) == 1, key
        torch.testing.assert_close(tensor, match[0].detach().cpu(), rtol=0, atol=0)
