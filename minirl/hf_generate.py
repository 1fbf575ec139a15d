"""The reference sampler: each turn's replies from transformers' `generate`.

minirl samples on a dense copy of the policy by default (minirl.engine). This module keeps the
path every Hugging Face tutorial shows, `model.generate`, as the reference the engine is tested
against and the fallback for model families the engine does not know (`--rollout_engine
generate`). Two details keep batching honest:

- the attention mask comes from each sequence's length, never from `ids != pad_token_id`: with
  pad == eos (common for chat models) the eos tokens inside the history are real tokens;
- a reply ends at its *first* eos; whatever `generate` put after it is padding and is dropped.

The KV cache across turns. `generate` keeps a KV cache *within* one call, but a new call starts
from scratch: the simple path (`reuse_cache=False`) re-encodes the whole history every turn, so
turn t costs O(t) prompt tokens and an episode of T turns O(T^2). The default keeps the cache
`generate` hands back and, next turn, feeds only what is new: the reply's last token, the eos
that closes it, and the next observation. Those chunks differ in length across episodes, so each
is left-padded inside the growing grid (`CachedGrid`); the attention mask marks the holes (and the
pad tokens `generate` appended after an episode's eos) as 0, and position ids follow the mask's
cumulative sum, so every real token sees exactly the context it would see without holes. The
prompt work per turn is then flat, and an episode costs O(T). Both ways sample the same tokens
from the same seed (tests/test_rollout.py).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from transformers import GenerationConfig, PreTrainedModel, PreTrainedTokenizerBase
from transformers.generation.utils import GenerationMixin

from minirl.chat import eos_id

if TYPE_CHECKING:
    from minirl.episode import Playing


def generation_config(
    tokenizer: PreTrainedTokenizerBase, max_new_tokens: int, temperature: float
) -> GenerationConfig:
    """Pure sampling from softmax(logits / temperature), so stored log-probs are the policy's.

    Hub checkpoints ship defaults such as top_k=20, top_p=0.8 or a repetition penalty; those
    would make the sampling distribution differ from the one the loss assumes, so we override all.
    temperature <= 0 means greedy decoding (evaluation only).
    """
    greedy = temperature <= 0
    return GenerationConfig(
        max_new_tokens=max_new_tokens,
        do_sample=not greedy,
        temperature=None if greedy else temperature,
        top_k=None if greedy else 0,
        top_p=None if greedy else 1.0,
        repetition_penalty=1.0,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=eos_id(tokenizer),
        bos_token_id=None,
        use_cache=True,
        return_dict_in_generate=True,  # hands back the KV cache, which the next turn reuses
        output_logits=True,  # raw logits, before any processor: the log-probs we store
    )


def left_pad(
    sequences: list[list[int]], pad_id: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad to one batch on `device`; the attention mask comes from lengths (pad may be eos)."""
    width = max(len(s) for s in sequences)
    ids = [[pad_id] * (width - len(s)) + list(s) for s in sequences]
    mask = [[0] * (width - len(s)) + [1] * len(s) for s in sequences]
    return (
        torch.tensor(ids, dtype=torch.long, device=device),
        torch.tensor(mask, dtype=torch.long, device=device),
    )


# transformers 5 renamed the `past_key_values` argument (and output field) to `cache`; the
# scorer in minirl.logprobs names it the same way.
CACHE_ARG = (
    "cache"
    if "cache" in inspect.signature(GenerationMixin.prepare_inputs_for_generation).parameters
    else "past_key_values"
)


@dataclass
class CachedGrid:
    """What the cached path carries from one turn to the next, for the still-active episodes.

    `ids` holds every token fed to the model so far, one row per episode, holes included;
    `attention` is 1 exactly on the episode's real tokens, so `ids[attention == 1]` is the
    episode's `input_ids`. `cache` holds the keys and values of all but the last column.
    """

    ids: torch.Tensor
    attention: torch.Tensor
    cache: object

    def advance(
        self, generated: torch.Tensor, reply_lengths: list[int], keep: list[int], chunks: list
    ) -> None:
        """Append this turn's replies, drop finished rows, append each kept row's new chunk.

        `generated` [B, g] is what `generate` added; a row's reply is its first
        `reply_lengths[row]` tokens, the rest is padding `generate` put after its eos. `chunks`
        are the tokens each kept row gets before its next reply (closing eos + observation).
        """
        device, width = self.ids.device, generated.shape[1]
        real = torch.tensor(
            [[int(j < n) for j in range(width)] for n in reply_lengths], device=device
        )
        rows = torch.tensor(keep, device=device)
        ids = torch.cat([self.ids, generated], dim=1)[rows]
        attention = torch.cat([self.attention, real], dim=1)[rows]
        self.cache.batch_select_indices(rows)
        chunk_ids, chunk_mask = left_pad(chunks, 0, device)
        self.ids = torch.cat([ids, chunk_ids], dim=1)
        self.attention = torch.cat([attention, chunk_mask], dim=1)


class GenerateTurns:
    """Samples each turn's replies with transformers' `generate`: the reference path.

    With `reuse_cache` the KV cache `generate` hands back is carried to the next turn
    (`CachedGrid`); without it every turn re-encodes each episode's whole history.
    """

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        max_new_tokens: int,
        temperature: float,
        reuse_cache: bool,
    ) -> None:
        self.model, self.pad, self.reuse_cache = model, tokenizer.pad_token_id, reuse_cache
        self.eos = eos_id(tokenizer)
        self.temperature = temperature
        self.config = generation_config(tokenizer, max_new_tokens, temperature)
        self.device = next(model.parameters()).device
        self.grid: CachedGrid | None = None
        self.last: tuple = ()  # what `keep` needs of the last turn's `generate`

    def sample(self, active: list[Playing]) -> tuple[list[list[int]], list[list[float]]]:
        if self.grid is None:  # the first turn, or every turn without reuse_cache
            ids, attention = left_pad([p.episode.input_ids for p in active], self.pad, self.device)
            cache_kwargs = {}
        else:
            ids, attention = self.grid.ids, self.grid.attention
            cache_kwargs = {CACHE_ARG: self.grid.cache}
        out = self.model.generate(
            input_ids=ids, attention_mask=attention, generation_config=self.config, **cache_kwargs
        )
        new_tokens = out.sequences[:, ids.shape[1] :]  # [B, g]
        # The sampled tokens' log-probs from the raw logits (before any processor), on the
        # device, one generated position at a time: [B, V] float32 temporaries, never [B, g, V].
        scale = self.temperature if self.temperature > 0 else 1.0
        logps = torch.stack(
            [
                torch.log_softmax(step_logits.float() / scale, dim=-1)
                .gather(-1, new_tokens[:, k, None])
                .squeeze(-1)
                for k, step_logits in enumerate(out.logits)
            ],
            dim=1,
        ).tolist()
        replies, reply_logps, fed = [], [], []
        for p, row, lp in zip(active, new_tokens.tolist(), logps, strict=True):
            end = row.index(self.eos) + 1 if self.eos in row else len(row)
            replies.append(row[:end])
            reply_logps.append(lp[:end])
            fed.append(len(p.episode.input_ids) + end)  # the grid's tokens after this turn
        self.last = (out, ids, attention, new_tokens, [len(r) for r in replies], fed)
        return replies, reply_logps

    def keep(self, rows: list[int], active: list[Playing]) -> None:
        if not self.reuse_cache:
            return
        out, ids, attention, new_tokens, reply_lengths, fed = self.last
        if self.grid is None:
            self.grid = CachedGrid(ids, attention, getattr(out, CACHE_ARG))
        # Each kept row's new chunk: what its episode gained after the reply (a closing eos
        # the limit made us add, the observation, the next assistant header).
        chunks = [p.episode.input_ids[fed[r] :] for r, p in zip(rows, active, strict=True)]
        self.grid.advance(new_tokens, reply_lengths, rows, chunks)
