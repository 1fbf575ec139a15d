"""Every tensor minirl creates lives on the model's device, checked without a GPU.

On a GPU machine a tensor created without a device lands on the CPU, and the first operation that
combines it with a tensor on the GPU raises ("Expected all tensors to be on the same device").
Here the model is on the CPU, which is also the default device, so that bug stays invisible. This
test makes it visible. Inside `HostTensorsOnMeta`, a tensor factory (`torch.tensor`, `zeros`,
`full`, `arange`, ...) called *from minirl's own code* without a `device=` builds a tensor on
PyTorch's `meta` device (shapes, no data) instead of the CPU. Such a tensor raises as soon as it
meets a real (model-device) tensor in an operation, is fed to the model, is moved with `.to()`,
or is read with `.item()`/`.tolist()`. That is stricter than CUDA, which lets a CPU tensor be
read and moved: here every factory call in minirl must name its device, which is the rule.
Library code (torch, transformers, peft, bitsandbytes, TRL) is left alone: only call sites in
minirl/ and tasks/ are redirected, and in this file, for the planted bug that shows the check
works.

The mode also counts the redirected calls: on correct code there are none.
"""

from __future__ import annotations

import math
import random
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch.overrides import TorchFunctionMode

from minirl import grpo
from minirl.config import BudgetArgs, Config, EvalArgs, GRPOArgs, TaskArgs
from minirl.trainer import train_step

ROOT = Path(__file__).resolve().parents[1]
OWN_CODE = (str(ROOT / "minirl") + "/", str(ROOT / "tasks") + "/", __file__)
FACTORIES: set[Callable] = {
    torch.tensor,
    torch.as_tensor,
    torch.zeros,
    torch.ones,
    torch.full,
    torch.empty,
    torch.arange,
    torch.rand,
    torch.randn,
    torch.randint,
    torch.randperm,
    torch.linspace,
    torch.eye,
}


class HostTensorsOnMeta(TorchFunctionMode):
    """Send minirl's device-less tensor factories to `meta`, and count them."""

    def __init__(self) -> None:
        super().__init__()
        self.redirected: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = dict(kwargs or {})
        if func in FACTORIES and kwargs.get("device") is None:
            # as_tensor of a tensor keeps that tensor's device: nothing is created.
            copies = func is torch.as_tensor and args and isinstance(args[0], torch.Tensor)
            caller = sys._getframe(1).f_code  # the Python line that called the factory
            if not copies and caller.co_filename.startswith(OWN_CODE):
                kwargs["device"] = "meta"
                self.redirected.append(f"{Path(caller.co_filename).name}:{caller.co_name}")
        return func(*args, **kwargs)


def test_the_mode_redirects_only_minirl_factories() -> None:
    with HostTensorsOnMeta() as mode:
        here = torch.zeros(2)
        named = torch.zeros(2, device="cpu")
        library = torch.nn.functional.one_hot(torch.tensor([1], device="cpu"), 3)
    assert here.device.type == "meta" and named.device.type == "cpu"
    assert library.device.type == "cpu"  # created inside torch, not by a minirl line
    assert mode.redirected == ["test_devices.py:test_the_mode_redirects_only_minirl_factories"]


def step_config(**grpo_args) -> Config:
    return Config(
        grpo=GRPOArgs(num_generations=2, eval_seeds=0, per_device_train_batch_size=3, **grpo_args),
        budget=BudgetArgs(mode="budgetmix", budget_min=2, budget_max=3),
        task=TaskArgs(tasks_per_step=3),
    )


def buggy_token_advantages(
    rewards: list[float], loss_mask: torch.Tensor, num_generations: int, scale_rewards: str, **_
) -> tuple[torch.Tensor, float]:
    """The step's old bug, planted back: the rewards tensor is built on the default device."""
    adv, zero_std = grpo.group_advantages(torch.tensor(rewards), num_generations, scale_rewards)
    return grpo.trajectory_token_advantages(adv, loss_mask), zero_std


def test_the_check_catches_a_host_tensor_in_the_step(quick_policy, monkeypatch) -> None:
    model, tok = quick_policy
    monkeypatch.setattr(grpo, "token_advantages", buggy_token_advantages)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=0.0)
    with pytest.raises(RuntimeError, match="meta"), HostTensorsOnMeta():
        train_step(model, tok, optimizer, step_config(), random.Random(0), 0)
    # Without the check the planted bug passes on this CPU-only machine: why the check exists.
    metrics = train_step(model, tok, optimizer, step_config(), random.Random(0), 0)
    assert math.isfinite(metrics["loss"])


@pytest.mark.parametrize(
    ("grpo_args", "task_args"),
    [
        ({"beta": 0.1, "num_iterations": 2, "loss_type": "grpo"}, {}),
        (
            {"reuse_kv_cache": False, "loss_type": "dr_grpo", "beta": 0.05},
            {"reward_mode": "process"},
        ),
    ],
)
def test_training_steps_create_no_host_tensors(quick_policy, grpo_args, task_args) -> None:
    """Rollout (cached and simple), advantages (outcome and per-turn), the KL reference pass,
    accumulated backward passes and the optimizer step."""
    model, tok = quick_policy
    saved = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    # The quick base ties every group's outcome at these budgets, so outcome advantages are 0;
    # moving the adapters off zero makes the policy differ from the reference, so the KL term
    # (and any advantage) has a gradient: grad_norm > 0 shows the backward passes really ran.
    generator = torch.Generator(device="cpu").manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.copy_(0.05 * torch.randn(param.shape, generator=generator, device="cpu"))
    cfg = step_config(**grpo_args)
    for key, value in task_args.items():
        setattr(cfg.task, key, value)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    try:
        with HostTensorsOnMeta() as mode:
            metrics = train_step(model, tok, optimizer, cfg, random.Random(0), 0)
    finally:
        with torch.no_grad():
            for name, param in model.named_parameters():
                if name in saved:
                    param.copy_(saved[name])
    assert mode.redirected == []
    assert math.isfinite(metrics["loss"]) and metrics["skipped_updates"] == 0
    assert metrics["grad_norm"] > 0


def test_evaluation_creates_no_host_tensors(quick_tiny_path: str, quick_policy) -> None:
    """evaluate.py's whole path (Pass@(K,T), the decision states, the analyses), and the
    held-out success every training run reports."""
    from minirl.compare import compare
    from minirl.eval.sampler import run_success

    model, tok = quick_policy
    args = EvalArgs(
        checkpoints="base",
        model=quick_tiny_path,
        k="1,2",
        t="2,3",
        n=2,
        instances=2,
        decision_states=2,
        decision_samples=2,
        bootstrap=10,
    )
    cfg = step_config()
    cfg.grpo.eval_seeds = 2
    cfg.budget.budget_min, cfg.budget.budget_max = 2, 4
    with HostTensorsOnMeta() as mode:
        results = compare(args, progress=False)
        success = run_success(model, tok, cfg)
    assert mode.redirected == []
    assert set(results.checkpoints) == {"base"}
    assert sorted(success) == ["2", "3", "4"]
    assert all(r["n"] == 2 for r in success.values())


def test_benchmark_parts_create_no_host_tensors(quick_policy) -> None:
    from minirl.config import BenchArgs
    from minirl.tools import bench
    from minirl.tools.measure import model_shape

    model, tok = quick_policy
    args = BenchArgs(
        turns="2",
        episodes=2,
        naive_budget=2,
        tasks_per_step=2,
        num_generations=2,
        per_device_train_batch_size=2,
    )
    shape = model_shape(model)
    with HostTensorsOnMeta() as mode:
        rollouts = bench.bench_rollouts(model, tok, args, shape)
        batching = bench.bench_batching(model, tok, args, shape)
        forward = bench.bench_training_forward(model, tok, args)
    assert mode.redirected == []
    assert rollouts["rows"][0]["identical_episodes"] == 1.0
    assert batching["episodes"] == 2
    assert forward["bucketed"]["seconds"] > 0
