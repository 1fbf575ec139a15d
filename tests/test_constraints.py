"""constraints.txt: the pins every install uses sit inside pyproject.toml's ranges.

README.md and .ci/run install with `pip install -e ".[dev]" -c constraints.txt`, so a fresh
install is the one CI tested. This checks the pins against the ranges (every requirement of the
project and its dev extras is pinned, inside its range; torch as pyproject pins it, with no local
label, so a GPU machine gets its CUDA build), and reports, as a skip, whether the environment the
tests run in is the pinned one (CI's is; a developer's may have drifted).
"""

from __future__ import annotations

import shlex
import tomllib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]


def pins() -> dict[str, str]:
    found = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, pinned = line.partition("==")
            assert pinned, f"not an exact pin: {line!r}"
            found[canonicalize_name(name)] = pinned
    return found


def requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    listed = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        listed += [r for r in extra if not r.startswith("minirl[")]
    return [Requirement(r) for r in listed]


def test_every_requirement_is_pinned_inside_its_range() -> None:
    pinned = pins()
    for req in requirements():
        name = canonicalize_name(req.name)
        assert name in pinned, f"{req.name} is not pinned: run bash .ci/lock"
        assert req.specifier.contains(pinned[name], prereleases=True), (str(req), pinned[name])
    assert pinned["torch"] == "2.13.0"  # no +cpu: the pin must also match the CUDA build
    assert not any("+" in v for v in pinned.values())
    assert "minirl" not in pinned


def test_this_environment_is_the_pinned_one() -> None:
    drift = []
    for name, pinned in sorted(pins().items()):
        try:
            have = version(name).split("+")[0]
        except PackageNotFoundError:
            # A pin of a package this install does not need (constraints.txt freezes the whole
            # tested environment) only limits what is installed.
            continue
        if have != pinned:
            drift.append(f"{name} {have} (pinned {pinned})")
    if drift:
        pytest.skip(
            "this environment differs from constraints.txt: "
            + ", ".join(drift)
            + '; pip install -e ".[dev]" -c constraints.txt brings it to the pins'
        )


def test_ci_installs_exactly_as_the_readme_says() -> None:
    readme = (ROOT / "README.md").read_text().split("```bash\n", 1)[1].split("```", 1)[0]
    documented = [
        shlex.split(line, comments=True) for line in readme.splitlines() if line.startswith("pip ")
    ]
    ci = [
        shlex.split(line.split("||")[0], comments=True)
        for line in (ROOT / ".ci" / "run").read_text().splitlines()
        if line.startswith("pip install")
    ]
    assert documented == ci
    assert ["pip", "install", "-e", ".[dev]", "-c", "constraints.txt"] in ci
