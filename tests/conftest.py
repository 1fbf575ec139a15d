"""Shared fixtures: a quickly built tiny model for mechanics tests, and CPU-friendly settings."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable

import pytest
import torch

# A barely trained tiny base builds in seconds; tests of masks, log-probs and batching need real
# weights and a real tokenizer, not a good policy.
QUICK_STEPS = 4


@pytest.fixture(scope="session", autouse=True)
def _threads() -> None:
    torch.set_num_threads(min(2, os.cpu_count() or 1))


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
