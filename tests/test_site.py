"""The docs site builds with `mkdocs build --strict`: no broken link, no missing page.

The site's config is tutorials/site/mkdocs.yml and its pages are the files of tutorials/. Strict
mode turns every warning into a failure: a link or an anchor that resolves nowhere, a page on
disk that the nav leaves out or a nav entry with no page, a docstring cross-reference that
resolves nowhere, an include (the README's commands on the home page) that is missing. The build
goes into a temporary folder, and the test then reads what it wrote.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "tutorials" / "site" / "mkdocs.yml"


def nav_pages(nav: list) -> list[str]:
    pages = []
    for entry in nav:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        pages += nav_pages(value) if isinstance(value, list) else [value]
    return pages


def test_site_builds_strictly(tmp_path: Path) -> None:
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # material's banner about its successor
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(CONFIG), "-d", str(site)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "WARNING" not in proc.stderr, proc.stderr[-4000:]

    # Every page of the nav was built: the lessons, the assignments, the study report, the
    # measured page, the API pages. The nav lists every lesson of tutorials/ (strict mode fails
    # on a page left out), so a new lesson cannot be forgotten.
    nav = nav_pages(yaml.load(CONFIG.read_text(), Loader=yaml.BaseLoader)["nav"])
    lessons = sorted(p.name for p in (ROOT / "tutorials").glob("0*.md"))
    assert sorted(p for p in nav if re.fullmatch(r"0\d_.*\.md", p)) == lessons
    for page in nav:
        # mkdocs' directory URLs: a/b.md is a/b/index.html; index.md and README.md are their
        # folder's index.html
        folder = re.sub(r"(^|/)(index|README)$", "", page.removesuffix(".md"))
        assert (site / folder / "index.html").is_file(), page

    # The notebooks sit beside their lessons, for download; the pictures of a run are there.
    for lesson in lessons:
        assert (site / lesson.replace(".md", ".ipynb")).is_file()
    home = (site / "index.html").read_text()
    assert 'src="images/curves.png"' in home and 'src="images/viewer.png"' in home
    # The README's commands, included from the README itself.
    assert "python train.py --mode budgetmix" in home and "--8&lt;--" not in home

    # The API pages are the docstrings: a function of minirl.grpo with its docstring's words.
    grpo = (site / "api" / "grpo" / "index.html").read_text()
    assert "group_advantages" in grpo and "Group-normalised trajectory advantages" in grpo
    # The measured page carries the README's tables, numbers unchanged.
    measured = (site / "measured" / "index.html").read_text()
    assert "3 min 15 s" in measured and "0.83 s per step (median of 10)" in measured
