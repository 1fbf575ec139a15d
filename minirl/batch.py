"""From episodes to tensors to log-probabilities: the training forward pass.

The loss (minirl.grpo) needs, for every sampled token, its log-probability under the current
policy, next to the one stored at sampling time. This module builds those tensors:

1. `to_batch`: episodes -> right-padded [B, L] tensors on the model's device: the token ids, the
   attention mask (from lengths, so pad may equal eos), the loss mask (1 on sampled assistant
   tokens only), the stored sampling log-probs, and each token's turn number.
2. `token_logps`: logits -> ``logp[b, t] = log softmax(logits[b, t-1] / T)[ids[b, t]]``, the
   log-probability of token t given the tokens before it, at the sampling temperature T (so it
   describes the distribution the token was drawn from). Position 0 has no context and is 0.
3. `bucketed_logps`: the whole batch's log-probs, run in length-sorted micro-batches so each
   forward pass pads only to its own longest episode (under BudgetMix lengths differ several-fold),
   plus the mean entropy of the sampling distribution on assistant tokens, a collapse detector.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from minirl.episode import Episode


@dataclass
class Batch:
    """Episodes as right-padded tensors, ready for the loss."""

    input_ids: Tensor
    attention_mask: Tensor
    loss_mask: Tensor
    old_logps: Tensor
    turn_index: Tensor


def to_batch(episodes: list[Episode], pad_id: int, device: torch.device) -> Batch:
    width = max(len(e.input_ids) for e in episodes)

    def pad(rows: list[list], value, dtype) -> Tensor:
        out = torch.full((len(rows), width), value, dtype=dtype)
        for i, row in enumerate(rows):
            out[i, : len(row)] = torch.tensor(row, dtype=dtype)
        return out.to(device)

    return Batch(
        input_ids=pad([e.input_ids for e in episodes], pad_id, torch.long),
        attention_mask=pad([[1] * len(e.input_ids) for e in episodes], 0, torch.long),
        loss_mask=pad([e.loss_mask for e in episodes], 0, torch.float32),
        old_logps=pad([e.logprobs for e in episodes], 0.0, torch.float32),
        turn_index=pad([e.turn_index for e in episodes], -1, torch.long),
    )


def token_logps(logits: Tensor, input_ids: Tensor, temperature: float = 1.0) -> Tensor:
    """Per-token logprobs [B, L]: position t holds ``log softmax(logits[t-1] / T)[input_ids[t]]``.

    Logits at position t predict token t+1, hence the shift; position 0 has no context and is 0.
    Rows are done one at a time in float32 as ``logit - logsumexp``, so the peak extra memory is
    one [L, V] float32 row rather than a full [B, L, V] log-softmax.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    out = torch.zeros(input_ids.shape, dtype=torch.float32, device=logits.device)
    targets = input_ids[:, 1:].long()
    for b in range(logits.shape[0]):
        row = logits[b, :-1].float() / temperature
        picked = row.gather(-1, targets[b].unsqueeze(-1)).squeeze(-1)
        out[b, 1:] = picked - torch.logsumexp(row, dim=-1)
    return out


def sequence_logps(
    model: torch.nn.Module, input_ids: Tensor, attention_mask: Tensor, temperature: float = 1.0
) -> Tensor:
    """Run ``model`` over whole conversations and return their per-token logprobs [B, L]."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits
    return token_logps(logits, input_ids, temperature)


def entropy_sum(logits: Tensor, mask: Tensor, temperature: float) -> tuple[float, float]:
    """Summed entropy of the sampling distribution over the masked positions, and their count."""
    with torch.no_grad():
        logp = torch.log_softmax(logits[:, :-1].float() / temperature, dim=-1)
        ent = -(logp.exp() * logp).sum(-1)
        m = mask[:, 1:]
        return float((ent * m).sum()), float(m.sum())


def length_buckets(lengths: list[int], size: int) -> list[list[int]]:
    """Row indices sorted by length and cut into micro-batches of `size` (the last may be smaller).

    Episodes of similar length share a forward pass, so each pass pads only to its own longest
    row instead of the batch's; under BudgetMix the lengths differ several-fold.
    """
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    return [order[k : k + size] for k in range(0, len(order), size)]


def padding_fraction(lengths: list[int], buckets: list[list[int]]) -> float:
    """Share of the positions fed to the model that are padding, for this micro-batching."""
    fed = sum(len(rows) * max(lengths[i] for i in rows) for rows in buckets)
    return 1.0 - sum(lengths) / fed


def bucketed_logps(
    model: torch.nn.Module, batch: Batch, temperature: float, micro_batch_size: int
) -> tuple[Tensor, float, float]:
    """Per-token log-probs [B, L] of the whole batch, computed in length-sorted micro-batches.

    The pieces are written back into one [B, L] tensor (autograd follows the copies), so the loss
    is computed once over the whole batch exactly as with a single padded pass: the same numbers
    and the same gradient, with less padding computed. The activations of every micro-batch are
    kept until backward, so this saves compute, not peak memory.
    Returns the log-probs, the mean entropy on assistant tokens, and the padding fraction.
    """
    lengths = batch.attention_mask.sum(1).tolist()
    buckets = length_buckets(lengths, micro_batch_size)
    logps = torch.zeros(batch.input_ids.shape, device=batch.input_ids.device)
    entropy, count = 0.0, 0.0
    for rows in buckets:
        width = max(lengths[i] for i in rows)
        index = torch.tensor(rows, device=batch.input_ids.device)
        ids, attention = batch.input_ids[index, :width], batch.attention_mask[index, :width]
        logits = model(input_ids=ids, attention_mask=attention).logits
        logps[index, :width] = token_logps(logits, ids, temperature)
        e, c = entropy_sum(logits, batch.loss_mask[index, :width], temperature)
        entropy, count = entropy + e, count + c
    return logps, entropy / max(count, 1.0), padding_fraction(lengths, buckets)
