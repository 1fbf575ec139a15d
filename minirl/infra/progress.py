"""Terminal progress for long work: one rich progress bar, with a free-text field for live metrics.

Every long loop (the tiny warm start, training, evaluation, the benchmark) opens
`progress_bar(disable=not progress)` and adds its tasks (`add_task`, or rich's own `track`), with a
`metrics` field where it has live numbers to show. Turned off (tests,
`progress=False`), the same object swallows every update, so the loops have no second code path.
When output is not a terminal (CI, a log file) rich draws no live bar, so the trainer also prints
a plain metrics line every `logging_steps`.

In a notebook (a Jupyter kernel, or a command a cell started: `!python train.py`) a live bar
cannot work: a notebook's output area understands a carriage return at best, not the cursor
movements with which rich redraws a bar of several lines, so every redraw would add lines to the
cell (ten a second). There the bar prints each task's row as plain text instead: every `every`
seconds while it runs and once when it finishes, and never redraws anything (`LineProgress`).
That reads the same in Jupyter, JupyterLab, VS Code and Colab, with or without ipywidgets (which
rich's own notebook display needs), and it stays in the saved notebook.

transformers draws tqdm bars of its own (loading, converting and writing weights); minirl's
bar is the one a user reads, so those are turned off where minirl calls into them
(`without_library_bars`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

# Jupyter's kernel launcher sets JPY_PARENT_PID in the kernel's environment, which `!` commands
# inherit; JPY_SESSION_NAME comes from jupyter_server and COLAB_RELEASE_TAG from Colab's runtime.
NOTEBOOK_ENV = ("JPY_PARENT_PID", "JPY_SESSION_NAME", "COLAB_RELEASE_TAG")


class MetricsColumn(ProgressColumn):
    """The task's `metrics` field, or nothing for a task that has none."""

    def render(self, task: Task) -> Text:
        return Text(str(task.fields.get("metrics", "")))


class LineProgress(Progress):
    """A `Progress` for a notebook's output: each task's row as a plain line, never redrawn.

    A row is printed when the task has run `every` seconds since its last one, and when it
    finishes. It never starts rich's live display, so nothing is redrawn or printed twice.
    """

    def __init__(self, *columns: ProgressColumn, every: float = 10.0, **kwargs) -> None:
        # No refresh thread: `track` then advances the task itself, item by item.
        super().__init__(*columns, auto_refresh=False, **kwargs)
        self.every = every
        self._last: dict[TaskID, float] = {}  # when each task's row was last printed
        self._done: set[TaskID] = set()

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def update(self, task_id: TaskID, **kwargs) -> None:
        super().update(task_id, **kwargs)
        self._print_if_due(task_id)

    def advance(self, task_id: TaskID, advance: float = 1) -> None:
        super().advance(task_id, advance)
        self._print_if_due(task_id)

    def _print_if_due(self, task_id: TaskID) -> None:
        if self.disable or task_id in self._done:
            return
        task = self._tasks[task_id]
        now = self.get_time()
        last = self._last.setdefault(task_id, now)
        if task.finished or now - last >= self.every:
            self._last[task_id] = now
            if task.finished:
                self._done.add(task_id)
            self.console.print(self.make_tasks_table([task]))


@contextmanager
def without_library_bars() -> Iterator[None]:
    """transformers' own tqdm bars off for the block ("Loading weights", "Writing model shards"),
    then as they were: a second bar beside minirl's, or in a background build's log, is noise.
    As they were, not simply on, so a block inside another keeps the outer one quiet."""
    # Imported here, not at the top: in a notebook kernel, importing transformers imports
    # tqdm.auto, which warns about ipywidgets, and this module is the one a kernel loads first.
    from transformers.utils import logging as hf_logging

    was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_on:
            hf_logging.enable_progress_bar()


def in_notebook() -> bool:
    """True in a Jupyter kernel (Colab's too) and in any process that a notebook cell started."""
    if any(os.environ.get(name) for name in NOTEBOOK_ENV):
        return True
    return Console().is_jupyter  # the kernel itself, started by something that set none of them


def progress_bar(disable: bool = False) -> Progress:
    """Counts, elapsed and remaining time, and the task's `metrics` field."""
    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        MetricsColumn(),
    )
    if in_notebook():
        # Plain text (no colour codes, no redraws) and wide enough that rich never wraps a row:
        # the notebook wraps long lines itself.
        plain = Console(
            force_terminal=False, force_jupyter=False, force_interactive=False, width=200
        )
        return LineProgress(*columns, console=plain, disable=disable)
    return Progress(*columns, transient=False, disable=disable)
