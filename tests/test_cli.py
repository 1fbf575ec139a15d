"""minirl.infra.cli: one-line argparse errors, and run_cli's one error path (status codes,
Ctrl-C)."""

from __future__ import annotations

import errno
import sys
import warnings
from dataclasses import dataclass
from typing import Annotated

import pytest

from minirl.infra.cli import ArgParser, run_cli
from minirl.infra.errors import CheckpointError, ConfigError, RunError
from minirl.infra.validation import Range


@dataclass
class Toy:
    count: Annotated[int, Range(ge=1)] = 3
    name: str = "x"


def test_argparse_errors_are_one_line(capsys) -> None:
    parser = ArgParser(Toy, prog="toy")
    for argv, words in [
        (["--count", "2.5"], "argument --count: invalid int value: '2.5'"),
        (["--nope", "1"], "unrecognized arguments: --nope 1 (see toy --help)"),
        (["--count"], "argument --count: expected one argument"),
    ]:
        with pytest.raises(SystemExit) as exc:
            parser.parse_args_into_dataclasses(argv)
        assert exc.value.code == 2
        lines = capsys.readouterr().err.splitlines()
        assert len(lines) == 1 and lines[0].startswith("toy: error: ") and words in lines[0]
    assert "Range: >= 1." in parser.format_help()


def run(work, kept=lambda: "what is kept", capsys=None) -> tuple[int, list[str]]:
    code = run_cli("tool", work, kept)
    return code, capsys.readouterr().err.splitlines()


def raises(err: BaseException):
    def work() -> int:
        raise err

    return work


@pytest.mark.parametrize(
    ("err", "code", "line"),
    [
        (ConfigError("--x must be >= 1"), 2, "tool: error: --x must be >= 1"),
        (CheckpointError("c is\ncorrupt"), 2, "tool: error: c is corrupt"),
        (RunError("policy diverged at step 3"), 1, "tool: error: policy diverged at step 3"),
        (
            OSError(errno.ENOSPC, "No space left on device", "out/metrics.jsonl"),
            1,
            "tool: error: No space left on device (out/metrics.jsonl): free some space; "
            "what is kept",
        ),
        (
            OSError(errno.EROFS, "Read-only file system", "out"),
            1,
            "tool: error: Read-only file system (out): write somewhere else; what is kept",
        ),
        (KeyboardInterrupt(), 130, "tool: error: interrupted (Ctrl-C); what is kept"),
    ],
)
def test_expected_failures_are_one_line_with_their_status(err, code, line, capsys) -> None:
    assert run(raises(err), capsys=capsys) == (code, [line])


def test_bugs_keep_their_traceback(capsys) -> None:
    with pytest.raises(ZeroDivisionError):
        run_cli("tool", raises(ZeroDivisionError()), lambda: "")
    with pytest.raises(FileNotFoundError):  # not the machine's state: a bug
        run_cli("tool", raises(FileNotFoundError(errno.ENOENT, "gone", "f")), lambda: "")


def test_warnings_are_one_line_while_the_tool_runs(capsys) -> None:
    def work() -> int:
        warnings.warn("checkpoint-6 is corrupt; resuming from checkpoint-4", stacklevel=1)
        return 0

    before = warnings.formatwarning
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        # pytest records warnings instead of printing them; print them as Python does.
        warnings.showwarning = lambda *args, **kwargs: sys.stderr.write(
            warnings.formatwarning(*args[:4])
        )
        assert run(work, capsys=capsys) == (
            0,
            ["tool: warning: checkpoint-6 is corrupt; resuming from checkpoint-4"],
        )
    assert warnings.formatwarning is before  # restored for whoever called run_cli


def test_kept_is_asked_only_on_failure() -> None:
    asked = []
    assert run_cli("tool", lambda: 0, lambda: asked.append(1) or "") == 0
    assert not asked
