"""evaluate.py on the command line: bad input is one line and exit status 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--checkpoints", "base,/no/such/dir"], "is not 'base' or an existing directory"),
        (["--k", "1,16", "--n", "8"], "--k 16 exceeds --n 8"),
        (["--t", ","], "--t is empty"),
        (["--task", "chess"], "--task 'chess': valid tasks are"),
        (["--t", "5-2"], "range 5-2 is empty"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(flags: list[str], message: str) -> None:
    proc = subprocess.run(
        [sys.executable, "evaluate.py", *flags],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and lines[0].startswith("evaluate.py: error")
