"""evaluate.py on the command line: every bad input and every broken checkpoint is one line.

Bad flags exit with status 2 before anything loads; a checkpoint that is corrupt, incomplete,
a pickle, or holds non-finite weights is refused before any model loads, naming the file (and,
in a run directory whose newest checkpoint is broken, the newest intact one); an --output that
cannot be written is refused before the evaluation starts, and a disk that fills up at the end is
one line too (status 1).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from minirl.rundir.checkpoint import checkpoints

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # evaluate.py is a script at the repo root, not part of the package
from test_train_cli import one_step_run  # noqa: E402

import evaluate  # noqa: E402

ADAPTER = "adapter_model.safetensors"


# Two real processes, where stray output from imports or libraries would show (the red-team
# run's two-line errors under HF_HUB_OFFLINE=1); every other bad value runs in-process below.
@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--t", "5-2"], "--t '5-2': range 5-2 is empty"),
        (["--study", "--no_such_flag", "1"], "unrecognized arguments: --no_such_flag 1"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(flags: list[str], message: str, tmp_path: Path) -> None:
    log = tmp_path / "network.log"
    proc = subprocess.run(
        [sys.executable, "tests/no_network.py", str(log), "evaluate.py", *flags],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and lines[0].startswith("evaluate.py: error")
    assert not log.exists(), log.read_text()  # no network


def run_main(argv: list[str], capsys) -> tuple[int, list[str]]:
    """evaluate.main in this process: (exit status, stderr lines)."""
    try:
        code = evaluate.main(argv)
    except SystemExit as exc:  # argparse's errors
        code = exc.code
    return code, capsys.readouterr().err.splitlines()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--checkpoints", "base,/no/such/dir"], "--checkpoints: '/no/such/dir' is not 'base'"),
        (["--k", "1,16", "--n", "8"], "--k '1,16': values must be <= 8"),
        (["--t", ","], "--t is empty"),
        (["--task", "chess"], "--task 'chess': valid tasks are"),
        (
            ["--no_such_flag", "1"],
            "unrecognized arguments: --no_such_flag 1 (see evaluate.py --help)",
        ),
        (["--temperature", "nan"], "--temperature must be a finite number, got nan"),
        (["--instances", "100001"], "--instances must be in [1, 100000], got 100001"),
        (["--t", "1-300000000"], "--t '1-300000000': values must be <= 100"),
        (["--t", "101"], "--t '101': values must be <= 100"),
        (["--seed", "-1"], "--seed must be in [0, 4294967295], got -1"),
        (["--model", "tinyx"], "--model 'tinyx': no such model directory"),
        (["--study", "--seeds", "0,99999999999"], "--seeds '0,99999999999': give distinct"),
        (["--study", "--t", "2,400"], "--t '2,400': values must be <= 100"),
        (["--study", "--generous", "0"], "--generous must be in [1, 100], got 0"),
    ],
)
def test_bad_values_are_refused_before_anything_loads(flags, message, capsys) -> None:
    code, lines = run_main(flags, capsys)
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"evaluate.py: error: {message}"), lines


@pytest.fixture(scope="module")
def run_dir(quick_tiny_path: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real 1-step run: OUTPUT/checkpoint-1 written by the trainer."""
    out = tmp_path_factory.mktemp("eval_cli") / "run"
    one_step_run(quick_tiny_path, out)
    return out


def broken_copy(run_dir: Path, tmp_path: Path, newest_too: bool = False) -> Path:
    """A copy of the run; with `newest_too`, checkpoint-1 is also copied to a newer checkpoint-2."""
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    if newest_too:
        shutil.copytree(copy / "checkpoint-1", copy / "checkpoint-2")
    return copy


def nan_weights(path: Path) -> None:
    weights = load_file(path / ADAPTER)
    first = sorted(weights)[0]
    weights[first] = torch.full_like(weights[first], float("nan"))
    save_file(weights, str(path / ADAPTER))


def set_base(copy: Path, base: object) -> None:
    """Make checkpoint-1 record another base (or a garbled one) than the run was trained on."""
    meta = copy / "checkpoint-1" / "trainer_state.json"
    data = json.loads(meta.read_text())
    data["summary"]["base_model"] = base
    meta.write_text(json.dumps(data))


# case -> (how to break a run directory, what to pass, words of the one line)
BROKEN = {
    "truncated_safetensors": (
        lambda c: (c / "checkpoint-1" / ADAPTER).write_bytes(
            (c / "checkpoint-1" / ADAPTER).read_bytes()[:100]
        ),
        "run",
        ["checkpoint-1/adapter_model.safetensors is corrupt"],
    ),
    "garbage_trainer_state": (
        lambda c: (c / "checkpoint-1" / "trainer_state.json").write_text("{not json"),
        "run",
        ["checkpoint-1/trainer_state.json is corrupt", "no checkpoint of this run is intact"],
    ),
    "garbage_trainer_state_newest": (
        lambda c: (c / "checkpoint-2" / "trainer_state.json").write_text("{not json"),
        "run+newer",
        ["checkpoint-2/trainer_state.json is corrupt", "checkpoint-1 is intact"],
    ),
    "trainer_state_not_a_mapping": (
        lambda c: (c / "checkpoint-1" / "trainer_state.json").write_text("[1, 2]"),
        "run",
        ["checkpoint-1/trainer_state.json is corrupt"],
    ),
    "missing_adapter_config": (
        lambda c: (c / "checkpoint-2" / "adapter_config.json").unlink(),
        "run+newer",
        ["checkpoint-2 is incomplete: it has no adapter_config.json", "checkpoint-1 is intact"],
    ),
    "empty_newest_checkpoint": (
        lambda c: [p.unlink() for p in (c / "checkpoint-2").iterdir()],
        "run+newer",
        ["checkpoint-2 is incomplete", "checkpoint-1 is intact: evaluate it by that path"],
    ),
    "nan_weights_newest": (
        lambda c: nan_weights(c / "checkpoint-2"),
        "run+newer",
        ["checkpoint-2 holds unusable weights", "NaN or inf", "checkpoint-1 is intact"],
    ),
    "nan_weights_adapter": (
        lambda c: nan_weights(c / "checkpoint-1"),
        "checkpoint-1",
        ["checkpoint-1 holds unusable weights", "NaN or inf"],
    ),
    "bin_only_adapter": (
        lambda c: (c / "checkpoint-1" / ADAPTER).rename(c / "checkpoint-1" / "adapter_model.bin"),
        "checkpoint-1",
        ["holds adapter_model.bin, a pickle", "save_pretrained it again"],
    ),
}


@pytest.mark.parametrize(
    ("base", "said"),
    [
        (
            "tiny-sticky (tiny-000000000000)",
            "was trained on 'tiny-sticky (tiny-000000000000)', but --model",
        ),
        (["tiny"], "checkpoint-1/trainer_state.json is corrupt (its base_model is not a string)"),
    ],
)
def test_a_checkpoint_on_another_base_is_one_line_before_any_model_loads(
    base: object, said: str, run_dir: Path, tmp_path: Path, capsys
) -> None:
    """A checkpoint records the base it was trained on: an adapter evaluated on another one (the
    same --model flag, after a tiny recipe changed) would silently measure nonsense."""
    copy = broken_copy(run_dir, tmp_path)
    model = json.loads((copy / "checkpoint-1" / "trainer_state.json").read_text())["config"]
    set_base(copy, base)
    out = tmp_path / "eval"
    argv = [
        "--model",
        model["model"]["model"],
        "--checkpoints",
        f"base,{copy}",
        "--output",
        str(out),
    ]
    code, lines = run_main(argv, capsys)
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith("evaluate.py: error: ") and said in lines[0], lines
    assert not out.exists()


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_broken_checkpoint_is_one_line_before_any_model_loads(
    case: str, run_dir: Path, tmp_path: Path, capsys
) -> None:
    breaks, target, words = BROKEN[case]
    copy = broken_copy(run_dir, tmp_path, newest_too=target == "run+newer")
    breaks(copy)
    path = copy / "checkpoint-1" if target == "checkpoint-1" else copy
    out = tmp_path / "eval"
    code, lines = run_main(["--checkpoints", f"base,{path}", "--output", str(out)], capsys)
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith("evaluate.py: error: "), lines
    for word in words:
        assert word in lines[0], (word, lines[0])
    assert not out.exists()


def test_only_checkpoint_dirs_count_so_a_stray_backup_is_ignored(run_dir: Path, tmp_path) -> None:
    copy = broken_copy(run_dir, tmp_path)
    shutil.copytree(copy / "checkpoint-1", copy / "checkpoint-6.bak")  # int('6.bak') used to crash
    (copy / "checkpoint-7.tmp").mkdir()  # a write that was killed
    (copy / "checkpoint-notes").write_text("a file")
    assert [p.name for p in checkpoints(copy)] == ["checkpoint-1"]
    from minirl.compare import resolve_checkpoint

    model = json.loads((copy / "checkpoint-1" / "trainer_state.json").read_text())["config"]
    found = resolve_checkpoint(str(copy), "gridnav", model["model"]["model"])
    assert found == copy / "checkpoint-1"


@pytest.mark.parametrize(
    ("output", "words"),
    [
        ("a_file", ["--output", "a_file", "is a file, not a directory; choose another --output"]),
        ("/sys/minirl-eval", ["--output /sys/minirl-eval cannot be written", "Permission denied"]),
    ],
)
def test_an_unwritable_output_is_refused_before_the_evaluation(
    output: str, words: list[str], tmp_path: Path, capsys
) -> None:
    (tmp_path / "a_file").write_text("x")
    target = output if output.startswith("/") else str(tmp_path / output)
    code, lines = run_main(["--checkpoints", "base", "--output", target], capsys)
    assert code == 2 and len(lines) == 1, lines
    for word in words:
        assert word in lines[0], (word, lines[0])


def test_a_full_disk_at_the_end_is_one_line(quick_tiny_path: str, tmp_path: Path, capsys) -> None:
    out = tmp_path / "eval"
    out.mkdir()
    (out / "results.json.tmp").symlink_to("/dev/full")  # results.json is written through it
    args = ["--checkpoints", "base", "--model", quick_tiny_path, "--k", "1", "--t", "1"]
    args += ["--n", "1", "--instances", "2", "--decision_states", "2", "--bootstrap", "0"]
    code, lines = run_main([*args, "--output", str(out)], capsys)
    assert (code, lines) == (
        1,
        [
            "evaluate.py: error: No space left on device: free some space; "
            f"{out} holds no complete results"
        ],
    )
