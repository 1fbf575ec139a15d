"""One training step's peak memory does not grow with the episodes per step.

Each step runs in a fresh process (`python -m minirl.tools.step_memory`, as the benchmark's memory
part does), since a process's peak RSS never goes down. The barely trained tiny base plays every
turn of its budget, so the episodes are long (T = 12) and the step's activations are a visible
share of the process's memory: one padded pass over 64 such episodes holds hundreds of MiB.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

STEP = ["--mode", "fixed", "--budget", "12", "--max_new_tokens", "4", "--num_generations", "4"]
# The rollout plays 8 episodes side by side whatever the step's total: its KV cache grows with
# the episodes played together (--generation_batch_size bounds it), the update's activations with
# the micro-batch (--per_device_train_batch_size).
STEP += ["--generation_batch_size", "8"]


def peak_mb(model: str, episodes: int, micro_batch: int) -> float:
    argv = [
        *STEP,
        "--model",
        model,
        "--tasks_per_step",
        str(episodes // 4),
        "--per_device_train_batch_size",
        str(micro_batch),
    ]
    done = subprocess.run(
        [sys.executable, "-m", "minirl.tools.step_memory", *argv],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    row = json.loads(done.stdout.strip().splitlines()[-1])
    assert row["episodes"] == episodes and row["peak_mb"] > row["loaded_mb"] > 100
    return row["peak_mb"]


@pytest.mark.slow
def test_step_memory_does_not_grow_with_episodes_per_step(quick_tiny_path: str) -> None:
    few = peak_mb(quick_tiny_path, 8, 2)
    many = peak_mb(quick_tiny_path, 64, 2)
    # The control: the same 64 episodes as one micro-batch keep every activation until the one
    # backward, as minirl's step did before gradient accumulation. The measure sees that growth.
    one_pass = peak_mb(quick_tiny_path, 64, 64)
    assert many <= 1.25 * few, (few, many)
    assert one_pass - few > 4 * max(many - few, 1.0), (few, many, one_pass)
    assert one_pass > 1.5 * few, (few, one_pass)


def test_bad_flags_are_one_line_errors() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "minirl.tools.step_memory", "--num_generations", "1"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].startswith("minirl.tools.step_memory: error:")


@pytest.mark.parametrize("flag", ["--learning_rat", "--num_gen", "--lora"])
def test_abbreviated_flags_are_refused_as_train_py_refuses_them(flag: str, capsys) -> None:
    """argparse would read a prefix as the flag it begins (`--learning_rat` as --learning_rate)."""
    from minirl.tools import step_memory

    with pytest.raises(SystemExit) as exc:
        step_memory.main([flag, "2"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"minirl.tools.step_memory: error: unrecognized arguments: {flag}")
