"""What train.py, evaluate.py and the benchmark share on the command line: one error path.

- `ArgParser` is transformers' `HfArgumentParser` (every flag a dataclass field) with two changes:
  an error is one line naming the flag (argparse prints its usage block first), and `--help`
  shows each field's range, taken from the same `Range` the check uses (minirl.infra.validation).
- `run_cli` runs a tool's work and turns every expected failure into one line on stderr and an
  exit status:
    a `MinirlError`: bad input (2), or a run that started well and could not finish (1);
    a disk that is full, read-only or not ours to write (1);
    Ctrl-C (130), saying what is kept (for train.py: the checkpoint `--resume` continues from).
  Anything else is a bug in minirl and keeps its traceback. Warnings print as one line each.
"""

from __future__ import annotations

import errno
import sys
import warnings
from collections.abc import Callable
from typing import NoReturn

from transformers import HfArgumentParser

from minirl.infra.errors import MinirlError
from minirl.infra.validation import range_help

# OSErrors that are the machine's state, not a bug: the user can act on them.
WRITE_ERRORS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM}


class ArgParser(HfArgumentParser):
    """HfArgumentParser with one-line errors and each field's range in --help."""

    def __init__(self, dataclass_types, **kwargs) -> None:  # noqa: ANN001
        super().__init__(dataclass_types, **kwargs)
        extra = range_help(self.dataclass_types)
        for action in self._actions:
            if action.dest in extra:
                action.help = f"{action.help or ''} {extra[action.dest]}".strip()

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {one_line(message)}\n")

    def parse_args_into_dataclasses(
        self,
        args=None,
        return_remaining_strings: bool = False,
        **kwargs,
    ) -> tuple:
        *parsed, unknown = super().parse_args_into_dataclasses(
            args=args, return_remaining_strings=True, **kwargs
        )
        if return_remaining_strings:
            return (*parsed, unknown)
        if unknown:  # HfArgumentParser would raise a ValueError naming itself
            self.error(f"unrecognized arguments: {' '.join(unknown)} (see {self.prog} --help)")
        return tuple(parsed)


def one_line(message: str) -> str:
    return " ".join(message.split())


def fail(prog: str, message: str, code: int) -> int:
    print(f"{prog}: error: {one_line(message)}", file=sys.stderr)
    return code


def run_cli(prog: str, work: Callable[[], int], kept: Callable[[], str]) -> int:
    """Run `work`; every expected failure becomes one stderr line and an exit status.

    `kept()` says, after a failure mid-run, what survives and how to continue (for train.py the
    checkpoint `--resume` continues from); it is asked only when needed.
    """
    formatwarning = warnings.formatwarning
    warnings.formatwarning = lambda message, *args, **kwargs: f"{prog}: warning: {message}\n"
    try:
        return work()
    except MinirlError as err:
        return fail(prog, str(err), err.exit_code)
    except OSError as err:
        if err.errno not in WRITE_ERRORS:
            raise
        where = f" ({err.filename})" if err.filename else ""
        advice = (
            "free some space"
            if err.errno in (errno.ENOSPC, errno.EDQUOT)
            else "write somewhere else"
        )
        return fail(prog, f"{err.strerror}{where}: {advice}; {kept()}", 1)
    except KeyboardInterrupt:
        return fail(prog, f"interrupted (Ctrl-C); {kept()}", 130)
    finally:
        warnings.formatwarning = formatwarning
