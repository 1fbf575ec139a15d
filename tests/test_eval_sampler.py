"""The evaluation sampler: hidden and visible sweeps, truncation, success counts."""

from __future__ import annotations

import pytest
import torch

import tasks
from minirl.episode import Episode, Turn
from minirl.eval import sampler as sampler_module
from minirl.eval.sampler import specs_for, success_counts, sweep, truncate
from minirl.rollout import rollout


def episode(optimal: list[bool], success: bool, optimal_length: int = 2) -> Episode:
    e = Episode("gridnav", 0, 0, 8, True, optimal_length, success=success)
    e.turns = [Turn("x", "x", True, False, o, 1.0, 1.0, 0.0) for o in optimal]
    return e


SEEDS = list(tasks.EVAL_SEEDS[:6])


def test_hidden_budget_truncation_equals_rolling_out_the_smaller_budget(quick_policy) -> None:
    """With the budget hidden, the first t turns at T_max are the episode at budget t, exactly.

    Every batched generate call sees the same active episodes and the same RNG stream for turns
    before t, so even the sampled tokens agree, not only their distribution.
    """
    model, tok = quick_policy
    by_t = sweep(model, tok, "gridnav", [1, 2, 3, 5], SEEDS, 3, budget_visible=False, seed=7)
    assert sorted(by_t) == [1, 2, 3, 5]
    for t in (1, 2, 3):
        torch.manual_seed(7)
        direct = rollout(model, tok, specs_for("gridnav", SEEDS, 3, t), budget_visible=False)
        assert [e.success for e in by_t[t]] == [e.success for e in direct]
        assert [[x.reply for x in e.turns] for e in by_t[t]] == [
            [x.reply for x in e.turns] for e in direct
        ]
        assert all(e.budget == t and e.turns_used <= t for e in by_t[t])
    # Successes can only grow with the budget, episode by episode.
    for a, b in zip(by_t[2], by_t[5], strict=True):
        assert b.success >= a.success


def test_visible_budget_rolls_out_every_t(quick_policy, monkeypatch) -> None:
    model, tok = quick_policy
    budgets_played = []
    real = sampler_module.rollout

    def spy(model, tokenizer, specs, **kwargs):
        budgets_played.append(specs[0].budget)
        return real(model, tokenizer, specs, **kwargs)

    monkeypatch.setattr(sampler_module, "rollout", spy)
    by_t = sweep(model, tok, "gridnav", [2, 4], SEEDS[:2], 2, budget_visible=True, batch_size=2)
    assert budgets_played == [2, 2, 4, 4]  # two batches per budget
    for t, episodes in by_t.items():
        prompt = tok.decode(episodes[0].input_ids).replace(" ", "")  # word-level decode spaces
        assert f"turnsleft:{t}<" in prompt  # the first observation told the model its budget
    budgets_played.clear()
    sweep(model, tok, "gridnav", [2, 4], SEEDS[:2], 2, budget_visible=False, batch_size=2)
    assert budgets_played == [4, 4]  # hidden: one rollout at max T


def test_truncate_and_counts() -> None:
    e = episode([True, False, True], success=True)
    e.budget = 3
    assert truncate(e, 3).success and not truncate(e, 2).success
    assert truncate(e, 2).turns_used == 2
    with pytest.raises(ValueError, match="cannot extend"):
        truncate(e, 4)
    wins = [episode([True], s) for s in (True, False, True, True)]
    assert success_counts({1: wins}, n=2) == {1: [1, 2]}
