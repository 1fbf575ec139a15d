"""Shared fixtures: a quickly built tiny model for mechanics tests, and CPU-friendly settings."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from collections.abc import Callable

import pytest

# Under pytest-xdist (the README's `-n 2`) the cores are shared by the workers: each gets its share
# of torch threads, and so do the scripts and notebook kernels it starts (OMP_NUM_THREADS is read
# when torch is imported, hence before the import). Small models gain little from a second thread:
# the whole suite in one process kept 1.44 of this machine's 2 cores busy.
WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
THREADS = max(1, min(2, os.cpu_count() or 1) // WORKERS)
if WORKERS > 1:
    os.environ["OMP_NUM_THREADS"] = str(THREADS)

import torch  # noqa: E402

# A barely trained tiny base builds in seconds; tests of masks, log-probs and batching need real
# weights and a real tokenizer, not a good policy.
QUICK_STEPS = 4


# The tests that take a minute or more (the lessons' notebooks, the documents, the `slow` ones).
LONG = ("test_lesson_notebook_runs", "test_document_runs")
# Which of them need which of the full-size bases below (SUITE_BASES), which the background
# builder finishes in its order: the long tests that need none go first, while it builds gridnav.
NEEDS_NO_BASE = (
    "09_real_chat_model",  # smollm2 only
    "test_study_verdicts.py",  # simulated policies
    "test_study_run.py",  # its own quick base
    "test_tools_step_memory.py",  # the quick base
    "test_checkpoint.py",  # the quick base
)
NEEDS_LATER_BASE = {
    "07_reading_the_study": ("gridnav", "sticky"),
    "test_house_base": ("house", "uniform"),
}


def hand_out_rank(item: pytest.Item) -> int:
    """Where a test goes in the hand-out: 0 long and needing no full-size base, then the long
    ones in the order the builder finishes the base they need (gridnav's, or whatever else,
    first), the rest last."""
    if not (item.get_closest_marker("slow") or item.originalname in LONG):
        return 1 + len(SUITE_BASES)
    if any(name in item.nodeid for name in NEEDS_NO_BASE):
        return 0
    needs = next((base for name, base in NEEDS_LATER_BASE.items() if name in item.nodeid), None)
    return 1 + (SUITE_BASES.index(needs) if needs else 0)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """On several workers, the long tests first: xdist hands out tests two at a time as workers
    free up (pyproject.toml's --maxschedchunk), so the long ones are shared between the workers
    and the suite does not end waiting on one of them. Among them, those that need no full-size
    base go first, so that no worker sits waiting for the first build (measured at b97445b: both
    workers waited about two minutes for gridnav's, with one core idle)."""
    if WORKERS > 1:
        items.sort(key=hand_out_rank)


# The full-size bases the suite loads (the tests of base quality, the lessons, the README's run):
# a minute or two each to build into an empty $MINIRL_CACHE, as CI's is. gridnav's first: most
# tests that need a full-size base need that one.
SUITE_BASES = (("gridnav", "uniform"), ("gridnav", "sticky"), ("house", "uniform"))
BUILDER = pytest.StashKey[subprocess.Popen]()
BUILD = (
    "from minirl.tiny import TinyRecipe, ensure_tiny\n"
    f"for task, how in {SUITE_BASES!r}:\n"
    "    ensure_tiny(TinyRecipe.for_task(task, how), progress=False)\n"
)


def pytest_configure(config: pytest.Config) -> None:
    """When the whole suite runs, start building its full-size bases as it starts, one after
    another in a background process of one thread: they are built while other tests run, and a
    test that needs one before it is done waits on its build lock (minirl.infra.model_cache)
    instead of building it again. Bases already in the cache are found in a second. Not in
    xdist's workers (the controller starts the builder once) and not for a chosen file or test,
    which may need none of them."""
    whole = config.args_source is pytest.Config.ArgsSource.TESTPATHS
    if hasattr(config, "workerinput") or not whole or config.option.collectonly:
        return
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    config.stash[BUILDER] = subprocess.Popen([sys.executable, "-c", BUILD], env=env)


def pytest_unconfigure(config: pytest.Config) -> None:
    builder = config.stash.get(BUILDER, None)
    if builder is None:
        return
    if builder.poll() is None:  # the run stopped early: its builds are not needed
        builder.terminate()
    builder.wait()


@pytest.fixture(scope="session", autouse=True)
def _threads() -> None:
    torch.set_num_threads(THREADS)


@pytest.fixture(scope="session")
def quick_base(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], str]:
    """quick_base(task): the path of a quick tiny base for `task`, built once per session.

    The task's own recipe (TinyRecipe.for_task: its epsilon, its demonstrations, its words) cut to
    QUICK_STEPS warm-start steps, in a cache of its own, so it never stands in for the real base.
    """
    from minirl.tiny import TinyRecipe, ensure_tiny

    cache = tmp_path_factory.mktemp("cache")
    built: dict[str, str] = {}

    def build(task: str) -> str:
        if task not in built:
            recipe = dataclasses.replace(TinyRecipe.for_task(task), max_steps=QUICK_STEPS)
            with pytest.MonkeyPatch.context() as env:  # the session's own cache is restored after
                env.setenv("MINIRL_CACHE", str(cache))
                built[task] = str(ensure_tiny(recipe, progress=False).path)
        return built[task]

    return build


@pytest.fixture(scope="session")
def quick_tiny_path(quick_base: Callable[[str], str]) -> str:
    return quick_base("gridnav")


@pytest.fixture(scope="session")
def quick_policy(quick_tiny_path: str):
    """(peft model, tokenizer) on the quick tiny base, 4-bit NF4 + LoRA, as training uses it."""
    from minirl.models import load_policy

    return load_policy(quick_tiny_path, quant="nf4")


@pytest.fixture(scope="session")
def quick_policy_fp32(quick_tiny_path: str):
    from minirl.models import load_policy

    return load_policy(quick_tiny_path, quant="none")


@pytest.fixture(scope="session")
def gridnav_policy():
    """(peft model, tokenizer) on the default gridnav base, warm-started: it wins some episodes.

    Built once into $MINIRL_CACHE (as `python train.py` builds it), so the suite shares it.
    """
    from minirl.models import load_policy

    return load_policy("tiny", quant="nf4", task="gridnav")
