"""Checkpoints: --resume reproduces an uninterrupted run, files are safe, bad states are refused.

Also: a run killed with SIGKILL at a random point inside a checkpoint write resumes to the same
adapter; a resume is checked (flags, step, intact files) before the model loads; a corrupt newest
checkpoint gives way to the newest intact one; a diverged policy is stopped before it is saved.

The runs use the quick tiny base, whose replies are nearly all invalid. With one token per reply
and a penalty of 1 per invalid action, the rare valid word still gives groups a reward spread, so
the adapter and the AdamW moments really move and resume has something to get wrong.
"""

from __future__ import annotations

import errno
import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file
from torch.utils.tensorboard import SummaryWriter

import minirl.trainer
import minirl.update
from minirl.config import TINY_LEARNING_RATE, BudgetArgs, Config, GRPOArgs, ModelArgs, TaskArgs
from minirl.infra.errors import CheckpointError, ConfigError, RunError
from minirl.models import load_policy
from minirl.rundir.checkpoint import (
    TrainerState,
    check_not_diverged,
    checkpoints,
    load_checkpoint,
    save_checkpoint,
    weights_problem,
)
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
    # The default schedule is constant: every step at tiny's rate (tests/test_lr_schedule.py
    # has the others).
    assert [m["learning_rate"] for m in metrics] == [TINY_LEARNING_RATE] * 4
    a2 = load_file(runs["full"] / "checkpoint-2" / ADAPTER)
    a4 = load_file(runs["full"] / "checkpoint-4" / ADAPTER)
    assert any(not torch.equal(a2[k], a4[k]) for k in a2)


def assert_same_metrics(full: list[dict], resumed: list[dict]) -> None:
    """Every metric but the timings equal, step by step (NaN where the other is NaN)."""
    for a, b in zip(full, resumed, strict=True):
        assert set(a) == set(b)
        for key in set(a) - TIMING_KEYS:
            x, y = a[key], b[key]
            if isinstance(x, float) and math.isnan(x):
                assert math.isnan(y), (a["step"], key)
            else:
                assert y == pytest.approx(x, abs=1e-6), (a["step"], key, x, y)


def assert_same_adapter(full: Path, resumed: Path) -> None:
    """The two runs' final adapters hold the same tensors."""
    a, b = load_file(full / ADAPTER), load_file(resumed / ADAPTER)
    assert a.keys() == b.keys() and len(a) > 0
    for key in a:
        torch.testing.assert_close(b[key], a[key], rtol=0, atol=1e-6)


def test_resume_reproduces_the_uninterrupted_run(runs: dict) -> None:
    full, resumed = read_metrics(runs["full"]), read_metrics(runs["part"])
    # The fake step-3 line is gone and step 3 was replayed: one line per step, in order.
    assert [m["step"] for m in resumed] == [1, 2, 3, 4]
    assert resumed[:2] == runs["at_kill"]  # lines from before the checkpoint are kept untouched
    assert_same_metrics(full, resumed)


def test_resumed_adapter_equals_uninterrupted_adapter(runs: dict) -> None:
    assert_same_adapter(runs["full"] / "checkpoint-4", runs["part"] / "checkpoint-4")


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
    # A user's backup copy: int('6.bak') used to crash both tools; only checkpoint-<N> counts.
    shutil.copytree(tmp_path / "checkpoint-3", tmp_path / "checkpoint-6.bak")
    assert [p.name for p in checkpoints(tmp_path)] == ["checkpoint-2", "checkpoint-3"]
    save_checkpoint(tmp_path, model, state_at(4))  # the pruning leaves the backup alone
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "checkpoint-3",
        "checkpoint-4",
        "checkpoint-6.bak",
        "checkpoint-9.tmp",
    ]
    state = load_checkpoint(checkpoints(tmp_path)[-1], model)
    assert state.step == 4 and state.python_rng == (3, tuple(range(625)), None)


def test_nan_weights_are_refused_and_the_last_checkpoint_survives(policy, tmp_path: Path) -> None:
    model, _ = policy
    good = save_checkpoint(tmp_path, model, state_at(1))
    saved = (good / ADAPTER).read_bytes()
    lora = next(p for n, p in model.named_parameters() if "lora_A" in n)
    with torch.no_grad():
        lora[0, 0] = float("nan")
    with pytest.raises(RunError, match="refusing to save step 2: .*lora_A.* holds NaN or inf"):
        save_checkpoint(tmp_path, model, state_at(2))
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint-1"]
    assert (good / ADAPTER).read_bytes() == saved


def test_nan_loss_warns_and_skips_the_update(
    quick_tiny_path: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = minirl.update.policy_loss

    def nan_loss(*args, **kwargs):
        loss, stats = real(*args, **kwargs)
        return loss * float("nan"), stats

    # The step's update (minirl.update) computes every micro-batch's loss with the policy_loss it
    # imported, so that name is the one to replace.
    monkeypatch.setattr(minirl.update, "policy_loss", nan_loss)
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


def refuse_model_loading(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the trainer fail loudly if it gets as far as loading the model."""

    def load_policy(*args, **kwargs):
        raise AssertionError("the model was loaded before the resume was checked")

    monkeypatch.setattr(minirl.trainer, "load_policy", load_policy)


def test_resume_with_another_lora_r_is_refused_before_the_model_loads(
    runs: dict, quick_tiny_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    refuse_model_loading(monkeypatch)
    cfg = small_config(quick_tiny_path, runs["part_copy"], 4, resume=True)
    cfg.model.lora_r = 8  # used to load the weights first: a size-mismatch RuntimeError
    with pytest.raises(ConfigError, match=r"different --lora_r \(16, now 8\)"):
        train(cfg, progress=False)


def test_resume_on_another_base_is_refused_before_the_model_loads(
    runs: dict, quick_tiny_path: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint records the base its run was trained on; a resume whose --model now loads
    another (a tiny recipe changed under the same flag) stops before anything loads."""
    from minirl.models import base_identity

    run = tmp_path / "rebased"
    shutil.copytree(runs["part_copy"], run)
    meta = run / "checkpoint-2" / "trainer_state.json"
    data = json.loads(meta.read_text())
    assert data["summary"]["base_model"] == base_identity(quick_tiny_path) == quick_tiny_path
    data["summary"]["base_model"] = "tiny (tiny-000000000000)"
    meta.write_text(json.dumps(data))
    refuse_model_loading(monkeypatch)
    with pytest.raises(ConfigError) as err:
        train(small_config(quick_tiny_path, run, 4, resume=True), progress=False)
    assert str(err.value) == (
        f"--resume: {run / 'checkpoint-2'} was trained on 'tiny (tiny-000000000000)', but "
        f"--model {quick_tiny_path} loads {quick_tiny_path} now; use the base it was trained on"
    )


def test_resume_past_max_steps_is_refused(
    runs: dict, quick_tiny_path: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = tmp_path / "done"
    shutil.copytree(runs["full"], run)
    summary = (run / "summary.json").read_text()
    refuse_model_loading(monkeypatch)
    cfg = small_config(quick_tiny_path, run, 2, resume=True)
    with pytest.raises(ConfigError) as err:
        train(cfg, progress=False)
    assert str(err.value) == (
        "--resume: checkpoint-4 is already at step 4, past --max_steps 2; resume with "
        "--max_steps 4 or more"
    )
    assert (run / "summary.json").read_text() == summary  # not rewritten as "2 steps"


def test_a_corrupt_newest_checkpoint_gives_way_to_the_newest_intact_one(
    runs: dict, quick_tiny_path: str, tmp_path: Path
) -> None:
    run = tmp_path / "corrupt"
    shutil.copytree(runs["full"], run)
    (run / "checkpoint-4" / ADAPTER).write_bytes(b"\0" * 64)  # a disk error
    with pytest.warns(UserWarning) as warned:
        train(small_config(quick_tiny_path, run, 4, resume=True), progress=False)
    (message,) = [str(w.message) for w in warned if "resuming" in str(w.message)]
    assert message.startswith(f"{run / 'checkpoint-4' / ADAPTER} is corrupt")
    assert message.endswith("; resuming from checkpoint-2, the newest intact checkpoint")
    # Steps 3 and 4 were replayed exactly: the same adapter as the uninterrupted run.
    a = load_file(runs["full"] / "checkpoint-4" / ADAPTER)
    b = load_file(run / "checkpoint-4" / ADAPTER)
    for key in a:
        torch.testing.assert_close(b[key], a[key], rtol=0, atol=1e-6)
    assert [m["step"] for m in read_metrics(run)] == [1, 2, 3, 4]


def test_nan_weights_are_refused_on_load(runs: dict, quick_tiny_path: str, tmp_path: Path) -> None:
    run = tmp_path / "nan"
    shutil.copytree(runs["part_copy"], run)
    weights = load_file(run / "checkpoint-2" / ADAPTER)
    key = sorted(weights)[0]
    weights[key] = torch.full_like(weights[key], float("nan"))
    save_file(weights, str(run / "checkpoint-2" / ADAPTER))
    with pytest.raises(CheckpointError) as err:
        train(small_config(quick_tiny_path, run, 4, resume=True), progress=False)
    assert str(err.value) == (
        f"--resume: {run / 'checkpoint-2'} holds unusable weights: {key} holds NaN or inf, and "
        "no older checkpoint is intact"
    )


def test_exploding_weights_are_a_diverged_policy(policy) -> None:
    model, _ = policy
    assert weights_problem({"w": torch.ones(3)}) is None
    assert weights_problem({"w": torch.tensor([1.0, float("inf")])}) == "w holds NaN or inf"
    assert weights_problem({"w": torch.tensor([2e4])}) == (
        "w reached 2e+04 (a sane run stays below 10000)"
    )
    check_not_diverged(model, 3, 1e-3)  # a fresh adapter is fine
    lora = next(p for n, p in model.named_parameters() if "lora_A" in n)
    with torch.no_grad():
        lora[0, 0] = 3e29  # what --learning_rate 1e30 does after one AdamW step
    with pytest.raises(RunError) as err:
        check_not_diverged(model, 3, 1e30)
    assert str(err.value).startswith("policy diverged at step 3: ")
    assert str(err.value).endswith(
        "reached 3e+29 (a sane run stays below 10000); it was not saved. Start a new run with "
        "a lower --learning_rate (this one used 1e+30)"
    )


def test_a_full_disk_mid_write_leaves_the_last_checkpoint_and_no_debris(
    policy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, _ = policy
    good = save_checkpoint(tmp_path, model, state_at(1))
    saved = {p.name: p.read_bytes() for p in good.iterdir()}

    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", "trainer_state.pt")

    monkeypatch.setattr(torch, "save", full_disk)
    with pytest.raises(OSError) as err:
        save_checkpoint(tmp_path, model, state_at(2))
    assert err.value.errno == errno.ENOSPC
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint-1"]  # the .tmp was removed
    assert {p.name: p.read_bytes() for p in good.iterdir()} == saved


# Runs the trainer in a child process that SIGKILLs itself at a random executed line inside the
# write of its last checkpoint (checkpoint-4; --save_steps 1). The lines are counted in the write
# before it (the first write also pays one-off costs, such as compiling peft's model-card
# template), and a line is drawn among them: at any call depth (mode "any"), or among the lines
# of save_checkpoint itself (mode "top": between its steps).
KILLED_CHILD = r"""
import json, os, random, signal, sys
import torch
import minirl.rundir.checkpoint
import minirl.trainer as trainer
from minirl.config import Config

cfg, seed, mode = Config.from_dict(json.loads(sys.argv[1])), int(sys.argv[2]), sys.argv[3]
torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
real_save, counted = trainer.save_checkpoint, []
top = minirl.rundir.checkpoint.save_checkpoint.__code__

def save_and_maybe_die(output_dir, model, state, *args, **kwargs):
    last = state.step == cfg.grpo.max_steps
    kill_at = random.Random(seed).randint(1, counted[-1]) if last else None
    lines = 0
    def tracer(frame, event, arg):
        nonlocal lines
        if event == "line" and (mode == "any" or frame.f_code is top):
            lines += 1
            if lines == kill_at:
                print(f"killed at line {lines} of {counted[-1]} ({frame.f_code.co_name}:"
                      f"{frame.f_lineno})", file=sys.stderr, flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
        return tracer
    sys.settrace(tracer)
    try:
        return real_save(output_dir, model, state, *args, **kwargs)
    finally:
        sys.settrace(None)
        counted.append(lines)

trainer.save_checkpoint = save_and_maybe_die
trainer.train(cfg, progress=False)
"""


def kill_and_resume(quick_tiny_path: str, run: Path, seed: int, mode: str) -> str:
    """Kill a 4-step run inside its last checkpoint write, then resume it; returns where."""
    cfg = small_config(quick_tiny_path, run, 4)
    cfg.grpo.save_steps = 1  # the write before the last one counts the lines
    proc = subprocess.run(
        [sys.executable, "-c", KILLED_CHILD, json.dumps(cfg.to_dict()), str(seed), mode],
        capture_output=True,
        text=True,
        timeout=900,
        # The child computes steps 1-3 that the in-process resume continues from, and the full run
        # is computed in-process: all of it must use one thread count, or the floats' summation
        # order differs (measured: 1e-5 on the adapter with 1 thread in the child, 2 here).
        env={**os.environ, "OMP_NUM_THREADS": str(torch.get_num_threads())},
    )
    where = f"MINIRL_KILL_SEED={seed}: {proc.stderr.strip().splitlines()[-1:]}"
    assert proc.returncode == -signal.SIGKILL, (where, proc.stderr[-2000:])
    assert checkpoints(run), where  # checkpoint-3, and checkpoint-4 if the rename happened
    # The flags of runs["full"]: save_steps may differ on a resume (it changes no result).
    train(small_config(quick_tiny_path, run, 4, resume=True), progress=False)
    return where


@pytest.mark.slow
def test_kill_at_a_random_point_inside_a_checkpoint_write_then_resume(
    runs: dict, quick_tiny_path: str, tmp_path: Path
) -> None:
    seed = int(os.environ.get("MINIRL_KILL_SEED", random.randrange(10**6)))
    run = tmp_path / "killed"
    where = kill_and_resume(quick_tiny_path, run, seed, "any")
    a = load_file(runs["full"] / "checkpoint-4" / ADAPTER)
    b = load_file(run / "checkpoint-4" / ADAPTER)
    assert a.keys() == b.keys(), where
    for key in a:
        torch.testing.assert_close(b[key], a[key], rtol=0, atol=1e-6, msg=where)
    full, resumed = read_metrics(runs["full"]), read_metrics(run)
    assert [m["step"] for m in resumed] == [1, 2, 3, 4], where
    for x, y in zip(full, resumed, strict=True):
        assert x.keys() == y.keys(), where
        assert {k: v for k, v in x.items() if k not in TIMING_KEYS} == pytest.approx(
            {k: v for k, v in y.items() if k not in TIMING_KEYS}, abs=1e-6, nan_ok=True
        ), where
    assert not list(run.glob("*.tmp")), where
