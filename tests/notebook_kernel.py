"""Running the course's notebooks in tests: a scratch copy of the repository and a Jupyter kernel.

A notebook runs in a real kernel (ipykernel, driven by nbclient, as Jupyter runs it), whose
working directory is a scratch stand-in for the repository root, so what a lesson writes
(`runs/...`) lands there and not in the checkout.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from nbclient import NotebookClient
from nbformat import NotebookNode

ROOT = Path(__file__).resolve().parents[1]
# Outputs and caches; `study/` too: the README's toy-size study must not reuse (or write into)
# the runs of a real study in the checkout.
SKIP = {"runs", "outputs", "study", "site", ".pytest_cache", ".ruff_cache", "__pycache__"}


def scratch_root(tmp: Path, copied: tuple[str, ...] = ()) -> Path:
    """A stand-in for the repository root: symlinks to everything but run outputs and caches.

    Each path in `copied` (e.g. "tutorials/assignments") is a real copy instead, for notebooks that
    write into it; the folders above it are real folders of symlinks.
    """

    def fill(source: Path, target: Path) -> None:
        inner = {c.split("/", 1)[0]: c.split("/", 1)[1:] for c in copied_here(source)}
        for entry in source.iterdir():
            if entry.name in SKIP or entry.name.endswith(".egg-info"):
                continue
            if entry.name not in inner:
                (target / entry.name).symlink_to(entry)
            elif inner[entry.name]:  # a folder above a copied path
                (target / entry.name).mkdir()
                fill(entry, target / entry.name)
            else:
                ignore = shutil.ignore_patterns("__pycache__", ".ipynb_checkpoints")
                shutil.copytree(entry, target / entry.name, ignore=ignore)

    def copied_here(source: Path) -> list[str]:
        prefix = source.relative_to(ROOT).as_posix()
        if prefix == ".":
            return list(copied)
        return [c.removeprefix(prefix + "/") for c in copied if c.startswith(prefix + "/")]

    fill(ROOT, tmp)
    return tmp


@contextmanager
def kernel(nb: NotebookNode, cwd: Path) -> Iterator[NotebookClient]:
    """A started kernel for `nb` that works in `cwd`; `client.execute_cell(cell, i)` runs a cell."""
    client = NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}
    )
    with client.setup_kernel():
        yield client


def output_text(cell: NotebookNode) -> str:
    """Everything an executed cell printed or returned, as text."""
    parts = []
    for out in cell.get("outputs", []):
        if out.output_type == "stream":
            parts.append(out.text)
        elif "data" in out:
            parts.append(out.data.get("text/plain", ""))
        elif out.output_type == "error":
            parts.append("\n".join(out.traceback))
    return "".join(parts)
