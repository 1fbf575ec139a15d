"""The config dataclasses and the checks across fields (one field alone: test_validation.py)."""

from __future__ import annotations

import pytest

from minirl.config import (
    BudgetArgs,
    Config,
    EvalArgs,
    GRPOArgs,
    ModelArgs,
    StudyArgs,
    TaskArgs,
    validate,
    validate_eval,
    validate_study,
)
from minirl.infra.errors import ConfigError, ModelLoadError


def test_checks_that_involve_two_fields() -> None:
    cases = [
        (
            Config(budget=BudgetArgs(budget_min=9, budget_max=3)),
            r"--budget_min \(9\) must be <= --budget_max \(3\)",
        ),
        (Config(grpo=GRPOArgs(resume=True, overwrite_output_dir=True)), "conflict"),
        (
            Config(grpo=GRPOArgs(backend="trl"), task=TaskArgs(reward_mode="process")),
            "--reward_mode process needs per-turn advantages",
        ),
        (
            Config(grpo=GRPOArgs(backend="trl", step_advantage_w=1.0)),
            "--step_advantage_w needs per-turn advantages",
        ),
    ]
    for cfg, message in cases:
        with pytest.raises(ConfigError, match=message):
            validate(cfg)
    assert validate_eval(EvalArgs(k="1,2", t="2-4,8", n=2)) == ([1, 2], [2, 3, 4, 8])
    with pytest.raises(ConfigError, match=r"--k '1,4': values must be <= 2 \(pass@K needs"):
        validate_eval(EvalArgs(k="1,4", n=2))
    with pytest.raises(ConfigError, match="need --tight < --generous"):
        validate_study(StudyArgs(tight=8, generous=8))


def test_the_model_is_checked_with_the_flags() -> None:
    with pytest.raises(ModelLoadError, match="'tinyx': no such model directory"):
        validate(Config(model=ModelArgs(model="tinyx")))
    with pytest.raises(ModelLoadError, match="no such model directory"):
        validate_eval(EvalArgs(model="./nope"))


def test_each_backend_has_its_default_run_directory() -> None:
    assert Config().output_dir == "runs/budgetmix-gridnav"
    assert Config(grpo=GRPOArgs(backend="trl")).output_dir == "runs/trl-budgetmix-gridnav"
    assert Config(grpo=GRPOArgs(output_dir="x")).output_dir == "x"
