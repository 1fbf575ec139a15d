"""The embedded tiny base: deterministic, cached by recipe, loads like a hub model, and learns."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from pathlib import Path

import pytest
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from minirl.tiny import TinyRecipe, build_model, build_tokenizer, ensure_tiny, noisy_expert_loss

SMALL = TinyRecipe(max_steps=3, batch_size=4, warmup_steps=1)


def build_in(cache: Path, recipe: TinyRecipe):
    with pytest.MonkeyPatch.context() as env:  # the session's own cache is restored after
        env.setenv("MINIRL_CACHE", str(cache))
        return ensure_tiny(recipe, progress=False)


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


def test_two_processes_that_need_the_same_base_build_it_once(tmp_path: Path) -> None:
    """Started together (two runs, the suite's two workers), one builds and the other waits on
    the build lock and loads the result: exactly one of them reports a build."""
    import os
    import subprocess
    import sys

    code = (
        "from minirl.tiny import TinyRecipe, ensure_tiny\n"
        "r = ensure_tiny(TinyRecipe(max_steps=3, batch_size=4, warmup_steps=1), progress=False)\n"
        "print(r.built, r.path)"
    )
    env = {**os.environ, "MINIRL_CACHE": str(tmp_path), "OMP_NUM_THREADS": "1"}
    both = [
        subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    said = sorted(p.communicate(timeout=300)[0].split() for p in both)
    assert [p.returncode for p in both] == [0, 0]
    assert [built for built, _ in said] == ["False", "True"]
    assert said[0][1] == said[1][1] == str(tmp_path / f"tiny-{SMALL.key()}")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        f"tiny-{SMALL.key()}",
        f"tiny-{SMALL.key()}.lock",
    ]


def test_building_a_base_leaves_the_callers_random_stream_alone(tmp_path: Path) -> None:
    """A run that builds its base must sample what a run that finds it cached samples."""
    import torch

    torch.manual_seed(123)
    expected = torch.rand(4)
    torch.manual_seed(123)
    assert build_in(tmp_path / "c", SMALL).built
    assert torch.equal(torch.rand(4), expected)


def test_a_quiet_build_draws_no_library_bar(tmp_path: Path, capfd: pytest.CaptureFixture) -> None:
    """progress=False (tests, the suite's background builder) prints nothing: transformers'
    "Writing model shards" bar used to reach the suite's output from the background builds.
    And the library's bars are back on afterwards, for whoever draws them next."""
    from transformers.utils import logging as hf_logging

    capfd.readouterr()
    assert build_in(tmp_path / "q", SMALL).built
    out, err = capfd.readouterr()
    assert "Writing model shards" not in out + err and not (out + err).strip(), (out, err)
    assert hf_logging.is_progress_bar_enabled()


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


def test_sticky_and_truncated_demonstrators_do_what_they_say_after_an_error() -> None:
    """sticky repeats a failed error (a bump) w.p. stick (or by chance, as any noisy turn may),
    and nothing else; truncated stops at the first error; uniform, the control, draws what it
    always drew."""
    import random

    import tasks
    from minirl.infra.validation import TINY_MODELS
    from minirl.tiny import DEMONSTRATORS, noisy_demo

    assert [m.partition("-")[2] or "uniform" for m in TINY_MODELS] == list(DEMONSTRATORS)
    rng = random.Random(0)
    repeats = chances = other_repeats = other_chances = 0
    for seed in range(400):
        demo = noisy_demo("gridnav", seed, 10, 0.5, rng, "sticky", 0.6)
        env = tasks.make("gridnav")
        env.reset(seed)
        failed, detour, prev = False, False, ""
        for reply in demo.replies:
            optimal = env.optimal_actions()
            # After a bump: the same action w.p. 0.6 + 0.4 * its noise; after a detour or a good
            # move, only by the noise (and the oracle's own choice).
            noise = 0.5 / 4 + 0.5 * (prev in optimal) / len(optimal)
            if failed:
                chances += 0.6 + 0.4 * noise
                repeats += reply == prev
            elif detour:
                other_chances += noise
                other_repeats += reply == prev
            info = env.step(reply).info
            erred = reply not in optimal
            failed, detour, prev = erred and info["mistake"], erred and not info["mistake"], reply
    assert chances > 300 and repeats == pytest.approx(chances, rel=0.1)
    assert other_chances > 30 and other_repeats == pytest.approx(other_chances, rel=0.3)
    for seed in range(100):
        demo = noisy_demo("fog", seed, 10, 0.7, rng, "truncated")
        env = tasks.make("fog")
        env.reset(seed)
        flags = []
        for reply in demo.replies:
            flags.append(reply in env.optimal_actions())
            env.step(reply)
        assert all(flags[:-1]) and (not flags[-1] or demo.success or len(flags) == 10)
        assert len(demo.observations) == len(demo.replies)
    # The control's demonstrations are unchanged by the new fields, and so is its cache key.
    a, b = random.Random(3), random.Random(3)
    assert noisy_demo("fog", 5, 8, 0.7, a) == noisy_demo("fog", 5, 8, 0.7, b, "uniform", 0.9)
    fields = dataclasses.asdict(TinyRecipe.for_task("fog"))
    del fields["demonstrator"], fields["stick"]
    blob = json.dumps(fields, sort_keys=True).encode()
    assert TinyRecipe.for_task("fog").key() == hashlib.sha256(blob).hexdigest()[:12]
    assert TinyRecipe.for_task("fog", "sticky").key() != TinyRecipe.for_task("fog").key()


def test_the_sticky_demonstrators_entropy_by_hand() -> None:
    """4 actions, one optimal (a), the last action b was an error, epsilon 0.5, stick 0.5:
    P(a) = 0.5 (0.125 + 0.5), P(b) = 0.5 + 0.5 * 0.125, P(c) = P(d) = 0.5 * 0.125."""
    from minirl.tiny import _sticky_entropy

    probs = [0.3125, 0.5625, 0.0625, 0.0625]
    expected = -sum(p * math.log(p) for p in probs)
    got = _sticky_entropy(("a", "b", "c", "d"), ["a"], "b", 0.5, 0.5)
    assert got == pytest.approx(expected)
