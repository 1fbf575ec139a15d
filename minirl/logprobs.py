"""From episodes to tensors to log-probabilities: the training forward pass.

The loss (minirl.grpo) needs, for every sampled token, its log-probability under the current
policy, next to the one stored at sampling time. This module builds those tensors:

1. `to_batch`: episodes -> right-padded [B, L] tensors on the model's device: the token ids, the
   attention mask (from lengths, so pad may equal eos), the loss mask (1 on sampled assistant
   tokens only), the stored sampling log-probs, and each token's turn number.
2. `token_logps`: logits -> ``logp[b, t] = log softmax(logits[b, t-1] / T)[ids[b, t]]``, the
   log-probability of token t given the tokens before it, at the sampling temperature T (so it
   describes the distribution the token was drawn from). Position 0 has no context and is 0.
   `sequence_logps` runs a model and applies it to every position: the plain reference.
3. `loss_token_logps`: the same numbers on the loss positions only, without full-vocabulary
   logits. The decoder runs over every position, but the LM head only over the positions whose
   *next* token carries loss (transformers' boolean `logits_to_keep`). A conversation is mostly
   prompt and observations, and the vocabulary of a chat model is 50k-150k words, so the
   [B, L, V] float32 logits would be the largest tensor of the step; here only [N, V] exist,
   N = the sampled tokens. It also returns the summed entropy of the sampling distribution at
   those positions, a collapse detector.
4. `micro_batches`: the batch's rows sorted by length and cut into micro-batches, so each forward
   pass pads only to its own longest episode (under BudgetMix lengths differ several-fold).
   minirl.update runs forward, loss and backward one micro-batch at a time; `bucketed_logps` is
   the gradient-free version for the KL reference.
5. `reply_logps`: log p(reply | context) for a few candidate replies to one context, summed over
   each reply's tokens: the probes' exact score of every action a state allows
   (`reply_logps_many`: for many states, in shared forwards).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from torch import Tensor

from minirl.episode import Episode
from minirl.hf_generate import CACHE_ARG

# Positions per log-softmax call over the vocabulary: bounds its temporaries to [HEAD_CHUNK, V].
HEAD_CHUNK = 512


@dataclass
class Batch:
    """Episodes as right-padded tensors, ready for the loss."""

    input_ids: Tensor
    attention_mask: Tensor
    loss_mask: Tensor
    old_logps: Tensor
    turn_index: Tensor

    def rows(self, index: Tensor, width: int) -> Batch:
        """The rows `index`, cut to the first `width` positions (a micro-batch)."""
        # Not dataclasses.astuple: it would deep-copy every tensor first.
        return Batch(*(getattr(self, f.name)[index, :width] for f in dataclasses.fields(self)))


def to_batch(episodes: list[Episode], pad_id: int, device: torch.device) -> Batch:
    width = max(len(e.input_ids) for e in episodes)

    def pad(rows: list[list], value: float, dtype: torch.dtype) -> Tensor:
        # Padded in Python, then one tensor built directly on the device: one copy, not B.
        padded = [list(row) + [value] * (width - len(row)) for row in rows]
        return torch.tensor(padded, dtype=dtype, device=device)

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
    """Run ``model`` over whole conversations and return their per-token logprobs [B, L].

    The plain reference: it holds the [B, L, V] logits, which is fine for a few episodes.
    """
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits
    return token_logps(logits, input_ids, temperature)


def head_positions(loss_mask: Tensor) -> Tensor:
    """Boolean [B, L]: True at position t when token t+1 carries loss (its logits are needed)."""
    keep = torch.zeros(loss_mask.shape, dtype=torch.bool, device=loss_mask.device)
    keep[:, :-1] = loss_mask[:, 1:].bool()
    return keep


def loss_token_logps(
    model: torch.nn.Module,
    input_ids: Tensor,
    attention_mask: Tensor,
    loss_mask: Tensor,
    temperature: float,
) -> tuple[Tensor, Tensor]:
    """Log-probs [B, L] of the loss tokens (0 elsewhere) and the summed entropy there.

    Equal to ``token_logps(full logits) * loss_mask``, but the LM head runs only where a loss is
    taken: the decoder gives the hidden states [B, L, H], and the output layer is applied to the
    rows `keep` selects, [N, H] -> [N, V], in row-major order (the order of `nonzero`).
    `use_cache=False`: a training forward must not build a KV cache it would keep alive for the
    backward.

    Written by hand rather than with transformers' `logits_to_keep`: a boolean [B, L] mask there
    is not supported by every transformers version minirl allows, while `get_decoder()` and
    `get_output_embeddings()` are stable API. (A model that scales or caps
    its logits after the head, Gemma's softcapping, would need that step here too; the Llama and
    Qwen2 families minirl targets have none.)
    """
    keep = head_positions(loss_mask)
    causal_lm = model.get_base_model() if hasattr(model, "get_base_model") else model
    hidden = causal_lm.get_decoder()(
        input_ids=input_ids, attention_mask=attention_mask, use_cache=False
    ).last_hidden_state
    logits = causal_lm.get_output_embeddings()(hidden[keep])
    rows, cols = keep.nonzero(as_tuple=True)
    targets = input_ids[rows, cols + 1]
    picked, entropy = [], torch.zeros((), device=input_ids.device)
    for start in range(0, targets.numel(), HEAD_CHUNK):
        chunk = logits[start : start + HEAD_CHUNK].float() / temperature
        log_z = torch.logsumexp(chunk, dim=-1)
        target = targets[start : start + HEAD_CHUNK, None]
        picked.append(chunk.gather(-1, target).squeeze(-1) - log_z)
        with torch.no_grad():  # H = log Z - sum_v p_v * logit_v, the sampling distribution's
            entropy += (log_z - (torch.softmax(chunk, dim=-1) * chunk).sum(-1)).sum()
    out = torch.zeros(input_ids.shape, dtype=torch.float32, device=input_ids.device)
    if picked:
        out[rows, cols + 1] = torch.cat(picked)
    return out, entropy


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


def micro_batches(batch: Batch, size: int) -> tuple[list[tuple[Tensor, int]], float]:
    """Length-sorted micro-batches as (row index on the batch's device, width), and the padding
    fraction they leave."""
    lengths = batch.attention_mask.sum(1).tolist()
    buckets = length_buckets(lengths, size)
    device = batch.input_ids.device
    cuts = [(torch.tensor(rows, device=device), max(lengths[i] for i in rows)) for rows in buckets]
    return cuts, padding_fraction(lengths, buckets)


@torch.no_grad()
def bucketed_logps(
    model: torch.nn.Module, batch: Batch, temperature: float, micro_batch_size: int
) -> Tensor:
    """Loss-token log-probs [B, L] of the whole batch, without gradients, in micro-batches.

    The KL reference's log-probs (minirl.trainer, adapters off): [B, L] floats are small, so the
    whole step's reference is computed once and sliced per micro-batch by minirl.update.
    """
    logps = torch.zeros(batch.input_ids.shape, device=batch.input_ids.device)
    cuts, _ = micro_batches(batch, micro_batch_size)
    for index, width in cuts:
        part = batch.rows(index, width)
        lp, _ = loss_token_logps(
            model, part.input_ids, part.attention_mask, part.loss_mask, temperature
        )
        logps[index, :width] = lp
    return logps


# Tokens per step of reply_logps_many, counted as (replies) x (widest context + widest reply): the
# keys and values the reply forward attends to. Few enough that a chat model's cache and logits
# stay a few hundred MB, many enough that tiny's per-call overhead is shared.
REPLY_TOKENS = 2048


def reply_logps(
    model: torch.nn.Module, context: list[int], replies: list[list[int]]
) -> list[float]:
    """log p(reply | context) for each reply, summed over the reply's tokens.

    The probes (minirl.tools.answer_probe, minirl.tools.error_probe) and the study's
    same-position scores (minirl.eval.position) score every possible next action in a state
    this way: exactly, with none of sampling's noise.
    """
    return reply_logps_many(model, [(context, replies)])[0]


@torch.no_grad()
def reply_logps_many(
    model: torch.nn.Module,
    states: list[tuple[list[int], list[list[int]]]],
    max_tokens: int = REPLY_TOKENS,
) -> list[list[float]]:
    """`reply_logps` for many (context, replies) at once, each context run once.

    A state's replies share its context, which is most of the tokens (a conversation of a few
    hundred tokens against replies of a few), so the context is not run once per reply. Two
    forwards per group of consecutive states:

    1. the contexts, left-padded so that every context ends in the last column: that column's
       logits give each reply's first token, and the forward keeps every layer's keys and values
       (the cache);
    2. the replies, right-padded, one row per reply, on top of their own context's cache (its
       rows repeated once per reply): their logits give each later reply token.

    The padding is masked and the positions are counted from each row's first real token, so
    every log-prob is the one the reply has alone (up to float rounding). transformers'
    ``generate`` does the same for one prompt; it has no call that scores given continuations.
    """
    out: list[list[float]] = [[] for _ in states]
    group: list[int] = []
    rows = width = 0
    for k, (context, replies) in enumerate(states):
        w = len(context) + max(len(r) for r in replies)
        if group and (rows + len(replies)) * max(width, w) > max_tokens:
            _score_group(model, states, group, out)
            group, rows, width = [], 0, 0
        group.append(k)
        rows, width = rows + len(replies), max(width, w)
    if group:
        _score_group(model, states, group, out)
    return out


def _score_group(
    model: torch.nn.Module,
    states: list[tuple[list[int], list[list[int]]]],
    group: list[int],
    out: list[list[float]],
) -> None:
    device = next(model.parameters()).device
    contexts = [states[k][0] for k in group]
    lengths = torch.tensor([len(c) for c in contexts], device=device)
    width = int(lengths.max())
    ids = torch.zeros(len(group), width, dtype=torch.long, device=device)
    mask = torch.zeros(len(group), width, dtype=torch.long, device=device)
    for i, c in enumerate(contexts):
        ids[i, width - len(c) :] = torch.tensor(c, device=device)
        mask[i, width - len(c) :] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    ran = model(
        input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1
    )
    cache = getattr(ran, CACHE_ARG)
    if cache is None:  # gradient checkpointing in train mode turns the cache off
        raise RuntimeError("reply_logps needs the model's key-value cache: call model.eval() first")
    first = torch.log_softmax(ran.logits[:, -1].float(), dim=-1)  # [states, V]

    replies = [(i, r) for i, k in enumerate(group) for r in states[k][1]]
    owner = torch.tensor([i for i, _ in replies], device=device)
    cache.batch_select_indices(owner)  # each context's keys and values, once per reply
    longest = max(len(r) for _, r in replies)
    rids = torch.zeros(len(replies), longest, dtype=torch.long, device=device)
    rmask = torch.zeros(len(replies), longest, dtype=torch.long, device=device)
    for j, (_, r) in enumerate(replies):
        rids[j, : len(r)] = torch.tensor(r, device=device)
        rmask[j, : len(r)] = 1
    rpositions = lengths[owner].unsqueeze(1) + torch.arange(longest, device=device)
    later = torch.zeros(len(replies), longest, device=device)  # log p(reply token t), t >= 1
    if longest > 1:
        logits = model(
            input_ids=rids,
            attention_mask=torch.cat([mask[owner], rmask], dim=1),
            position_ids=rpositions,
            **{CACHE_ARG: cache},
        ).logits
        later = token_logps(logits, rids)
    for j, (i, r) in enumerate(replies):
        lp = first[i, r[0]] + later[j, 1 : len(r)].sum()
        out[group[i]].append(float(lp))
