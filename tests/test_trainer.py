"""The trainer: budgets per group, advantages on the right tokens, the direction of the update."""

from __future__ import annotations

import random

import torch

from minirl import grpo, trainer
from minirl.config import BudgetArgs, Config, GRPOArgs, TaskArgs
from minirl.rollout import EpisodeSpec, progress_rewards, rollout
from minirl.trainer import to_batch, token_advantages, train_step


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

    monkeypatch.setattr(trainer, "rollout", spy)
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


def episodes_for(quick_policy, n_groups: int = 2, g: int = 4, budget: int = 4):
    model, tok = quick_policy
    torch.manual_seed(0)
    specs = [
        EpisodeSpec("gridnav", s, budget, i)
        for i, s in enumerate(range(n_groups))
        for _ in range(g)
    ]
    return rollout(model, tok, specs, max_new_tokens=3)


def test_outcome_advantage_is_broadcast_to_assistant_tokens_only(quick_policy) -> None:
    _, tok = quick_policy
    episodes = episodes_for(quick_policy)
    for i, e in enumerate(episodes):
        e.success = i % 4 == 0  # one success per group of four
    cfg = small_config()
    batch = to_batch(episodes, tok.pad_token_id, torch.device("cpu"))
    adv, zero_std = token_advantages(episodes, batch, cfg)
    expected, _ = grpo.group_advantages(torch.tensor([float(e.success) for e in episodes]), 4)
    assert zero_std == 0.0
    for i in range(len(episodes)):
        on = batch.loss_mask[i].bool()
        assert torch.allclose(adv[i][on], expected[i].expand(int(on.sum())))
        assert (adv[i][~on] == 0).all()
    assert expected[0] > 0 > expected[1]


def test_process_advantage_credits_each_turn(quick_policy) -> None:
    _, tok = quick_policy
    episodes = episodes_for(quick_policy)
    cfg = small_config()
    cfg.task.reward_mode = "process"
    batch = to_batch(episodes, tok.pad_token_id, torch.device("cpu"))
    adv, _ = token_advantages(episodes, batch, cfg)
    per_turn = grpo.turn_advantages(
        [progress_rewards(e) for e in episodes], [float(e.success) for e in episodes], 4
    )
    for i, e in enumerate(episodes):
        for k in range(e.turns_used):
            tokens = batch.turn_index[i] == k
            assert tokens.any()
            assert torch.allclose(adv[i][tokens], torch.tensor(per_turn[i][k]))


def test_progress_reward_sums_to_one_along_an_optimal_path() -> None:
    import tasks
    from minirl.rollout import Episode, Turn

    env = tasks.make("gridnav")
    env.reset(5)
    ep = Episode("gridnav", 5, 0, 20, True, env.optimal_length)
    while not env.done:
        before = env.distance()
        step = env.step(sorted(env.optimal_actions())[0])
        ep.turns.append(Turn("x", "x", True, False, True, before, step.info["distance"], 0.0))
    assert sum(progress_rewards(ep)) == 1.0


def test_update_moves_toward_successes_and_only_lora(quick_policy_fp32) -> None:
    """One SGD step on the GRPO loss raises the log-prob of the group's success and lowers the
    others'; the frozen base weights do not move."""
    model, tok = quick_policy_fp32
    episodes = episodes_for((model, tok), n_groups=1, g=4)
    for i, e in enumerate(episodes):
        e.success = i == 0
    cfg = small_config()
    batch = to_batch(episodes, tok.pad_token_id, torch.device("cpu"))
    adv, _ = token_advantages(episodes, batch, cfg)
    frozen = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    lora = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}

    def seq_logp() -> torch.Tensor:
        with torch.no_grad():
            lp = grpo.sequence_logps(model, batch.input_ids, batch.attention_mask, 1.0)
        return (lp * batch.loss_mask).sum(-1)

    before = seq_logp()
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.5)
    model.train()
    logps = grpo.sequence_logps(model, batch.input_ids, batch.attention_mask, 1.0)
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


def test_length_buckets_sort_and_cut() -> None:
    lengths = [30, 10, 50, 20, 40]
    buckets = trainer.length_buckets(lengths, 2)
    assert buckets == [[1, 3], [0, 4], [2]]
    # One padded pass: 5 * 50 positions for 150 real tokens; buckets: 2*20 + 2*40 + 50 = 170.
    assert trainer.padding_fraction(lengths, [list(range(5))]) == 1 - 150 / 250
    assert abs(trainer.padding_fraction(lengths, buckets) - (1 - 150 / 170)) < 1e-12


def test_bucketed_forward_gives_the_same_loss_and_gradient(quick_policy_fp32) -> None:
    """Micro-batching by length changes how much padding is computed, not the numbers."""
    model, tok = quick_policy_fp32
    torch.manual_seed(0)
    specs = [EpisodeSpec("gridnav", s, 2 + 2 * (s % 4), s) for s in range(16)]
    episodes = rollout(model, tok, specs, max_new_tokens=3)
    batch = to_batch(episodes, tok.pad_token_id, torch.device("cpu"))
    adv = grpo.trajectory_token_advantages(torch.randn(len(episodes)), batch.loss_mask)
    params = [p for p in model.parameters() if p.requires_grad]
    results = {}
    model.train()
    for size in (16, 3):
        logps, entropy, pad = trainer.bucketed_logps(model, batch, 1.0, size)
        loss, _ = grpo.policy_loss(logps, batch.old_logps, adv, batch.loss_mask)
        grads = torch.autograd.grad(loss, params)
        results[size] = (loss.detach(), entropy, pad, grads)
    model.eval()
    (loss1, ent1, pad1, g1), (loss3, ent3, pad3, g3) = results[16], results[3]
    torch.testing.assert_close(loss3, loss1, atol=1e-6, rtol=1e-5)
    assert abs(ent3 - ent1) < 1e-5
    for a, b in zip(g3, g1, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-4)
    lengths = [len(e.input_ids) for e in episodes]
    assert pad1 == trainer.padding_fraction(lengths, [list(range(16))])
    assert pad3 < pad1 / 2, (pad3, pad1)
