"""Episodes to tensors to log-probs: padding, brute-force log-probs, loss-position log-probs,
length buckets."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from minirl.episode import EpisodeSpec
from minirl.logprobs import (
    bucketed_logps,
    length_buckets,
    loss_token_logps,
    micro_batches,
    padding_fraction,
    sequence_logps,
    to_batch,
    token_logps,
)
from minirl.rollout import rollout


def test_length_buckets_sort_and_cut() -> None:
    lengths = [30, 10, 50, 20, 40]
    buckets = length_buckets(lengths, 2)
    assert buckets == [[1, 3], [0, 4], [2]]
    # One padded pass: 5 * 50 positions for 150 real tokens; buckets: 2*20 + 2*40 + 50 = 170.
    assert padding_fraction(lengths, [list(range(5))]) == 1 - 150 / 250
    assert abs(padding_fraction(lengths, buckets) - (1 - 150 / 170)) < 1e-12


def played(model, tok, n: int = 16) -> list:
    """Episodes of several lengths (budgets 2, 4, 6, 8), so micro-batches differ in width."""
    torch.manual_seed(0)
    specs = [EpisodeSpec("gridnav", s, 2 + 2 * (s % 4), s) for s in range(n)]
    return rollout(model, tok, specs, max_new_tokens=3)


@pytest.mark.parametrize("fixture", ["quick_policy_fp32", "quick_policy"])
def test_loss_token_logps_equal_the_full_logits_ones(fixture: str, request) -> None:
    """The LM head on the loss positions only gives the log-probs and entropy of full logits."""
    model, tok = request.getfixturevalue(fixture)
    batch = to_batch(played(model, tok), tok.pad_token_id, torch.device("cpu"))
    temp = 0.7
    with torch.no_grad():
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
        got, entropy = loss_token_logps(
            model, batch.input_ids, batch.attention_mask, batch.loss_mask, temp
        )
        bucketed = bucketed_logps(model, batch, temp, 3)
    full = token_logps(logits, batch.input_ids, temp)
    torch.testing.assert_close(got, full * batch.loss_mask, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(bucketed, got, atol=1e-5, rtol=1e-5)
    # Entropy of the sampling distribution at every position whose next token is a loss token.
    logp = torch.log_softmax(logits[:, :-1].float() / temp, dim=-1)
    brute = (-(logp.exp() * logp).sum(-1) * batch.loss_mask[:, 1:]).sum()
    assert float(entropy) == pytest.approx(float(brute), rel=1e-5)
    assert (got[batch.loss_mask == 0] == 0).all()


def test_micro_batches_sort_by_length_and_cut_the_padding(quick_policy) -> None:
    model, tok = quick_policy
    episodes = played(model, tok)
    batch = to_batch(episodes, tok.pad_token_id, torch.device("cpu"))
    lengths = [len(e.input_ids) for e in episodes]
    cuts, pad = micro_batches(batch, 3)
    assert [index.tolist() for index, _ in cuts] == length_buckets(lengths, 3)
    assert [width for _, width in cuts] == [
        max(lengths[i] for i in rows) for rows in length_buckets(lengths, 3)
    ]
    part = batch.rows(*cuts[0])
    assert part.input_ids.shape == (3, cuts[0][1])
    assert torch.equal(part.loss_mask, batch.loss_mask[cuts[0][0], : cuts[0][1]])
    _, pad_one = micro_batches(batch, 16)
    assert pad_one == padding_fraction(lengths, [list(range(16))])
    assert pad < pad_one / 2, (pad, pad_one)


def test_to_batch_pads_right_on_the_given_device(quick_policy) -> None:
    model, tok = quick_policy
    episodes = played(model, tok, 4)
    batch = to_batch(episodes, tok.pad_token_id, torch.device("meta"))
    assert {t.device.type for t in (batch.input_ids, batch.loss_mask, batch.turn_index)} == {"meta"}
    batch = to_batch(episodes, tok.pad_token_id, torch.device("cpu"))
    for i, e in enumerate(episodes):
        n = len(e.input_ids)
        assert batch.input_ids[i, :n].tolist() == e.input_ids
        assert batch.attention_mask[i].sum() == n
        assert batch.loss_mask[i, :n].tolist() == e.loss_mask
        assert (batch.turn_index[i, n:] == -1).all()


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


@pytest.mark.parametrize("name", ["tiny", "smollm2"])
def test_reply_logps_many_equal_one_sequence_at_a_time(name: str, quick_tiny_path: str) -> None:
    """Contexts run once, left-padded, and replies on their cache (the study scores every
    checkpoint in every same-position pair this way) give each reply the log-prob that the plain
    forward over context + reply alone gives it, on tiny and on a chat model (float32: bf16
    rounding differs between batch shapes); a small token budget splits the states into several
    groups without changing a number, and a one-token reply needs no second forward."""
    from minirl.chat import reply_ids
    from minirl.logprobs import reply_logps, reply_logps_many, sequence_logps
    from minirl.models import load_policy

    model, tok = load_policy(quick_tiny_path if name == "tiny" else name, "none", dtype="float32")
    model.eval()
    words = (" up", " down", " left", " right wall")
    replies = [reply_ids(tok, w) for w in words]
    prompt = tok(" the room is dark and a door is north ; you bumped").input_ids
    states = [(prompt[: 6 + 5 * k], replies[: 2 + k % 3]) for k in range(5)]  # unequal lengths
    states.append((prompt[:9], [replies[0][:1], replies[1][:1]]))

    def alone(context: list[int], reply: list[int]) -> float:
        ids = torch.tensor([context + reply])
        return float(sequence_logps(model, ids, torch.ones_like(ids))[0, len(context) :].sum())

    want = [[alone(c, r) for r in rs] for c, rs in states]
    assert reply_logps(model, *states[0]) == pytest.approx(want[0], abs=2e-4)
    for budget in (4096, 40):
        together = reply_logps_many(model, states, max_tokens=budget)
        assert [len(x) for x in together] == [len(r) for _, r in states]
        for got, expected in zip(together, want, strict=True):
            assert got == pytest.approx(expected, abs=2e-4)
