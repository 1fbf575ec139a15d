"""Gradient accumulation: micro-batch by micro-batch gives the one-pass loss, gradient and stats.

The reference is the plainest possible step: full logits for the whole batch in one forward
(minirl.logprobs.sequence_logps), one `policy_loss` over all rows, one backward.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator

import pytest
import torch

from minirl import grpo
from minirl.episode import EpisodeSpec
from minirl.grpo import LOSS_TYPES, policy_loss
from minirl.logprobs import bucketed_logps, sequence_logps, to_batch
from minirl.models import reference_policy
from minirl.rewards import progress_rewards
from minirl.rollout import rollout
from minirl.update import accumulate_gradients

TEMPERATURE = 0.7
MAX_COMPLETION = 3 * 8


def step_batch(model, tok, process: bool):
    """16 episodes of budgets 2..8 in 4 groups, off-policy old log-probs, and their advantages."""
    torch.manual_seed(0)
    specs = [EpisodeSpec("gridnav", g, 2 + 2 * g, g) for g in range(4) for _ in range(4)]
    episodes = rollout(model, tok, specs, max_new_tokens=3, temperature=TEMPERATURE)
    batch = to_batch(episodes, tok.pad_token_id, torch.device("cpu"))
    # Shift the stored log-probs by up to +-0.5, so the ratios spread past both clip bounds.
    gen = torch.Generator().manual_seed(1)
    batch.old_logps += (torch.rand(batch.old_logps.shape, generator=gen) - 0.5) * batch.loss_mask
    rng = random.Random(2)
    rewards = [float(rng.random() < 0.5) for _ in episodes]
    advantages, _ = grpo.token_advantages(
        rewards,
        batch.loss_mask,
        4,
        turn_rewards=[progress_rewards(e) for e in episodes] if process else None,
        turn_index=batch.turn_index,
    )
    return batch, advantages


@contextlib.contextmanager
def trained_adapters(model) -> Iterator[None]:
    """LoRA B matrices start at 0, which makes every A gradient 0; give them values for a while."""
    saved = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=gen) * 0.05)
    try:
        yield
    finally:
        with torch.no_grad():
            for name, param in model.named_parameters():
                if name in saved:
                    param.copy_(saved[name])


def one_pass(model, batch, advantages, ref, **loss_kwargs):
    params = [p for p in model.parameters() if p.requires_grad]
    logps = sequence_logps(model, batch.input_ids, batch.attention_mask, TEMPERATURE)
    loss, stats = policy_loss(
        logps, batch.old_logps, advantages, batch.loss_mask, ref_logps=ref, **loss_kwargs
    )
    return loss.item(), stats, torch.autograd.grad(loss, params)


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
@pytest.mark.parametrize(("process", "beta"), [(False, 0.0), (True, 0.2)])
def test_accumulated_gradient_equals_the_one_pass_gradient(
    quick_policy_fp32, loss_type: str, process: bool, beta: float
) -> None:
    model, tok = quick_policy_fp32
    with trained_adapters(model):
        compare(model, tok, loss_type, process, beta)


def compare(model, tok, loss_type: str, process: bool, beta: float) -> None:
    batch, advantages = step_batch(model, tok, process)
    kwargs = {
        "epsilon": 0.2,
        "epsilon_high": 0.28,
        "beta": beta,
        "loss_type": loss_type,
        "max_completion_length": MAX_COMPLETION,
    }
    ref_full = ref_micro = None
    if beta > 0:
        with torch.no_grad(), reference_policy(model):
            ref_full = sequence_logps(model, batch.input_ids, batch.attention_mask, TEMPERATURE)
        with reference_policy(model):
            ref_micro = bucketed_logps(model, batch, TEMPERATURE, 5)
        torch.testing.assert_close(ref_micro, ref_full * batch.loss_mask, atol=1e-5, rtol=1e-5)
    params = [p for p in model.parameters() if p.requires_grad]
    model.train()
    try:
        loss, stats, grads = one_pass(model, batch, advantages, ref_full, **kwargs)
        model.zero_grad(set_to_none=True)
        # 5 does not divide 16: the last micro-batch is a ragged one.
        acc = accumulate_gradients(
            model,
            batch,
            advantages,
            temperature=TEMPERATURE,
            micro_batch_size=5,
            ref_logps=ref_micro,
            **kwargs,
        )
        accumulated = [p.grad.clone() for p in params]
    finally:
        model.zero_grad(set_to_none=True)
        model.eval()
    assert acc.finite
    assert acc.loss == pytest.approx(loss, rel=1e-5, abs=1e-7)
    for got, want in zip(accumulated, grads, strict=True):
        torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-4)
    assert all(float(g.abs().sum()) > 0 for g in grads)  # A and B matrices alike
    for key in ("clip_ratio", "clip_ratio_low", "clip_ratio_high", "kl", "ratio_mean"):
        assert acc.stats[key] == pytest.approx(stats[key], abs=1e-6), key
    # The shifted old log-probs put tokens past both bounds, so the clip branches are exercised.
    assert stats["clip_ratio_low"] > 0 and stats["clip_ratio_high"] > 0
    assert (stats["kl"] > 0) == (beta > 0)


def test_a_non_finite_micro_batch_stops_the_accumulation(quick_policy_fp32) -> None:
    model, tok = quick_policy_fp32
    batch, advantages = step_batch(model, tok, process=False)
    advantages[3] = float("nan") * batch.loss_mask[3]  # one episode's advantages are NaN
    model.train()
    try:
        acc = accumulate_gradients(
            model, batch, advantages, temperature=TEMPERATURE, micro_batch_size=4
        )
    finally:
        model.zero_grad(set_to_none=True)
        model.eval()
    assert not acc.finite
