"""The train.py CLI: --help documents every flag, --config YAML works, bad input fails well.

"Fails well" (DESIGN.md section 11) means: exit status 2, a last stderr line that starts with
"train.py: error:" and names the flag (and the valid choices where there are some), no Python
traceback, and nothing trained or overwritten. The bad-input cases run as real subprocesses, all
launched at once so their imports overlap on the CPU cores instead of adding up.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from minirl.config import BudgetArgs, Config, GRPOArgs, ModelArgs, TaskArgs

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # train.py is a script at the repo root, not part of the package
import train  # noqa: E402

SECTIONS = (ModelArgs, GRPOArgs, BudgetArgs, TaskArgs)


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str

    @property
    def last_error_line(self) -> str:
        lines = [line for line in self.stderr.splitlines() if line.strip()]
        return lines[-1] if lines else ""


def cli_env() -> dict[str, str]:
    # Passed explicitly: the session's MINIRL_CACHE (fixtures set and undo it in-process) reaches
    # the child, so a `tiny` base is never built in a surprising place. One thread each: the
    # children run side by side, and spinning thread pools would fight over the cores.
    return {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}


def run_many(commands: dict[str, list[str]], timeout: float = 120) -> dict[str, Run]:
    """Run `python train.py ARGS` for every entry concurrently; imports dominate each run."""
    procs = {
        name: subprocess.Popen(
            [sys.executable, "train.py", *args],
            cwd=ROOT,
            env=cli_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, args in commands.items()
    }
    results = {}
    for name, proc in procs.items():
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:  # e.g. a bad flag that was accepted and started training
            proc.kill()
            out, err = proc.communicate()
        results[name] = Run(proc.returncode, out, err)
    return results


def one_step_run(model_path: str, output_dir: Path) -> Config:
    """A real 1-step training run in-process (cheaper than a subprocess): a real checkpoint."""
    from minirl.trainer import train as train_run

    cfg = Config(
        model=ModelArgs(model=model_path),
        grpo=GRPOArgs(num_generations=2, max_steps=1, eval_seeds=0, output_dir=str(output_dir)),
        budget=BudgetArgs(mode="fixed", budget=2),
        task=TaskArgs(tasks_per_step=1, max_new_tokens=1),
    )
    train_run(cfg, progress=False)
    return cfg


@pytest.fixture(scope="module")
def runs(quick_tiny_path: str, tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("cli")
    real = tmp / "real"
    one_step_run(quick_tiny_path, real)
    corrupt = tmp / "corrupt"
    shutil.copytree(real, corrupt)
    (corrupt / "checkpoint-1" / "adapter_model.safetensors").write_bytes(b"not a safetensors file")
    (tmp / "empty").mkdir()
    bad_yaml = tmp / "bad.yaml"
    bad_yaml.write_text("mode: sometimes\n")
    model = ["--model", quick_tiny_path]
    fresh = str(tmp / "never")  # validation failures must not even create their output_dir
    commands = {
        "help": ["--help"],
        "mode": ["--mode", "sometimes", "--output_dir", fresh],
        "task": ["--task", "chess", "--output_dir", fresh],
        "quant": ["--quant", "int8", "--output_dir", fresh],
        "budget_range": ["--budget_min", "9", "--budget_max", "3", "--output_dir", fresh],
        "budget_zero": ["--mode", "fixed", "--budget", "0", "--output_dir", fresh],
        "generations": ["--num_generations", "1", "--output_dir", fresh],
        "yaml_choice": ["--config", str(bad_yaml), "--output_dir", fresh],
        "yaml_missing": ["--config", str(tmp / "missing.yaml"), "--output_dir", fresh],
        "unknown_flag": ["--no_such_flag", "0.1", "--output_dir", fresh],
        # argparse would read a prefix as --learning_rate and start a full default run.
        "abbreviation": ["--learning_rat", "0.1", "--output_dir", fresh],
        "model": ["--model", "./nope", "--output_dir", fresh],
        "backend": ["--backend", "jax", "--output_dir", fresh],
        "backend_process": ["--backend", "trl", "--reward_mode", "process", "--output_dir", fresh],
        "resume_empty": [*model, "--output_dir", str(tmp / "empty"), "--resume"],
        # Same flags as the run that made it, so only the corrupt file can be the problem.
        "resume_corrupt": [
            *model,
            *("--num_generations", "2", "--eval_seeds", "0", "--mode", "fixed"),
            *("--budget", "2", "--tasks_per_step", "1", "--max_new_tokens", "1"),
            *("--max_steps", "2", "--output_dir", str(corrupt), "--resume"),
        ],
        "existing": [*model, "--output_dir", str(real), "--steps", "2"],
    }
    before = {p.name: p.read_bytes() for p in (real / "checkpoint-1").iterdir()}
    return {"tmp": tmp, "real": real, "before": before, "results": run_many(commands)}


def test_help_documents_every_flag(runs: dict) -> None:
    help_run = runs["results"]["help"]
    assert help_run.returncode == 0, help_run.stderr
    text = help_run.stdout
    squashed = "".join(text.split())  # argparse re-wraps help text, even at hyphens
    for section in SECTIONS:
        for field in dataclasses.fields(section):
            assert f"--{field.name}" in text, field.name
            assert "".join(field.metadata["help"].split()) in squashed, field.name
    for flag in ("--config", "--steps", "--budget-min", "--budget_min", "--max-steps"):
        assert flag in text, flag
    assert "Traceback" not in help_run.stderr


# name -> words the one-line error must contain (the flag, and the valid choices where known)
BAD_INPUT = {
    "mode": ["--mode", "sometimes", "fixed", "budgetmix"],
    "task": ["--task", "chess", "gridnav", "icy", "sokoban", "guess"],
    "quant": ["--quant", "int8", "nf4", "none"],
    "budget_range": ["--budget_min", "9", "--budget_max", "3"],
    "budget_zero": ["--budget", ">= 1", "0"],
    "generations": ["--num_generations", ">= 2", "1"],
    "yaml_choice": ["--mode", "sometimes", "fixed", "budgetmix"],
    "yaml_missing": ["--config", "missing.yaml"],
    "unknown_flag": ["--no_such_flag"],
    "abbreviation": ["--learning_rat"],
    "model": ["--model", "./nope"],
    "backend": ["--backend", "jax", "minirl", "trl"],
    "backend_process": ["--reward_mode process", "--backend trl"],
    "resume_empty": ["--resume", "no checkpoint"],
    "resume_corrupt": ["checkpoint-1", "corrupt"],
    "existing": ["checkpoint-1", "--resume", "--overwrite_output_dir"],
}


@pytest.mark.parametrize("case", sorted(BAD_INPUT))
def test_bad_input_is_one_clear_line(runs: dict, case: str) -> None:
    result = runs["results"][case]
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    line = result.last_error_line
    assert line.startswith("train.py: error:"), result.stderr[-2000:]
    for word in BAD_INPUT[case]:
        assert word in line, (word, line)
    assert not (runs["tmp"] / "never").exists(), "a rejected run created its output_dir"


def test_failed_runs_leave_checkpoints_alone(runs: dict) -> None:
    # "existing" pointed at a real run without --resume: its checkpoint must be byte-identical,
    # and no newer checkpoint may appear.
    ckpts = sorted(p.name for p in runs["real"].glob("checkpoint-*"))
    assert ckpts == ["checkpoint-1"]
    after = {p.name: p.read_bytes() for p in (runs["real"] / "checkpoint-1").iterdir()}
    assert after == runs["before"]
    corrupt = runs["tmp"] / "corrupt"
    assert sorted(p.name for p in corrupt.glob("checkpoint-*")) == ["checkpoint-1"]
    assert (corrupt / "checkpoint-1" / "adapter_model.safetensors").read_bytes() == (
        b"not a safetensors file"
    )


def test_aliases_and_dashes() -> None:
    assert train.parse(["--steps", "7"]).grpo.max_steps == 7
    assert train.parse(["--max-steps", "5"]).grpo.max_steps == 5
    assert train.parse(["--budget-min", "2"]).budget.budget_min == 2
    assert train.parse(["--budget_min", "3"]).budget.budget_min == 3
    defaults = train.parse([])
    assert defaults.to_dict() == Config().to_dict()


def test_config_yaml_sets_values_and_flags_override(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    # 3e-4 without a dot is a *string* to PyYAML; argparse must still make it a float.
    path.write_text("mode: fixed\nbudget: 5\nbudget_min: 2\nbudget_max: 6\nlearning_rate: 3e-4\n")
    cfg = train.parse(["--config", str(path)])
    assert (cfg.budget.mode, cfg.budget.budget) == ("fixed", 5)
    assert (cfg.budget.budget_min, cfg.budget.budget_max) == (2, 6)
    assert cfg.grpo.learning_rate == pytest.approx(3e-4)
    assert isinstance(cfg.grpo.learning_rate, float)
    assert cfg.task.task == "gridnav" and cfg.grpo.max_steps == GRPOArgs().max_steps  # untouched

    over = train.parse(
        ["--budget_min", "3", "--config", str(path), "--mode", "budgetmix", "--steps", "9"]
    )
    assert (over.budget.mode, over.budget.budget_min) == ("budgetmix", 3)  # flags win
    assert (over.budget.budget, over.budget.budget_max) == (5, 6)  # YAML kept where not overridden
    assert over.grpo.max_steps == 9


def test_config_yaml_unknown_key_is_a_flag_error(tmp_path: Path, capsys) -> None:
    path = tmp_path / "typo.yaml"
    path.write_text("budget_mni: 2\n")
    with pytest.raises(SystemExit) as exc:
        train.parse(["--config", str(path)])
    assert exc.value.code == 2
    assert "budget_mni" in capsys.readouterr().err.splitlines()[-1]
