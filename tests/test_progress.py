"""Progress in a terminal and in a notebook: a live bar in one, plain lines in the other.

A notebook's output area cannot move the cursor, so rich's live bar, redrawn ten times a second
with cursor movements, would pile up copies of itself there. minirl.infra.progress prints plain rows
instead wherever a notebook is involved: in the kernel itself, and in a command a cell starts
(`!python train.py`, which IPython runs under a pseudo-terminal, so rich would otherwise think it
drives a terminal). These tests run both, the second exactly as IPython does, and a real
`!python train.py` cell in a real kernel.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_notebook
from notebook_kernel import kernel, output_text
from rich.console import Console

from minirl.infra import progress
from minirl.infra.progress import LineProgress, progress_bar

ROOT = Path(__file__).resolve().parents[1]
CURSOR = ("\x1b[2K", "\x1b[1A", "\x1b[?25l")  # erase line, cursor up, hide cursor: a live bar


def not_in_a_notebook(monkeypatch) -> None:
    for name in progress.NOTEBOOK_ENV:
        monkeypatch.delenv(name, raising=False)


def test_line_progress_prints_a_row_every_interval_and_at_the_end() -> None:
    out = io.StringIO()
    clock = [0.0]
    bar = LineProgress(
        *progress_bar().columns,
        console=Console(file=out, force_terminal=False, width=200),
        get_time=lambda: clock[0],
        every=10.0,
    )
    with bar:
        job = bar.add_task("train", total=5, metrics="")
        for now in (0.0, 5.0, 11.0, 12.0, 13.0):  # 5 steps; 11 s is past the 10 s interval
            clock[0] = now
            bar.update(job, advance=1, metrics=f"R {now:.1f}")
        bar.update(job, metrics="after the end")  # a finished task prints no more
        assert sum(1 for _ in bar.track(range(4), description="track")) == 4  # rich's own loop
    rows = out.getvalue().splitlines()
    assert len(rows) == 3, rows
    assert rows[0].startswith("train") and "3/5" in rows[0] and "R 11.0" in rows[0]
    assert "5/5" in rows[1] and "R 13.0" in rows[1]
    assert rows[2].startswith("track") and "4/4" in rows[2]
    assert not any(code in out.getvalue() for code in ("\x1b", "\r"))


def test_progress_bar_is_line_mode_in_a_notebook_only(monkeypatch) -> None:
    not_in_a_notebook(monkeypatch)
    assert not isinstance(progress_bar(), LineProgress)
    for name in progress.NOTEBOOK_ENV:
        monkeypatch.setenv(name, "1")
        assert isinstance(progress_bar(), LineProgress), name
        monkeypatch.delenv(name)


CHILD = """
from minirl.infra.progress import progress_bar

with progress_bar() as bar:
    job = bar.add_task("work", total=3, metrics="")
    for i in range(3):
        bar.update(job, advance=1, metrics=f"step {i}")
        bar.console.print(f"line {i}")
"""


def under_a_pty(env: dict[str, str]) -> str:
    """What CHILD writes when it runs under a pseudo-terminal, as IPython runs a `!` line."""
    import pty

    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD], stdout=follower, stderr=follower, env=env, cwd=ROOT
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    assert proc.wait(timeout=60) == 0
    os.close(leader)
    return b"".join(chunks).decode()


def test_a_command_a_notebook_cell_starts_prints_plain_lines() -> None:
    env = {k: v for k, v in os.environ.items() if k not in progress.NOTEBOOK_ENV}
    terminal = under_a_pty(env)
    assert any(code in terminal for code in CURSOR)  # the live bar: what a notebook cannot show
    notebook = under_a_pty({**env, "JPY_PARENT_PID": str(os.getpid())})
    assert not any(code in notebook for code in CURSOR), repr(notebook)
    lines = notebook.replace("\r\n", "\n").splitlines()
    assert [x for x in lines if x.startswith("line")] == ["line 0", "line 1", "line 2"]
    (row,) = [x for x in lines if x.startswith("work")]
    assert "3/3" in row and "step 2" in row


def test_train_py_in_a_notebook_cell(tmp_path: Path) -> None:
    """`!python train.py` in a kernel: the metrics lines, the finished bar and the table, once."""
    run = tmp_path / "run"
    flags = "--steps 2 --eval_seeds 2 --tasks_per_step 2 --num_generations 2 --logging_steps 1"
    cells = [
        # The kernel itself: rich would draw a widget (or, without ipywidgets, nothing).
        new_code_cell(
            "import os\n"
            "from minirl.infra.progress import progress_bar\n\n"
            "launcher = os.environ.pop('JPY_PARENT_PID')  # rich's own test: get_ipython()\n"
            "with progress_bar() as bar:\n"
            "    job = bar.add_task('in the kernel', total=2, metrics='')\n"
            "    for i in range(2):\n"
            "        bar.update(job, advance=1, metrics=f'step {i}')\n"
            "os.environ['JPY_PARENT_PID'] = launcher"
        ),
        new_code_cell(f"!{sys.executable} train.py {flags} --output_dir {run}"),
    ]
    nb = new_notebook(cells=cells)
    with kernel(nb, ROOT) as client:
        for index, cell in enumerate(nb.cells):
            client.execute_cell(cell, index)
    inside = nb.cells[0]
    assert [o.output_type for o in inside.outputs] == ["stream"]  # text, no widget
    assert "in the kernel" in output_text(inside) and "2/2" in output_text(inside)
    shown = output_text(nb.cells[1])
    assert not any(code in shown for code in CURSOR), repr(shown[-2000:])
    assert "step 1/2" in shown and "step 2/2" in shown
    assert len([x for x in shown.splitlines() if x.startswith("train ") and "2/2" in x]) == 1
    assert "held-out success" in shown
    assert (run / "metrics.jsonl").read_text().count("\n") == 2
    nbformat.validate(nb)


def test_library_bars_come_back_as_they_were() -> None:
    """Quiet inside quiet stays quiet until the outer block ends; then the bars are on again."""
    from transformers.utils import logging as hf_logging

    from minirl.infra.progress import without_library_bars

    assert hf_logging.is_progress_bar_enabled()
    with without_library_bars():
        with without_library_bars():
            assert not hf_logging.is_progress_bar_enabled()
        assert not hf_logging.is_progress_bar_enabled()
    assert hf_logging.is_progress_bar_enabled()
