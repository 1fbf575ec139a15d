"""Batched multi-turn rollouts: many episodes advance together, one `generate` call per turn.

Each episode is one chat (minirl.chat): the task's rules as the system message, then the first
observation (with "turns left: k" when the budget is visible), then alternating assistant replies
and environment observations, until the task says `done` or the turn budget T is spent.

Every turn, the still-active episodes are left-padded into one batch and sampled with a single
`model.generate`. For each episode we keep the token ids that were *sampled* and their sampling
log-probabilities log softmax(logits / temperature), so training never re-tokenizes text. Two
details keep batching honest:

- the attention mask comes from each sequence's length, never from `ids != pad_token_id`: with
  pad == eos (common for chat models) the eos tokens inside the history are real tokens;
- a reply ends at its *first* eos; whatever `generate` put after it is padding and is dropped.

Cost, and the KV cache across turns. `generate` keeps a KV cache *within* one call, but a new
call starts from scratch: the simple path (`reuse_cache=False`) re-encodes the whole history every
turn, so turn t costs O(t) prompt tokens and an episode of T turns O(T^2). The default path keeps
the cache `generate` hands back and, next turn, feeds only what is new: the reply's last token,
the eos that closes it, and the next observation. Those chunks differ in length across episodes,
so each is left-padded inside the growing grid; the attention mask marks the holes (and the pad
tokens `generate` appended after an episode's eos) as 0, and position ids follow the mask's
cumulative sum, so every real token sees exactly the context it would see without holes. The
prompt work per turn is then flat, and an episode costs O(T). Episodes that finish leave the batch
and their rows leave the cache. Both paths sample the same tokens from the same seed
(tests/test_rollout.py); `python -m minirl.tools.bench` measures the difference.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import torch
from transformers import GenerationConfig, PreTrainedModel, PreTrainedTokenizerBase
from transformers.generation.utils import GenerationMixin

import tasks
from minirl.chat import budget_text, eos_id, prompt_ids, turn_suffix_ids
from minirl.episode import Episode, EpisodeSpec, Turn


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


# transformers 5 renamed generate's `past_key_values` argument (and output field) to `cache`.
_CACHE_ARG = (
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


@torch.no_grad()
def rollout(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    specs: list[EpisodeSpec],
    *,
    max_new_tokens: int = 4,
    temperature: float = 1.0,
    budget_visible: bool = True,
    task_text: str = "compact",
    task_options: dict[str, dict] | None = None,
    reuse_cache: bool = True,
    max_turns: int | None = None,
) -> list[Episode]:
    """Play every spec to the end; one batched `generate` per turn over the active episodes.

    `reuse_cache=True` keeps the KV cache across turns (O(T) per episode); False re-encodes the
    whole history every turn (O(T^2)), the simple reference the cached path is tested against.
    A spec with `replies` starts from that point of its episode (see EpisodeSpec); `max_turns`
    stops every episode after that many new turns (1 asks for a single decision per state).
    `task_text` is the tasks' text, 'compact' or 'natural' (tasks/base.py; chat.resolve_task_text
    picks it for a tokenizer).
    """
    for spec in specs:
        if spec.budget - len(spec.replies) < 1:
            raise ValueError(
                f"turn budget must leave >= 1 turn, got {spec.budget} after {len(spec.replies)}"
            )
        if spec.replies and not spec.prompt_ids:
            raise ValueError("a spec that starts after some replies needs their prompt_ids")
    task_options = task_options or {}
    eos = eos_id(tokenizer)
    config = generation_config(tokenizer, max_new_tokens, temperature)
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()

    envs, episodes = [], []
    for spec in specs:
        env = tasks.make(spec.task, text=task_text, **task_options.get(spec.task, {}))
        obs = env.reset(spec.seed)
        for reply in spec.replies:  # the tasks are deterministic given the seed and the replies
            env.step(reply)
        episode = Episode(
            spec.task,
            spec.seed,
            spec.group,
            spec.budget,
            budget_visible,
            env.optimal_length,
            start_turn=len(spec.replies),
            task_text=task_text,
        )
        if spec.prompt_ids:
            episode.extend(list(spec.prompt_ids), 0, -1)
        else:
            shown = spec.budget if budget_visible else None
            episode.extend(
                prompt_ids(
                    tokenizer,
                    env.system_prompt,
                    budget_text(obs, shown, env.natural),
                    env.reply_prefix,
                ),
                0,
                -1,
            )
        envs.append(env)
        episodes.append(episode)

    active = list(range(len(specs)))
    grid: CachedGrid | None = None
    turn = 0
    while active:
        if grid is None:  # the first turn, or every turn of the simple path
            ids, attention = left_pad(
                [episodes[i].input_ids for i in active], tokenizer.pad_token_id, device
            )
            cache_kwargs = {}
        else:
            ids, attention = grid.ids, grid.attention
            cache_kwargs = {_CACHE_ARG: grid.cache}
        out = model.generate(
            input_ids=ids, attention_mask=attention, generation_config=config, **cache_kwargs
        )
        new_tokens = out.sequences[:, ids.shape[1] :]
        # The sampled tokens' log-probs from the raw logits (before any processor), on the
        # device, one generated position at a time: [B, V] float32 temporaries, never [B, g, V].
        scale = temperature if temperature > 0 else 1.0
        logps = torch.stack(
            [
                torch.log_softmax(step_logits.float() / scale, dim=-1)
                .gather(-1, new_tokens[:, k, None])
                .squeeze(-1)
                for k, step_logits in enumerate(out.logits)
            ],
            dim=1,
        ).tolist()
        sampled_rows = new_tokens.tolist()

        still_active, keep_rows, chunks, reply_lengths = [], [], [], []
        for row, i in enumerate(active):
            episode, env = episodes[i], envs[i]
            sampled = sampled_rows[row]
            end = sampled.index(eos) + 1 if eos in sampled else len(sampled)
            reply = sampled[:end]
            reply_lengths.append(end)
            episode.extend(reply, 1, turn, logps[row][:end])
            fed = len(episode.input_ids)  # what the next turn's model input already holds
            if reply[-1] != eos:
                # Cut off by max_new_tokens: close the message so the template stays well formed.
                # The added eos was not sampled, so it is not trained on.
                episode.truncated_replies += 1
                episode.extend([eos], 0, -1)
            text = env.reply_prefix + tokenizer.decode(reply, skip_special_tokens=True)
            before = env.distance()
            step = env.step(text)
            info = step.info
            episode.turns.append(
                Turn(
                    reply=text,
                    action=info["action"],
                    valid=info["valid"],
                    mistake=info["mistake"],
                    optimal=info["optimal"],
                    distance_before=before,
                    distance_after=float(info["distance"]),
                    reward=step.reward,
                )
            )
            episode.reward += step.reward
            episode.success = bool(info["success"])
            turns_left = episode.budget - episode.start_turn - len(episode.turns)
            if step.done or turns_left == 0 or len(episode.turns) == max_turns:
                continue
            shown = turns_left if budget_visible else None
            episode.extend(
                turn_suffix_ids(
                    tokenizer, budget_text(step.observation, shown, env.natural), env.reply_prefix
                ),
                0,
                -1,
            )
            still_active.append(i)
            keep_rows.append(row)
            chunks.append(episode.input_ids[fed:])
        if reuse_cache and still_active:
            if grid is None:
                grid = CachedGrid(ids, attention, getattr(out, _CACHE_ARG))
            grid.advance(new_tokens, reply_lengths, keep_rows, chunks)
        active = still_active
        turn += 1

    if was_training:
        model.train()
    return episodes


def rollout_in_chunks(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    specs: list[EpisodeSpec],
    chunk: int | None,
    **options: Any,
) -> list[Episode]:
    """`rollout` of `specs`, at most `chunk` episodes side by side (all at once when None).

    The KV cache of a rollout grows with the episodes it plays together; chunks bound it (the
    trainer's --generation_batch_size) at the cost of smaller, slower generate batches.
    """
    size = chunk or max(1, len(specs))
    return [
        episode
        for start in range(0, len(specs), size)
        for episode in rollout(model, tokenizer, specs[start : start + size], **options)
    ]
