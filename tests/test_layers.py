"""The package's imports run one way: plumbing below the method, run directories above it.

minirl/__init__.py and the subpackages' docstrings promise a layering: minirl/infra imports
nothing of the method; the method's files and minirl/eval import nothing of what a run leaves
behind (minirl/rundir) or of the drivers above it; the drivers (trainer.py, trl_backend.py,
compare.py) sit over rundir, and the study and the tools over everything. This test reads every
import of minirl's source (module level and inside functions) with `ast` and checks each one
against that order, so a new import that runs back up fails here, not in a reader's head.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "minirl"

# Floors from the bottom; a module may import its own floor and any floor below it.
DRIVERS = {"minirl.trainer", "minirl.trl_backend", "minirl.compare"}
FLOORS = ["infra", "method", "rundir", "drivers", "top"]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def floor(module: str) -> str:
    """Which floor a minirl module stands on."""
    if module == "minirl":
        return "top"  # the package's face imports only infra.offline, checked below
    parts = module.split(".")
    if parts[1] == "infra":
        return "infra"
    if parts[1] == "rundir":
        return "rundir"
    if parts[1] in ("study", "tools"):
        return "top"
    if ".".join(parts[:2]) in DRIVERS:
        return "drivers"
    return "method"  # the method's files and minirl.eval


def module_level(tree: ast.Module) -> list[ast.stmt]:
    """The statements that run (or type-check) at import: the body and its if/try blocks."""
    out, todo = [], list(tree.body)
    while todo:
        node = todo.pop()
        out.append(node)
        if isinstance(node, (ast.If, ast.Try)):  # `if TYPE_CHECKING:` imports count too
            todo += node.body + node.orelse + getattr(node, "finalbody", [])
    return out


def imports(path: Path, top_level_only: bool = False) -> list[str]:
    """Every minirl module `path` imports, anywhere in its code (or only at module level)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in module_level(tree) if top_level_only else ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith("minirl")]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "minirl":  # `from minirl import x`: x is a module or the package
                found += [f"minirl.{a.name}" for a in node.names]
            elif node.module.startswith("minirl."):
                found.append(node.module)
    return found


def edges() -> list[tuple[str, str]]:
    return [
        (module_name(path), target)
        for path in sorted(PACKAGE.rglob("*.py"))
        for target in imports(path)
    ]


def test_the_reader_finds_the_imports_it_checks():
    found = edges()
    # The known arrows of each kind are seen, module level and inside a function alike.
    assert ("minirl.trainer", "minirl.rundir.checkpoint") in found
    assert ("minirl.compare", "minirl.rundir.sample_episodes") in found
    assert ("minirl.rundir.outputs", "minirl.eval.sampler") in found
    assert ("minirl.rundir.viewer", "minirl.eval.openloop") in found  # a function-level import
    assert ("minirl.study.run", "minirl.compare") in found  # also inside a function
    assert {floor(a) for a, _ in found} == set(FLOORS)


def test_no_import_runs_back_up():
    back = [
        f"{source} ({floor(source)}) imports {target} ({floor(target)})"
        for source, target in edges()
        if FLOORS.index(floor(target)) > FLOORS.index(floor(source))
    ]
    assert back == []


def test_the_package_face_only_switches_offline_mode_on():
    # infra, the lowest floor, importing the method is already a back-arrow above; the face is
    # on the top floor, so that test would let it import anything: it must load nothing but
    # infra.offline before bitsandbytes does.
    assert [t for s, t in edges() if s == "minirl"] == ["minirl.infra"]


def test_no_module_imports_itself_round_a_circle():
    """Within a floor too: no chain of module-level imports leads back to where it started.

    Imports inside a function are left out: they run late, which is how a module may use one
    that imports it. `if TYPE_CHECKING:` imports are in: a reader follows them all the same.
    """
    modules = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph = {
        name: {t for t in imports(path, top_level_only=True) if t in modules and t != name}
        for name, path in modules.items()
    }
    assert graph["minirl.rollout"]  # the reader sees top-level imports
    circles = []

    def visit(name: str, chain: list[str]) -> None:
        for target in sorted(graph[name]):
            if target in chain:
                circles.append(chain[chain.index(target) :] + [target])
            elif target not in seen:
                seen.add(target)
                visit(target, [*chain, target])

    seen: set[str] = set()
    for start in sorted(graph):
        if start not in seen:
            seen.add(start)
            visit(start, [start])
    assert circles == []
