"""Pick what the graders test, and grade from a notebook.

`implementation` is what every grader calls: your file, or (MINIRL_REFERENCE=1) the reference
implementation. `grade` is what an assignment's notebook calls: the same grader, run the way a
terminal runs it (`python -m pytest tutorials/assignments/test_a1.py`).
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).absolute().parent


def implementation(module: str, name: str) -> Callable:
    """`name` from your `module` (e.g. a1_advantages), or from reference.py when asked for."""
    source = "reference" if os.environ.get("MINIRL_REFERENCE") == "1" else module
    return getattr(importlib.import_module(source), name)


def grade(grader: str) -> bool:
    """Run one grader (e.g. "test_a1.py") with pytest, print its report; True if every test passed.

    It runs in a fresh interpreter, as from a terminal, so a solution saved again after a fix is
    imported anew (a notebook's kernel would keep the first one it imported).
    """
    root = HERE.parents[1]
    path = (HERE / grader).relative_to(root)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", str(path), "-q", "-p", "no:cacheprovider"],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    )
    print(proc.stdout + proc.stderr)
    return proc.returncode == 0
