"""Every assignment grader passes the reference implementation and fails the student stub."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GRADERS = sorted((ROOT / "tutorials" / "assignments").glob("test_a*.py"))


def grade(grader: Path, reference: bool) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "MINIRL_REFERENCE"}
    if reference:
        env["MINIRL_REFERENCE"] = "1"
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(grader.relative_to(ROOT)),
            "-q",
            "-p",
            "no:cacheprovider",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_there_are_at_least_three_assignments() -> None:
    assert len(GRADERS) >= 3
    for grader in GRADERS:
        student = list(grader.parent.glob(grader.stem.replace("test_", "") + "_*.py"))
        assert len(student) == 1, f"{grader.name} needs exactly one student file"


@pytest.mark.parametrize("grader", GRADERS, ids=lambda p: p.stem)
def test_grader_passes_the_reference(grader: Path) -> None:
    proc = grade(grader, reference=True)
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert " passed" in proc.stdout and "failed" not in proc.stdout


@pytest.mark.parametrize("grader", GRADERS, ids=lambda p: p.stem)
def test_grader_fails_the_stub(grader: Path) -> None:
    proc = grade(grader, reference=False)
    assert proc.returncode == 1, proc.stdout[-2000:]
    assert "NotImplementedError" in proc.stdout and " passed" not in proc.stdout
