"""The notebooks' generator on lessons it has not seen: what a lesson edit may bring.

tests/test_docs.py checks the committed notebooks against the real lessons; these tests give the
generator a made-up course in a temporary folder.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from minirl.tools import notebooks

ROOT = Path(__file__).resolve().parents[1]


def course(tmp: Path, lesson: str) -> Path:
    (tmp / "tutorials" / "assignments").mkdir(parents=True)
    shutil.copy(ROOT / "pyproject.toml", tmp / "pyproject.toml")
    (tmp / "tutorials" / "01_x.md").write_text(lesson)
    return tmp


def test_a_lesson_that_opens_with_code_and_shell_lines_that_ipython_would_expand(
    tmp_path: Path,
) -> None:
    root = course(
        tmp_path,
        "```python\nx = 1\n```\n\nProse with {braces} and $dollars.\n\n"
        "```bash\n# a comment\npython train.py --output_dir 'runs/{a}'  # $HOME\n```\n",
    )
    nb = json.loads(notebooks.lesson_notebook(root / "tutorials" / "01_x.md", root))
    kinds = [(c["cell_type"], "".join(c["source"])) for c in nb["cells"]]
    assert kinds[0][0] == "markdown" and kinds[0][1].startswith("# 01_x\n")  # the file's name
    assert kinds[1] == ("code", notebooks.setup_cell(notebooks.repo_url(root)))
    assert kinds[2] == ("code", "x = 1")
    assert kinds[3] == ("markdown", "Prose with {braces} and $dollars.")  # prose is not escaped
    assert kinds[4][1].splitlines() == [
        "# a comment",
        "!python train.py --output_dir 'runs/{{a}}'  # $$HOME",
    ]
    assert notebooks.shell_commands(kinds[4][1]) == [
        "python train.py --output_dir 'runs/{a}'  # $HOME"
    ]
    assert nb["metadata"]["accelerator"] == "GPU"  # it trains: Colab opens it on a GPU
    assert [c["id"] for c in nb["cells"]] == [f"cell-{i}" for i in range(5)]


def test_same_lesson_same_bytes_and_the_repository_url_from_pyproject(tmp_path: Path) -> None:
    root = course(tmp_path, "# Lesson\n\nNo code, no GPU.\n")
    url = notebooks.repo_url(root)
    assert url == "https://github.com/OWNER/minirl"  # the placeholder, defined once
    first = notebooks.expected(root)
    assert first == notebooks.expected(root)
    (text,) = first.values()
    nb = json.loads(text)
    assert "accelerator" not in nb["metadata"]
    header = "".join(nb["cells"][0]["source"])
    link = "https://colab.research.google.com/github/OWNER/minirl/blob/main/tutorials/01_x.ipynb"
    assert header.startswith("# Lesson\n") and link in header
    compile(notebooks.setup_cell(url), "setup", "exec")  # valid Python, as written in the cell
