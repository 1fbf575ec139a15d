"""--lr_scheduler_type and --warmup_steps: the rates each step trains at, and an exact resume.

(The default, constant, is checked in tests/test_checkpoint.py, on the runs it already trains.)

The expected rates are written out by hand from the schedules' formulas (transformers'
get_scheduler): linear decays lr * (1 - t / max_steps) at step t (0-based), cosine with w warmup
steps is lr * t / w while t < w and lr * (1 + cos(pi * (t - w) / (max_steps - w))) / 2 after.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from test_checkpoint import assert_same_adapter, assert_same_metrics, read_metrics, small_config

import minirl.trainer as trainer
from minirl.config import Config, GRPOArgs, validate
from minirl.infra.errors import ConfigError

LR = 1e-3


def rates(run: Path) -> list[float]:
    return [m["learning_rate"] for m in read_metrics(run)]


def test_linear_decays_to_zero_at_max_steps(quick_tiny_path: str, tmp_path: Path) -> None:
    cfg = small_config(quick_tiny_path, tmp_path, 2, learning_rate=LR, lr_scheduler_type="linear")
    trainer.train(cfg, progress=False)
    assert rates(tmp_path) == pytest.approx([LR, 0.5 * LR], rel=1e-12)


@pytest.fixture(scope="module")
def cosine_runs(quick_tiny_path: str, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A 4-step cosine run with one warmup step, uninterrupted, and one killed after its
    checkpoint at step 2 and resumed with the same flags."""
    tmp = tmp_path_factory.mktemp("cosine")
    flags = {"learning_rate": LR, "lr_scheduler_type": "cosine", "warmup_steps": 1}
    trainer.train(small_config(quick_tiny_path, tmp / "full", 4, **flags), progress=False)
    real_save = trainer.save_checkpoint

    def save_then_die(output_dir, model, state, *args, **kwargs):  # noqa: ANN001, ANN202
        real_save(output_dir, model, state, *args, **kwargs)
        if state.step == 2:
            raise KeyboardInterrupt  # the run stops right after its step-2 checkpoint

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(trainer, "save_checkpoint", save_then_die)
        with pytest.raises(KeyboardInterrupt):
            trainer.train(small_config(quick_tiny_path, tmp / "part", 4, **flags), progress=False)
    assert [m["step"] for m in read_metrics(tmp / "part")] == [1, 2]
    resumed = small_config(quick_tiny_path, tmp / "part", 4, resume=True, **flags)
    trainer.train(resumed, progress=False)
    return {"full": tmp / "full", "part": tmp / "part", "flags": flags}


def test_cosine_warms_up_then_falls(cosine_runs: dict) -> None:
    after_warmup = [(1 + math.cos(math.pi * k / 3)) / 2 for k in range(3)]  # 1, 0.75, 0.25
    expected = [0.0] + [LR * f for f in after_warmup]
    assert rates(cosine_runs["full"]) == pytest.approx(expected, abs=1e-15)


def test_a_resumed_schedule_goes_on_where_it_stopped(cosine_runs: dict) -> None:
    full, resumed = read_metrics(cosine_runs["full"]), read_metrics(cosine_runs["part"])
    assert [m["learning_rate"] for m in resumed] == [m["learning_rate"] for m in full]
    assert_same_metrics(full, resumed)
    assert_same_adapter(cosine_runs["full"] / "checkpoint-4", cosine_runs["part"] / "checkpoint-4")


def test_a_decaying_schedule_refuses_another_max_steps_on_resume(
    cosine_runs: dict, quick_tiny_path: str
) -> None:
    cfg = small_config(quick_tiny_path, cosine_runs["part"], 6, resume=True, **cosine_runs["flags"])
    with pytest.raises(ConfigError, match=r"--max_steps \(4, now 6\)"):
        trainer.train(cfg, progress=False)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"warmup_steps": 2}, "--warmup_steps 2 does nothing with --lr_scheduler_type constant"),
        (
            {"warmup_steps": 9, "lr_scheduler_type": "linear", "max_steps": 4},
            r"--warmup_steps \(9\) must be <= --max_steps \(4\)",
        ),
        ({"lr_scheduler_type": "step"}, "--lr_scheduler_type"),
    ],
)
def test_bad_schedules_are_one_line_errors(flags: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        validate(Config(grpo=GRPOArgs(**flags)))
