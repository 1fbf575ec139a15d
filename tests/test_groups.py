"""Dynamic sampling: tied groups are replaced, replacements draw their own budgets, the bound holds,
the cost is logged, and with the option off a step is the plain GRPO step, bit for bit."""

from __future__ import annotations

import copy
import random

import pytest
import torch

from minirl import groups, grpo
from minirl.budgets import budget_probabilities, draw_groups, tally_budgets
from minirl.config import BudgetArgs, Config, GRPOArgs, TaskArgs
from minirl.episode import Episode, EpisodeSpec
from minirl.logprobs import to_batch
from minirl.models import trainable_parameters
from minirl.rewards import outcome_rewards
from minirl.rollout import rollout_in_chunks
from minirl.trainer import train_step
from minirl.update import update


def config(dynamic: bool, bound: int = 3, **budget) -> Config:
    return Config(
        grpo=GRPOArgs(
            num_generations=4,
            dynamic_sampling=dynamic,
            max_num_gen_batches=bound,
            eval_seeds=0,
            learning_rate=1e-2,
        ),
        budget=BudgetArgs(**budget),
        task=TaskArgs(tasks_per_step=4, max_new_tokens=3),
    )


def planted_play(informative_seed):
    """A stand-in for `groups.play`: a group is informative iff `informative_seed(seed)`."""
    calls: list[list[tuple[int, int]]] = []

    def play(policy, tokenizer, cfg, draws):
        calls.append(list(draws))
        out = []
        for seed, budget in draws:
            rewards = [1.0, 0.0, 0.0, 1.0] if informative_seed(seed) else [0.0] * 4
            episodes = [Episode("gridnav", seed, 0, budget, True, 1) for _ in rewards]
            out.append(groups.Group(seed, budget, episodes, rewards))
        return out

    return play, calls


def test_tied_groups_are_replaced_by_fresh_draws(monkeypatch) -> None:
    play, calls = planted_play(lambda seed: seed % 3 == 0)
    monkeypatch.setattr(groups, "play", play)
    monkeypatch.setattr(groups, "for_sampling", lambda model, engine: model)
    cfg = config(dynamic=True, bound=50, mode="budgetmix", budget_min=2, budget_max=9)
    played = groups.play_groups(None, None, cfg, random.Random(0))
    assert len(played.trained) == 4 and all(g.informative for g in played.trained)
    assert all(g.seed % 3 == 0 for g in played.trained)
    # Every informative group drawn before the step filled up is trained on, in draw order.
    informative = [g for g in played.drawn if g.informative]
    assert played.trained == informative[:4]
    assert played.rounds == len(calls) >= 2 and len(calls[0]) == 4
    # Replacements are drawn exactly as draw_groups draws (seeds and budgets from the same rng).
    rng = random.Random(0)
    assert [d for call in calls for d in call] == [
        d for call in calls for d in draw_groups(cfg, rng, len(call))
    ]
    m = played.metrics()
    drawn = len(played.drawn)
    assert m["frac_reward_zero_std"] == sum(g.seed % 3 != 0 for g in played.drawn) / drawn
    assert m["extra_rollouts_frac"] == pytest.approx(drawn / 4 - 1)
    assert m["budgets_drawn"] == [g.budget for g in played.drawn]


def test_replacement_budgets_follow_the_modes_distribution(monkeypatch) -> None:
    """Under BudgetMix the drawn budgets are the uniform mix whatever gets kept."""
    play, calls = planted_play(lambda seed: seed % 2 == 0)
    monkeypatch.setattr(groups, "play", play)
    monkeypatch.setattr(groups, "for_sampling", lambda model, engine: model)
    cfg = config(dynamic=True, bound=4, mode="budgetmix", budget_min=4, budget_max=7)
    rng = random.Random(1)
    budgets = []
    for _ in range(300):
        budgets += groups.play_groups(None, None, cfg, rng).metrics()["budgets_drawn"]
    want = budget_probabilities(4, 7)
    for t, p in want.items():
        share = budgets.count(t) / len(budgets)
        assert abs(share - p) < 4 * (p * (1 - p) / len(budgets)) ** 0.5


def test_the_bound_stops_resampling(monkeypatch) -> None:
    play, calls = planted_play(lambda seed: False)  # nothing ever carries a signal
    monkeypatch.setattr(groups, "play", play)
    monkeypatch.setattr(groups, "for_sampling", lambda model, engine: model)
    played = groups.play_groups(None, None, config(dynamic=True, bound=3), random.Random(0))
    assert played.trained == []
    assert len(played.drawn) == 12  # 3 * tasks_per_step, and not one group more
    assert played.metrics()["extra_rollouts_frac"] == 2.0
    assert played.metrics()["frac_reward_zero_std"] == 1.0


def test_without_the_option_nothing_is_replaced(monkeypatch) -> None:
    play, calls = planted_play(lambda seed: False)
    monkeypatch.setattr(groups, "play", play)
    monkeypatch.setattr(groups, "for_sampling", lambda model, engine: model)
    played = groups.play_groups(None, None, config(dynamic=False), random.Random(0))
    assert len(calls) == 1 and len(played.trained) == 4 and played.trained == played.drawn
    assert played.metrics()["extra_rollouts_frac"] == 0.0


def test_process_mode_ties_only_when_every_return_does() -> None:
    """Process advantages pool every turn's return R + progress-to-go over the group."""
    ep = Episode("gridnav", 0, 0, 4, True, 2)
    tied = groups.Group(0, 4, [ep, ep], [0.0, 0.0], [[0.0, 0.0], [0.0, 0.0]])
    assert not tied.informative
    # Same outcome, no progress difference between episodes, but earlier turns have more
    # progress to go: returns 1.0 and 0.5, so the pooled advantages are not all zero.
    assert groups.Group(0, 4, [ep, ep], [0.0, 0.0], [[0.5, 0.5], [0.5, 0.5]]).informative
    advantages = grpo.turn_advantages([[0.5, 0.5], [0.5, 0.5]], [0.0, 0.0], 2)
    assert any(a != 0 for ep_adv in advantages for a in ep_adv)
    zero = grpo.turn_advantages([[0.0, 0.0], [0.0, 0.0]], [0.0, 0.0], 2)
    assert all(a == 0 for ep_adv in zero for a in ep_adv)


def test_budget_tally_and_drift() -> None:
    tally = tally_budgets(None, [4, 4, 8, 12], [4, 4, 8, 12])
    assert tally["total_variation"] == 0.0
    tally = tally_budgets(tally, [4, 8, 8, 12], [8, 12])
    assert tally["drawn"] == {"4": 3, "8": 3, "12": 2}
    assert tally["trained"] == {"4": 2, "8": 2, "12": 2}
    # P_drawn = (3, 3, 2) / 8, P_trained = (1, 1, 1) / 3: TV = 1/2 * (1/24 + 1/24 + 1/12)
    assert tally["total_variation"] == pytest.approx(0.5 * (1 / 24 + 1 / 24 + 2 / 24))


def test_real_rollouts_keep_only_informative_groups(gridnav_policy) -> None:
    model, tok = gridnav_policy
    cfg = config(dynamic=True, bound=6, mode="budgetmix", budget_min=2, budget_max=12)
    torch.manual_seed(0)
    played = groups.play_groups(model, tok, cfg, random.Random(3))
    assert played.trained and all(len(set(g.rewards)) > 1 for g in played.trained)
    assert len(played.drawn) <= 24
    for group in played.drawn:  # each group is G episodes of one instance at one budget
        assert {(e.seed, e.budget) for e in group.episodes} == {(group.seed, group.budget)}


def test_a_step_without_the_option_is_the_plain_grpo_step(quick_policy) -> None:
    """train_step(dynamic_sampling=False) == draw, roll out, advantages, one update: bit for bit."""
    model, tok = quick_policy
    cfg = config(dynamic=False, mode="budgetmix")
    start = copy.deepcopy([p.detach() for p in trainable_parameters(model)])

    def reset() -> torch.optim.Optimizer:
        for p, p0 in zip(trainable_parameters(model), start, strict=True):
            p.data.copy_(p0)
        return torch.optim.AdamW(trainable_parameters(model), lr=1e-2, weight_decay=0.0)

    optimizer = reset()
    torch.manual_seed(7)
    metrics = train_step(model, tok, optimizer, cfg, random.Random(5), 0)
    stepped = [p.detach().clone() for p in trainable_parameters(model)]

    optimizer = reset()
    torch.manual_seed(7)
    rng = random.Random(5)
    specs = [
        EpisodeSpec("gridnav", seed, budget, i)
        for i, (seed, budget) in enumerate(draw_groups(cfg, rng))
        for _ in range(4)
    ]
    episodes = rollout_in_chunks(model, tok, specs, None, max_new_tokens=3)
    batch = to_batch(episodes, tok.pad_token_id, torch.device("cpu"))
    advantages, zero_std = grpo.token_advantages(outcome_rewards(episodes, 0.0), batch.loss_mask, 4)
    model.train()
    update(model, optimizer, batch, advantages, cfg.grpo, max_completion_length=36)
    model.eval()
    for a, b in zip(stepped, trainable_parameters(model), strict=True):
        assert torch.equal(a, b)
    assert metrics["frac_reward_zero_std"] == zero_std
    assert metrics["extra_rollouts_frac"] == 0.0
