"""The errors a user can cause, each printed by the command-line tools as one line.

Everything that goes wrong because of what the user asked for (a bad flag, a model that cannot be
loaded, a checkpoint that is missing or corrupt) raises one of these. `train.py`, `evaluate.py`
and the benchmark catch `MinirlError` (minirl.infra.cli.run_cli), print its message on one line and
exit with its `exit_code`: 2 for bad input, 1 for a run that started well and could not finish (the
policy diverged, the disk filled up); Ctrl-C exits with 130. Any other exception is a bug in
minirl and keeps its traceback.

They live in a module of their own so that every other module can raise them without importing
the module that happens to detect the problem (models.py and smollm2.py used to import each other
for `ModelLoadError`).
"""

from __future__ import annotations


class MinirlError(ValueError):
    """Base class: a problem with the user's input, reported as one line."""

    exit_code = 2


class ConfigError(MinirlError):
    """A bad configuration value; the message names the flag."""


class ModelLoadError(MinirlError):
    """A --model value that names nothing loadable."""


class CheckpointError(MinirlError):
    """A missing, corrupt or mismatched checkpoint."""


class DataError(MinirlError):
    """A file read back (episodes.json, summary.json, study.json) that is not what it should be."""


class RunError(MinirlError):
    """A run that could not finish: the policy diverged, or an output could not be written."""

    exit_code = 1
