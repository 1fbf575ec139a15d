"""Terminal progress for long work: a rich progress bar that can also show live metrics.

Training and evaluation loops wrap their iterables in `track`, and the trainer updates the bar's
metric line every step. When output is not a terminal (CI, a log file) rich draws no live bar, so
the trainer also prints a plain metrics line every `logging_steps`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TypeVar

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

T = TypeVar("T")


def make_progress() -> Progress:
    """A progress bar with counts, elapsed and remaining time, and a free-text metrics field."""
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        TextColumn("{task.fields[metrics]}"),
        transient=False,
    )


def track(items: Iterable[T], description: str, enabled: bool = True) -> Iterator[T]:
    """Iterate over `items` with a progress bar (no bar when `enabled` is False)."""
    if not enabled:
        yield from items
        return
    items = list(items)
    with make_progress() as progress:
        task = progress.add_task(description, total=len(items), metrics="")
        for item in items:
            yield item
            progress.advance(task)
