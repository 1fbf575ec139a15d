"""The trainer: budgets per group, and the direction of the update."""

from __future__ import annotations

import random

import torch

import minirl.rollout as rollout_module
from minirl import grpo
from minirl.config import BudgetArgs, Config, GRPOArgs, TaskArgs
from minirl.episode import EpisodeSpec
from minirl.logprobs import sequence_logps, to_batch
from minirl.rewards import outcome_rewards
from minirl.rollout import rollout
from minirl.trainer import train_step


def small_config(**budget) -> Config:
    return Config(
        grpo=GRPOArgs(num_generations=4, learning_rate=1e-2, eval_seeds=0),
        budget=BudgetArgs(**budget),
        task=TaskArgs(tasks_per_step=3),
    )


def test_each_group_shares_its_instance_and_budget(quick_policy, monkeypatch) -> None:
    model, tok = quick_policy
    seen: list[list[EpisodeSpec]] = []

    def spy(model, tokenizer, specs, **kwargs):
        seen.append(specs)
        return rollout(model, tokenizer, specs, **kwargs)

    monkeypatch.setattr(rollout_module, "rollout", spy)
    cfg = small_config(mode="budgetmix", budget_min=2, budget_max=6)
    cfg.task.tasks_per_step = 6
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=0.0)
    budgets = set()
    for step in range(3):
        train_step(model, tok, optimizer, cfg, random.Random(step), step)
    for specs in seen:
        assert len(specs) == 6 * 4
        for g in range(6):
            group = specs[4 * g : 4 * g + 4]
            assert len({(s.seed, s.budget, s.group) for s in group}) == 1
            budgets.add(group[0].budget)
            assert 2 <= group[0].budget <= 6
    assert len(budgets) > 2, "budgetmix should draw different budgets for different groups"


def test_generation_batch_size_plays_the_step_in_chunks(quick_policy, monkeypatch) -> None:
    """--generation_batch_size 5 plays a 12-episode step as rollouts of 5, 5 and 2 episodes, in
    spec order, and the step still trains on all 12."""
    model, tok = quick_policy
    sizes: list[int] = []

    def spy(model, tokenizer, specs, **kwargs):
        sizes.append(len(specs))
        return rollout(model, tokenizer, specs, **kwargs)

    monkeypatch.setattr(rollout_module, "rollout", spy)
    cfg = small_config(mode="fixed", budget=3)
    cfg.grpo.generation_batch_size = 5
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=0.0)
    metrics = train_step(model, tok, optimizer, cfg, random.Random(0), 0)
    assert sizes == [5, 5, 2] and metrics["turns"] <= 3


def episodes_for(quick_policy, n_groups: int = 2, g: int = 4, budget: int = 4):
    model, tok = quick_policy
    torch.manual_seed(0)
    specs = [
        EpisodeSpec("gridnav", s, budget, i)
        for i, s in enumerate(range(n_groups))
        for _ in range(g)
    ]
    return rollout(model, tok, specs, max_new_tokens=3)


def test_update_moves_toward_successes_and_only_lora(quick_policy_fp32) -> None:
    """One SGD step on the GRPO loss raises the log-prob of the group's success and lowers the
    others'; the frozen base weights do not move."""
    model, tok = quick_policy_fp32
    episodes = episodes_for((model, tok), n_groups=1, g=4)
    for i, e in enumerate(episodes):
        e.success = i == 0
    batch = to_batch(episodes, tok.pad_token_id, torch.device("cpu"))
    adv, _ = grpo.token_advantages(outcome_rewards(episodes, 0.0), batch.loss_mask, 4)
    frozen = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    lora = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}

    def seq_logp() -> torch.Tensor:
        with torch.no_grad():
            lp = sequence_logps(model, batch.input_ids, batch.attention_mask, 1.0)
        return (lp * batch.loss_mask).sum(-1)

    before = seq_logp()
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.5)
    model.train()
    logps = sequence_logps(model, batch.input_ids, batch.attention_mask, 1.0)
    loss, _ = grpo.policy_loss(logps, batch.old_logps, adv, batch.loss_mask)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    model.eval()
    after = seq_logp()
    try:
        assert after[0] > before[0]
        assert (after[1:] < before[1:]).all()
        for n, p in model.named_parameters():
            if not p.requires_grad:
                assert torch.equal(p, frozen[n]), n
        assert any(
            not torch.equal(p, lora[n]) for n, p in model.named_parameters() if p.requires_grad
        )
    finally:
        with torch.no_grad():
            for n, p in model.named_parameters():
                if p.requires_grad:
                    p.copy_(lora[n])
