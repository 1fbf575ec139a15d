"""Terminal progress for long work: one rich progress bar, with a free-text field for live metrics.

Every long loop (the tiny warm start, training, evaluation, the benchmark) opens
`progress_bar(disable=not progress)` and adds its tasks (`add_task`, or rich's own `track`), with a
`metrics` field where it has live numbers to show. Turned off (tests,
`progress=False`), the same object swallows every update, so the loops have no second code path.
When output is not a terminal (CI, a log file) rich draws no live bar, so the trainer also prints
a plain metrics line every `logging_steps`.
"""

from __future__ import annotations

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text


class MetricsColumn(ProgressColumn):
    """The task's `metrics` field, or nothing for a task that has none."""

    def render(self, task: Task) -> Text:
        return Text(str(task.fields.get("metrics", "")))


def progress_bar(disable: bool = False) -> Progress:
    """Counts, elapsed and remaining time, and the task's `metrics` field."""
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        MetricsColumn(),
        transient=False,
        disable=disable,
    )
