"""Episodes to tensors to log-probs: padding, brute-force log-probs, length buckets."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from minirl import grpo
from minirl.batch import (
    bucketed_logps,
    length_buckets,
    padding_fraction,
    sequence_logps,
    to_batch,
    token_logps,
)
from minirl.episode import EpisodeSpec
from minirl.rollout import rollout


def test_length_buckets_sort_and_cut() -> None:
    lengths = [30, 10, 50, 20, 40]
    buckets = length_buckets(lengths, 2)
    assert buckets == [[1, 3], [0, 4], [2]]
    # One padded pass: 5 * 50 positions for 150 real tokens; buckets: 2*20 + 2*40 + 50 = 170.
    assert padding_fraction(lengths, [list(range(5))]) == 1 - 150 / 250
    assert abs(padding_fraction(lengths, buckets) - (1 - 150 / 170)) < 1e-12


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
        logps, entropy, pad = bucketed_logps(model, batch, 1.0, size)
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
    assert pad1 == padding_fraction(lengths, [list(range(16))])
    assert pad3 < pad1 / 2, (pad3, pad1)


def test_token_logps_match_brute_force() -> None:
    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(2, 5, 7, generator=gen)
    ids = torch.randint(0, 7, (2, 5), generator=gen)
    temp = 0.7
    got = token_logps(logits, ids, temp)
    for b in range(2):
        assert got[b, 0].item() == 0.0
        for t in range(1, 5):
            row = [x / temp for x in logits[b, t - 1].tolist()]
            log_z = math.log(sum(math.exp(x) for x in row))
            assert got[b, t].item() == pytest.approx(row[ids[b, t].item()] - log_z, abs=1e-5)


def test_sequence_logps_runs_the_model() -> None:
    gen = torch.Generator().manual_seed(2)
    logits = torch.randn(1, 4, 3, generator=gen)
    ids = torch.tensor([[0, 2, 1, 1]])

    def model(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> SimpleNamespace:
        return SimpleNamespace(logits=logits)

    got = sequence_logps(model, ids, torch.ones_like(ids), 1.0)  # type: ignore[arg-type]
    assert torch.allclose(got, token_logps(logits, ids, 1.0))
