"""tutorials/recipes/*.yaml: every recipe says what it reaches, loads, validates, and trains.

A recipe is a `--config` file for train.py from one measured run; its header states what that run
reached, in what time, on what hardware. Here each one is parsed exactly as `python train.py
--config FILE` parses it, validated, and run for one step at toy size (flags after --config
override it, as on the command line).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

import train
from minirl.config import Config, validate
from minirl.infra.errors import ConfigError
from minirl.models import load_policy
from minirl.trainer import train as run_training

RECIPES = sorted((Path(__file__).resolve().parents[1] / "tutorials" / "recipes").glob("*.yaml"))
TOY = [
    *("--max_steps", "1", "--tasks_per_step", "1", "--num_generations", "2"),
    *("--eval_seeds", "0", "--report_to", "none", "--max_new_tokens", "4"),
]


def test_there_are_recipes_for_tiny_on_every_task_and_smollm2() -> None:
    import tasks

    names = {p.stem for p in RECIPES}
    assert {f"tiny-{task}" for task in tasks.NAMES} <= names
    # The real model's: guess and hilo, where it learns (hilo with the outcome reward); gridnav,
    # where it does not (each header says what it reaches).
    assert {"smollm2-guess", "smollm2-hilo", "smollm2-gridnav"} <= names


@pytest.mark.parametrize("recipe", RECIPES, ids=[p.stem for p in RECIPES])
def test_recipe_header_states_its_measured_run(recipe: Path) -> None:
    header = [line[1:].strip() for line in recipe.read_text().splitlines() if line.startswith("#")]
    text = " ".join(header)
    for field in ("Reaches:", "Time:", "Hardware:", "Run:"):
        assert field in text, f"{recipe.name}: the header needs a {field!r} line"
    assert f"python train.py --config tutorials/recipes/{recipe.name}" in text


@pytest.mark.parametrize("recipe", RECIPES, ids=[p.stem for p in RECIPES])
def test_recipe_loads_validates_and_trains_a_step(
    recipe: Path, tmp_path: Path, quick_base: Callable[[str], str]
) -> None:
    cfg = train.parse(["--config", str(recipe)])
    validate(cfg)
    assert cfg.grpo.output_dir == f"runs/{recipe.stem}", "a recipe's runs go to runs/<its name>"
    # A tiny recipe's step runs on its task's quick base (the task's own recipe cut to 4 warm-start
    # steps, conftest.quick_base): the full base is one to two minutes of building per task, and
    # the step's code does not depend on how well the base plays. Nothing here asserted the full
    # bases' quality; test_tiny and test_hidden_tasks do, for gridnav and house.
    model = ["--model", quick_base(cfg.task.task)] if cfg.model.model == "tiny" else []
    if cfg.model.init_adapter:
        # A curriculum recipe starts from an earlier recipe's adapter, which no test trains for
        # real: fresh adapters of the same model, rank and alpha stand in, saved as peft saves.
        model += ["--init_adapter", fresh_adapter(cfg, model, tmp_path / "start")]
    toy = train.parse(
        ["--config", str(recipe), *TOY, "--output_dir", str(tmp_path / "run"), "--budget", "2"]
        + ["--budget_min", "2", "--budget_max", "2", *model]
    )
    result = run_training(toy, progress=False)
    assert len(result.metrics) == 1 and result.metrics[0]["step"] == 1
    assert (tmp_path / "run" / "metrics.jsonl").exists()


def fresh_adapter(cfg: Config, model: list[str], where: Path) -> str:
    """Untrained LoRA adapters for the recipe's model (or the quick base in `model`), saved."""
    name = model[1] if model else cfg.model.model
    policy, _ = load_policy(
        name, "none", cfg.model.lora_r, cfg.model.lora_alpha, task=cfg.task.task
    )
    policy.save_pretrained(where)
    return str(where)


# The TRL backend's step is checked on each chat-model recipe that starts from fresh adapters; a
# curriculum recipe's settings are its first recipe's, and tests/test_init_adapter.py checks
# that the TRL backend starts from the adapter it is given.
SMOLLM2 = [
    p
    for p in RECIPES
    if p.stem.startswith("smollm2-") and not train.parse(["--config", str(p)]).model.init_adapter
]


@pytest.mark.slow
@pytest.mark.parametrize("recipe", SMOLLM2, ids=[p.stem for p in SMOLLM2])
def test_the_trl_backend_runs_the_smollm2_recipes(recipe: Path, tmp_path: Path) -> None:
    """TRL's GRPOTrainer runs the real model's recipes too, with two of their settings set back:
    no dynamic sampling (tied groups are replaced inside minirl's step, which TRL's trainer does
    not let a rollout function do) and the outcome reward (GRPOTrainer gives one advantage per
    episode, so the per-turn credit of --reward_mode process cannot be expressed); both are
    refused in one line otherwise."""
    args = ["--config", str(recipe), *TOY, "--output_dir", str(tmp_path / "run")]
    args += ["--backend", "trl", "--num_generations", "2", "--budget_min", "2", "--budget_max", "2"]
    with pytest.raises(ConfigError, match="--backend trl"):
        validate(train.parse(args))
    toy = train.parse([*args, "--dynamic_sampling", "false", "--reward_mode", "outcome"])
    from minirl.trl_backend import train_trl

    result = train_trl(toy, progress=False)
    assert len(result.metrics) == 1 and result.metrics[0]["step"] == 1
    assert (tmp_path / "run" / "metrics.jsonl").exists()
