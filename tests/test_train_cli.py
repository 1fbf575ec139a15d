"""The train.py CLI: --help documents every flag, --config YAML works, bad input fails well.

"Fails well" (DESIGN.md section 11) means: stderr is exactly one line, "train.py: error: ...",
naming the flag or the file and what to do; exit status 2 for bad input, 1 for a run that could
not finish (diverged, disk full), 130 for Ctrl-C; no Python traceback; nothing trained or
overwritten; and no attempt to reach the network. The cases that need a real process (loading
a model, a checkpoint, a full disk, a signal) run as subprocesses with the network cut off
(tests/no_network.py), all launched at once so their imports overlap on the CPU cores instead of
adding up; the bad values that fail before anything loads run in-process.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from minirl.config import BudgetArgs, Config, GRPOArgs, ModelArgs, TaskArgs
from minirl.rundir.checkpoint import checkpoints

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # train.py is a script at the repo root, not part of the package
import train  # noqa: E402

SECTIONS = (ModelArgs, GRPOArgs, BudgetArgs, TaskArgs)


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str
    network: str  # what the run tried to reach (tests/no_network.py); "" if nothing

    @property
    def error_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.strip()]


def cli_env(**extra: str) -> dict[str, str]:
    # Passed explicitly: the session's MINIRL_CACHE (fixtures set and undo it in-process) reaches
    # the child, so a `tiny` base is never built in a surprising place. One thread each: the
    # children run side by side, and spinning thread pools would fight over the cores.
    return {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", **extra}


def start(args: list[str], log: Path, **env: str) -> subprocess.Popen:
    """`python train.py ARGS` with the network cut off; attempts are recorded in `log`."""
    return subprocess.Popen(
        [sys.executable, "tests/no_network.py", str(log), "train.py", *args],
        cwd=ROOT,
        env=cli_env(**env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # A shell that runs the suite in the background (`pytest &`) starts it with SIGINT
        # ignored, and children inherit that: Ctrl-C would then never reach train.py. A user's
        # terminal delivers it, so the child gets the default disposition back.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def finish(proc: subprocess.Popen, log: Path, timeout: float = 600) -> Run:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:  # e.g. a bad flag that was accepted and started training
        proc.kill()
        out, err = proc.communicate()
    return Run(proc.returncode, out, err, log.read_text() if log.exists() else "")


def run_many(
    commands: dict[str, list[str]], logs: Path, envs: dict[str, dict[str, str]] | None = None
) -> dict[str, Run]:
    """Run `python train.py ARGS` for every entry concurrently; imports dominate each run."""
    logs.mkdir(parents=True, exist_ok=True)
    envs = envs or {}
    procs = {
        name: start(args, logs / f"{name}.log", **envs.get(name, {}))
        for name, args in commands.items()
    }
    return {name: finish(proc, logs / f"{name}.log") for name, proc in procs.items()}


SMALL = [
    *("--num_generations", "2", "--eval_seeds", "0", "--mode", "fixed", "--budget", "2"),
    *("--tasks_per_step", "1", "--max_new_tokens", "1"),
]  # the flags of one_step_run, so a resume of its run changes only what a test changes


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
    (tmp / "a_file").write_text("not a directory")
    (tmp / "not_a_model").mkdir()
    (tmp / "not_a_model" / "notes.txt").write_text("no config.json here")
    disk_full = tmp / "disk_full"
    disk_full.mkdir()
    (disk_full / "metrics.jsonl").symlink_to("/dev/full")  # every write: ENOSPC
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
        "model_typo": ["--model", "tinyx", "--output_dir", fresh],
        "model_not_a_model": ["--model", str(tmp / "not_a_model"), "--output_dir", fresh],
        "model_adapter": ["--model", str(real / "checkpoint-1"), "--output_dir", fresh],
        "model_offline_hub": ["--model", "Org/not-downloaded", "--output_dir", fresh],
        "backend": ["--backend", "jax", "--output_dir", fresh],
        "backend_process": ["--backend", "trl", "--reward_mode", "process", "--output_dir", fresh],
        "output_is_a_file": [*model, "--output_dir", str(tmp / "a_file")],
        "output_not_writable": [*model, "--output_dir", "/sys/minirl-run"],
        "resume_empty": [*model, "--output_dir", str(tmp / "empty"), "--resume"],
        # Same flags as the run that made it, so only the corrupt file can be the problem.
        "resume_corrupt": [*model, *SMALL, "--max_steps", "2", "--output_dir", str(corrupt)],
        "resume_lora_r": [*model, *SMALL, "--lora_r", "8", "--output_dir", str(real), "--resume"],
        "existing": [*model, "--output_dir", str(real), "--steps", "2"],
        "diverged": [
            *model,
            *("--num_generations", "4", "--tasks_per_step", "2", "--max_new_tokens", "1"),
            *("--invalid_penalty", "1", "--eval_seeds", "0", "--save_steps", "1"),
            *("--learning_rate", "1e30", "--max_steps", "4", "--output_dir", str(tmp / "div")),
        ],
        "disk_full": [*model, *SMALL, "--output_dir", str(disk_full)],
    }
    commands["resume_corrupt"].append("--resume")
    # An offline classroom: the hub id is not cached, and nothing may be asked of the network.
    envs = {"model_offline_hub": {"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp / "hf_home")}}
    before = {p.name: p.read_bytes() for p in (real / "checkpoint-1").iterdir()}
    results = run_many({k: commands[k] for k in SUBPROCESS}, tmp / "network", envs)
    return {
        "tmp": tmp,
        "real": real,
        "before": before,
        "results": results,
        "commands": commands,
        "model": quick_tiny_path,
    }


# The cases run as real processes: a signal-free smoke of each kind of failure (argparse, a value,
# a hub id offline, a corrupt checkpoint, a diverged run, a full disk), where stray output from
# imports or libraries would show. The others run in this process (imports dominate a
# subprocess, and the machine is small); their network use is watched in-process too.
SUBPROCESS = {"help", "mode", "unknown_flag", "model_offline_hub"}
SUBPROCESS |= {"resume_corrupt", "diverged", "disk_full"}


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


# name -> (exit status, words the one-line error must contain: the flag or file, what to do)
BAD_INPUT = {
    "mode": (2, ["--mode", "sometimes", "fixed", "budgetmix"]),
    "task": (2, ["--task", "chess", "gridnav", "icy", "sokoban", "guess"]),
    "quant": (2, ["--quant", "int8", "nf4", "none"]),
    "budget_range": (2, ["--budget_min", "9", "--budget_max", "3"]),
    "budget_zero": (2, ["--budget", "in [1, 100]", "0"]),
    "generations": (2, ["--num_generations", ">= 2", "1"]),
    "yaml_choice": (2, ["--mode", "sometimes", "fixed", "budgetmix"]),
    "yaml_missing": (2, ["--config", "missing.yaml"]),
    "unknown_flag": (2, ["unrecognized arguments: --no_such_flag 0.1", "--help"]),
    "abbreviation": (2, ["--learning_rat"]),
    "model": (2, ["--model", "./nope", "no such model directory", "'tiny'"]),
    "model_typo": (2, ["--model 'tinyx': no such model directory", "hub id"]),
    "model_not_a_model": (2, ["not_a_model", "without config.json, not a model"]),
    "model_adapter": (2, ["checkpoint-1", "LoRA adapter", "evaluate.py --checkpoints"]),
    "model_offline_hub": (2, ["Org/not-downloaded", "HF_HUB_OFFLINE is set", "download it once"]),
    "backend": (2, ["--backend", "jax", "minirl", "trl"]),
    "backend_process": (2, ["--reward_mode process", "--backend trl"]),
    "output_is_a_file": (2, ["a_file is a file, not a directory; choose another --output_dir"]),
    "output_not_writable": (2, ["--output_dir", "/sys/minirl-run", "cannot be written"]),
    "resume_empty": (2, ["--resume", "no checkpoint"]),
    "resume_corrupt": (2, ["checkpoint-1", "corrupt", "no older checkpoint is intact"]),
    "resume_lora_r": (2, ["--resume", "--lora_r (16, now 8)", "original flags"]),
    "existing": (2, ["checkpoint-1", "--resume", "--overwrite_output_dir"]),
    "diverged": (1, ["policy diverged at step", "not saved", "--learning_rate", "1e+30"]),
    "disk_full": (1, ["No space left on device", "free some space", "nothing to resume"]),
}


def in_process(argv: list[str], capsys, monkeypatch: pytest.MonkeyPatch) -> Run:
    """train.main in this process, with the network cut off as tests/no_network.py does."""
    tried: list[str] = []

    def refuse(*args, **kwargs):
        tried.append(repr(args[:2]))
        raise OSError("network cut off")

    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    code, lines = run_main(argv, capsys)
    return Run(code, "", "\n".join(lines), "".join(tried))


@pytest.mark.parametrize("case", sorted(BAD_INPUT))
def test_bad_input_is_one_clear_line(runs: dict, case: str, capsys, monkeypatch) -> None:
    if case in SUBPROCESS:
        result = runs["results"][case]
    else:
        result = in_process(runs["commands"][case], capsys, monkeypatch)
    code, words = BAD_INPUT[case]
    assert result.returncode == code, (result.returncode, result.stderr[-2000:])
    assert len(result.error_lines) == 1, result.stderr[-2000:]
    line = result.error_lines[0]
    assert line.startswith("train.py: error:"), line
    for word in words:
        assert word in line, (word, line)
    assert not (runs["tmp"] / "never").exists(), "a rejected run created its output_dir"
    assert result.network == "", f"{case} reached for the network: {result.network}"


def test_a_diverged_run_saves_nothing_of_the_divergence(runs: dict) -> None:
    line = runs["results"]["diverged"].error_lines[0]
    step = int(line.split("policy diverged at step ")[1].split(":")[0])
    # --save_steps 1: every step before the divergence was saved, the diverged one was not.
    saved = sorted(int(p.name.split("-")[1]) for p in (runs["tmp"] / "div").glob("checkpoint-*"))
    assert saved == list(range(max(1, step - 2), step)), (step, saved)


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


def run_main(argv: list[str], capsys) -> tuple[int, list[str]]:
    """train.main in this process: (exit status, stderr lines)."""
    try:
        code = train.main(argv)
    except SystemExit as exc:  # argparse's errors
        code = exc.code
    return code, capsys.readouterr().err.splitlines()


# Values a red-team run found accepted (silently wrong runs) or ending in a traceback; each is now
# refused before anything loads: flags -> the one line.
REFUSED_FLAGS = {
    "--max_grad_norm -1": "--max_grad_norm must be > 0, got -1.0",
    "--max_grad_norm 0": "--max_grad_norm must be > 0, got 0.0",
    "--lora_alpha 0": "--lora_alpha must be >= 1, got 0 (0 would scale the adapters to nothing)",
    "--lora_dropout -0.5": "--lora_dropout must be in [0, 1), got -0.5",
    "--lora_dropout 1.5": "--lora_dropout must be in [0, 1), got 1.5",
    "--epsilon_high -1": "--epsilon_high must be >= 0, got -1.0",
    "--invalid_penalty nan": "--invalid_penalty must be a finite number, got nan",
    "--invalid_penalty inf": "--invalid_penalty must be a finite number, got inf",
    "--mistake_penalty -1": "--mistake_penalty must be >= 0, got -1.0",
    "--mistake_penalty nan": "--mistake_penalty must be a finite number, got nan",
    "--step_advantage_w -1": "--step_advantage_w must be >= 0, got -1.0",
    "--gamma 0": "--gamma must be in (0, 1], got 0.0",
    "--learning_rate nan": "--learning_rate must be a finite number, got nan",
    "--lora_r 0": "--lora_r must be >= 1, got 0",
    "--seed 99999999999999999999999": "--seed must be in [0, 4294967295], got "
    "99999999999999999999999 (seeds are 32-bit)",
    "--eval_seeds 100001": "--eval_seeds must be in [0, 100000], got 100001 (the held-out pool, "
    "tasks.EVAL_SEEDS, has 100000 instances)",
    "--budget_max 101": "--budget_max must be in [1, 100], got 101 (the tiny model reads turn "
    "counts up to 100)",
    "--lora_r 2.5": "argument --lora_r/--lora-r: invalid int value: '2.5'",
    "--resume --overwrite_output_dir": "--resume and --overwrite_output_dir conflict",
}
REFUSED_YAML = {
    "max_steps: [1, 2]": "--max_steps [1, 2]: expected an integer",
    "max_steps: 2.7": "--max_steps 2.7: expected an integer",
    "lora_r: 2.5": "--lora_r 2.5: expected an integer",
    "temperature: null": "--temperature null: expected a number",
    "output_dir: 5": "--output_dir 5: expected a string",
    "eval_seeds: 2.5": "--eval_seeds 2.5: expected an integer",
    "max_new_tokens: true": "--max_new_tokens true: expected an integer",
    "learning_rate: .nan": "--learning_rate must be a finite number, got nan",
    "- a list": "Config file",
}


@pytest.mark.parametrize("flags", sorted(REFUSED_FLAGS))
def test_bad_flags_are_refused_before_anything_loads(flags: str, tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    code, lines = run_main([*flags.split(), "--output_dir", str(out)], capsys)
    assert (code, lines) == (2, [f"train.py: error: {REFUSED_FLAGS[flags]}"])
    assert not out.exists()


@pytest.mark.parametrize("text", sorted(REFUSED_YAML))
def test_bad_yaml_values_are_refused_like_flags(text: str, tmp_path: Path, capsys) -> None:
    path = tmp_path / "run.yaml"
    # The output_dir goes in the YAML too: a flag would override the value under test.
    mapping = ":" in text and "output_dir" not in text
    path.write_text(text + (f"\noutput_dir: {tmp_path / 'run'}\n" if mapping else "\n"))
    code, lines = run_main(["--config", str(path)], capsys)
    assert code == 2 and len(lines) == 1 and lines[0].startswith("train.py: error: "), lines
    assert REFUSED_YAML[text] in lines[0]
    assert not (tmp_path / "run").exists()


def test_ctrl_c_is_one_line_naming_the_checkpoint_to_resume(
    quick_tiny_path: str, tmp_path: Path
) -> None:
    out, log = tmp_path / "run", tmp_path / "network.log"
    # Enough steps that the run cannot end before the signal on a fast machine; any complete
    # checkpoint will do, since pruning may already have removed checkpoint-1 when we look.
    args = ["--model", quick_tiny_path, *SMALL, "--save_steps", "1", "--max_steps", "100000"]
    proc = start([*args, "--output_dir", str(out)], log)
    deadline = time.monotonic() + 600
    while not checkpoints(out) and proc.poll() is None:
        assert time.monotonic() < deadline, "no checkpoint within 10 minutes"
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    result = finish(proc, log)
    assert result.returncode == 130, result.stderr[-2000:]
    assert len(result.error_lines) == 1, result.stderr[-2000:]
    # A save cut short leaves checkpoint-<N>.tmp behind; the message names the newest complete one.
    newest = checkpoints(out)[-1]
    assert result.error_lines[0] == (
        f"train.py: error: interrupted (Ctrl-C); the same command with --resume continues "
        f"from {newest}"
    )
    assert result.network == ""


def test_one_writer_per_run_directory(quick_tiny_path: str, tmp_path: Path) -> None:
    """A `--resume` or an evaluate.py started on a directory a live run writes is refused in one
    line; killed with SIGKILL, the run leaves no lock that blocks the next writer."""
    from minirl.rundir.checkpoint import LOCK, sole_writer

    out, logs = tmp_path / "run", tmp_path / "logs"
    logs.mkdir()
    args = ["--model", quick_tiny_path, *SMALL, "--save_steps", "1", "--max_steps", "100000"]
    first = start([*args, "--output_dir", str(out)], logs / "first.log")
    deadline = time.monotonic() + 600
    while first.poll() is None and not (
        (out / LOCK).exists() and (out / LOCK).read_text() == str(first.pid)
    ):
        assert time.monotonic() < deadline, "the run took no lock within 10 minutes"
        time.sleep(0.1)
    evaluate_cmd = ["evaluate.py", "--model", quick_tiny_path, "--output", str(out)]
    others = {
        "resume": start([*args, "--output_dir", str(out), "--resume"], logs / "resume.log"),
        "evaluate": subprocess.Popen(
            [sys.executable, *evaluate_cmd, "--instances", "2", "--n", "1", "--k", "1"],
            cwd=ROOT,
            env=cli_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        ),
    }
    results = {name: finish(proc, logs / f"{name}.log") for name, proc in others.items()}
    try:
        assert first.poll() is None, "the first run ended before the others were refused"
        for name, result in results.items():
            assert result.returncode == 2, (name, result.stderr[-2000:])
            assert len(result.error_lines) == 1, (name, result.stderr[-2000:])
            line = result.error_lines[0]
            assert f"{out} is being written by another process (pid {first.pid})" in line, line
            flag = "--output" if name == "evaluate" else "--output_dir"
            assert line.endswith(f"or choose another {flag}"), line
        while not checkpoints(out):  # a step or more, to see that none was written twice
            assert first.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
    finally:
        first.kill()  # SIGKILL: no handler runs, only the operating system cleans up
        first.communicate()
    lines = (out / "metrics.jsonl").read_text().splitlines()
    steps = [json.loads(line)["step"] for line in lines if line.endswith("}")]
    assert steps == list(range(1, len(steps) + 1)), steps  # one writer: no step twice
    assert (out / LOCK).exists()  # the file stays, and means nothing once its holder is gone
    with sole_writer(out, "--output_dir"):
        assert (out / LOCK).read_text() == str(os.getpid())


def test_resume_refuses_planted_sample_episodes(runs: dict, capsys) -> None:
    """A resumed run keeps, and shows, its episodes.json: one that does not replay is refused."""
    import tasks

    env = tasks.make("gridnav")
    env.reset(tasks.EVAL_SEEDS[0])
    record = {"seed": tasks.EVAL_SEEDS[0], "budget": 4, "optimal_length": env.optimal_length}
    planted = {
        "seed a script": {**record, "seed": "1<script>alert(1)</script>", "success": True},
        "success forged": {**record, "success": True},  # no turn played: it cannot be solved
    }
    for case, bad in planted.items():
        out = runs["tmp"] / f"planted-{case.replace(' ', '-')}"
        shutil.copytree(runs["real"], out)
        samples = {"task": "gridnav", "episodes": {"base": [{**bad, "turns": []}]}}
        (out / "episodes.json").write_text(json.dumps(samples))
        code, lines = run_main(
            [
                "--model",
                runs["model"],
                *SMALL,
                "--max_steps",
                "2",
                "--output_dir",
                str(out),
                "--resume",
            ],
            capsys,
        )
        assert code == 2 and len(lines) == 1, (case, lines)
        assert lines[0].startswith(f"train.py: error: --resume: {out / 'episodes.json'}"), lines
        assert "delete that file" in lines[0]
        assert checkpoints(out)[-1].name == "checkpoint-1"  # nothing was trained
