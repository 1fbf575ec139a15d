"""The update: forward, loss and backward one micro-batch at a time, then one optimizer step.

A step's loss is a weighted sum over its tokens, ``L = sum_i sum_t w_it * l_it``, whose weights
depend on the whole step (minirl.grpo: dapo and bnpo divide by the step's loss-token count, grpo
by its episode count, dr_grpo by ``episodes * max_completion_length``). So:

1. count the step's loss tokens and episodes once, before any forward pass;
2. for each length-sorted micro-batch (minirl.logprobs.micro_batches): forward, the loss of its rows
   with the step's counts as denominators, and ``backward()`` at once, which frees its activations;
3. the gradients add up in each parameter's ``.grad``: ``sum_k grad L_k = grad L``, the gradient of
   one pass over the whole step, to float rounding.

Peak memory is then one micro-batch's activations (and its [N, V] loss-token logits), whatever
the number of episodes per step: `per_device_train_batch_size` sets the memory, the episodes per
step only the time. `--gradient_checkpointing` shrinks the activations further (minirl.models).

`update` is one optimizer step around that: zero the gradients, accumulate them, clip their norm,
step. A non-finite loss or gradient skips the step (the weights stay as they were) and says why.

The reported numbers are the step's: the loss is the sum of the micro-batch losses, and the clip
ratios, KL and mean ratio are token means over the step (each micro-batch's mean weighted by its
loss tokens), as one pass would report them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor

from minirl.config import GRPOArgs
from minirl.grpo import policy_loss
from minirl.logprobs import Batch, loss_token_logps, micro_batches


@dataclass
class Gradient:
    """What one accumulated backward pass over a step reports."""

    loss: float  # the step's loss: the micro-batches' parts summed
    finite: bool  # False when a micro-batch's loss was inf/NaN (the caller skips the update)
    stats: dict[str, float] = field(default_factory=dict)  # step-level token means
    entropy: float = 0.0  # mean entropy of the sampling distribution on the loss tokens
    padding_fraction: float = 0.0


def accumulate_gradients(
    model: torch.nn.Module,
    batch: Batch,
    advantages: Tensor,
    *,
    temperature: float,
    micro_batch_size: int,
    ref_logps: Tensor | None = None,
    epsilon: float = 0.2,
    epsilon_high: float | None = None,
    beta: float = 0.0,
    loss_type: str = "dapo",
    max_completion_length: int | None = None,
) -> Gradient:
    """Add the gradient of the step's GRPO loss to every trainable parameter's ``.grad``.

    ``advantages`` and ``ref_logps`` are [B, L] over the whole batch, like its tensors; the
    micro-batches take their rows. Stops at the first non-finite micro-batch loss, whose
    gradient it never adds; the caller then discards the partial ``.grad`` and skips the update.
    """
    num_items = float(batch.loss_mask.sum())
    num_episodes = batch.loss_mask.shape[0]
    cuts, padding = micro_batches(batch, micro_batch_size)
    total, entropy = 0.0, 0.0
    weighted: dict[str, float] = {}
    for index, width in cuts:
        part = batch.rows(index, width)
        logps, part_entropy = loss_token_logps(
            model, part.input_ids, part.attention_mask, part.loss_mask, temperature
        )
        loss, stats = policy_loss(
            logps,
            part.old_logps,
            advantages[index, :width],
            part.loss_mask,
            epsilon=epsilon,
            epsilon_high=epsilon_high,
            beta=beta,
            ref_logps=None if ref_logps is None else ref_logps[index, :width],
            loss_type=loss_type,
            max_completion_length=max_completion_length,
            num_items_in_batch=num_items,
            num_episodes_in_batch=num_episodes,
        )
        if not torch.isfinite(loss):
            return Gradient(loss=loss.item(), finite=False, padding_fraction=padding)
        loss.backward()
        total += loss.item()
        entropy += float(part_entropy)
        tokens = stats.pop("tokens")
        for key, value in stats.items():
            weighted[key] = weighted.get(key, 0.0) + value * tokens
    step_stats = {key: value / max(num_items, 1.0) for key, value in weighted.items()}
    return Gradient(
        loss=total,
        finite=True,
        stats=step_stats,
        entropy=entropy / max(num_items, 1.0),
        padding_fraction=padding,
    )


@dataclass
class Update:
    """What one optimizer step did."""

    gradient: Gradient
    grad_norm: float = 0.0
    skipped: str | None = None  # why no step was taken ("non-finite loss" / "... gradient")


def update(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: Batch,
    advantages: Tensor,
    g: GRPOArgs,
    *,
    max_completion_length: int,
    ref_logps: Tensor | None = None,
) -> Update:
    """One optimizer step on the step's GRPO loss: zero, accumulate, clip, step (or skip)."""
    optimizer.zero_grad(set_to_none=True)
    grad = accumulate_gradients(
        model,
        batch,
        advantages,
        temperature=g.temperature,
        micro_batch_size=g.per_device_train_batch_size,
        ref_logps=ref_logps,
        epsilon=g.epsilon,
        epsilon_high=g.epsilon_high,
        beta=g.beta,
        loss_type=g.loss_type,
        max_completion_length=max_completion_length,
    )
    params = [p for p in model.parameters() if p.requires_grad]
    norm = float(torch.nn.utils.clip_grad_norm_(params, g.max_grad_norm)) if grad.finite else 0.0
    skipped = (
        "non-finite loss"
        if not grad.finite
        else "non-finite gradient"
        if not math.isfinite(norm)
        else None
    )
    if skipped:
        optimizer.zero_grad(set_to_none=True)  # drop the partial gradient: no step is taken
        return Update(grad, skipped=skipped)
    optimizer.step()
    return Update(grad, grad_norm=norm)
