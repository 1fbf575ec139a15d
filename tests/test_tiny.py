"""The embedded tiny base: deterministic, cached by recipe, loads like a hub model, and learns."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from minirl.tiny import TinyRecipe, build_model, build_tokenizer, ensure_tiny, noisy_expert_loss

SMALL = TinyRecipe(max_steps=3, batch_size=4, warmup_steps=1)


def build_in(cache: Path, recipe: TinyRecipe):
    old = os.environ.get("MINIRL_CACHE")
    os.environ["MINIRL_CACHE"] = str(cache)
    try:
        return ensure_tiny(recipe, progress=False)
    finally:
        if old is None:
            del os.environ["MINIRL_CACHE"]
        else:
            os.environ["MINIRL_CACHE"] = old


def test_build_is_deterministic_and_cached(tmp_path: Path) -> None:
    first = build_in(tmp_path / "a", SMALL)
    second = build_in(tmp_path / "b", SMALL)
    assert first.built and second.built
    assert first.path.name == second.path.name == f"tiny-{SMALL.key()}"
    w1, w2 = (
        load_file(first.path / "model.safetensors"),
        load_file(second.path / "model.safetensors"),
    )
    assert w1.keys() == w2.keys()
    assert all((w1[k] == w2[k]).all() for k in w1)
    assert first.losses == second.losses
    assert (first.path / "tokenizer.json").read_text() == (
        second.path / "tokenizer.json"
    ).read_text()
    again = build_in(tmp_path / "a", SMALL)
    assert not again.built and again.path == first.path
    assert not list((tmp_path / "a").glob("*.tmp*")), "no half-written build left behind"


def test_building_a_base_leaves_the_callers_random_stream_alone(tmp_path: Path) -> None:
    """A run that builds its base must sample what a run that finds it cached samples."""
    import torch

    torch.manual_seed(123)
    expected = torch.rand(4)
    torch.manual_seed(123)
    assert build_in(tmp_path / "c", SMALL).built
    assert torch.equal(torch.rand(4), expected)


def test_recipe_key_tracks_every_field() -> None:
    assert TinyRecipe().key() == TinyRecipe().key()
    assert TinyRecipe(seed=1).key() != TinyRecipe().key()
    assert TinyRecipe(epsilon=0.3).key() != TinyRecipe().key()
    assert TinyRecipe.for_task("guess").key() != TinyRecipe.for_task("gridnav").key()


def test_loads_like_a_hub_checkpoint(quick_tiny_path: str) -> None:
    tok = AutoTokenizer.from_pretrained(quick_tiny_path)
    model = AutoModelForCausalLM.from_pretrained(quick_tiny_path)
    assert type(model).__name__ == "LlamaForCausalLM"
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    # The word-level pipeline survives the reload (a qwen2 config would swap in a BPE tokenizer).
    ids = tok("pos 1 2 goal up 1 blocked none", add_special_tokens=False)["input_ids"]
    assert tok.convert_ids_to_tokens(ids) == "pos 1 2 goal up 1 blocked none".split()
    text = tok.apply_chat_template(
        [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert (
        text
        == "<|im_start|>system\ns<|im_end|>\n<|im_start|>user\nu<|im_end|>\n<|im_start|>assistant\n"
    )


def test_default_size_is_about_a_million_parameters() -> None:
    tok = build_tokenizer(["pos goal up down left right"] + [str(i) for i in range(100)])
    n = sum(p.numel() for p in build_model(TinyRecipe(), tok).parameters())
    assert 0.8e6 < n < 5e6


@pytest.mark.slow
def test_default_warm_start_learns_the_noisy_expert() -> None:
    """The default gridnav base leaves the uniform plateau and gets near the imitation optimum."""
    recipe = TinyRecipe.for_task("gridnav")
    report = ensure_tiny(recipe, progress=False)
    losses = json.loads((report.path / "recipe.json").read_text())["losses"]
    final = sum(losses[-20:]) / 20
    optimum = noisy_expert_loss(recipe)
    plateau = math.log(4) / 2  # uniform over 4 actions; eos free
    # Measured: final 0.579 against an optimum of 0.565 and a plateau of 0.693.
    assert final < optimum + 0.05
    assert final < plateau - 0.07


def test_task_recipes_leave_the_other_bases_alone() -> None:
    """Per-task recipes (minirl.tiny.TASK_RECIPES) change only their own task's base."""
    from minirl.tiny import TASK_RECIPES

    for task in ("gridnav", "icy", "guess", "hilo"):
        assert task not in TASK_RECIPES
        assert TinyRecipe.for_task(task) == TinyRecipe(tasks=((task, 1.0),))
    for task, fields in TASK_RECIPES.items():
        recipe = TinyRecipe.for_task(task)
        assert all(getattr(recipe, k) == v for k, v in fields.items())
