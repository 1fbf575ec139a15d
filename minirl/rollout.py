"""Batched multi-turn rollouts: many episodes advance together, one sampling pass per turn.

Each episode is one chat (minirl.chat): the task's rules as the system message, then the first
observation (with "turns left: k" when the budget is visible), then alternating assistant replies
and environment observations, until the task says `done` or the turn budget T is spent.

The loop, over the episodes still playing:

    start every episode (start_episode): reset its env, write its first prompt
    while some episode plays:
        sample one reply for each, together   (DenseTurns, or GenerateTurns in minirl.hf_generate)
        for each: record the reply, step the env with it, append the next observation (play_reply)
        episodes that are done, or out of turns, leave the batch

For each episode we keep the token ids that were *sampled* and their sampling log-probabilities
log softmax(logits / temperature), so training never re-tokenizes text.

Where the replies come from. By default from the policy's dense sampling copy (minirl.engine):
LoRA merged, NF4 dequantized, a KV cache kept across turns, so each turn feeds only what is new
(the observation) and an episode of T turns costs O(T). `--rollout_engine generate` samples with
transformers' `generate` instead (minirl.hf_generate), the reference both are tested against;
`python -m minirl.tools.bench` measures the difference.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

import tasks
from minirl.chat import budget_text, encode_texts, eos_id, prompt_text, turn_suffix_text
from minirl.engine import DenseDecoder, for_sampling, new_cache, sample_replies
from minirl.episode import Episode, EpisodeSpec, Playing, Turn
from minirl.hf_generate import GenerateTurns


@contextlib.contextmanager
def eval_mode(policy: torch.nn.Module | DenseDecoder) -> Iterator[None]:
    """Sample with dropout off; a training model goes back to train mode afterwards."""
    if not isinstance(policy, torch.nn.Module):
        yield
        return
    was_training = policy.training
    policy.eval()
    try:
        yield
    finally:
        if was_training:
            policy.train()


def start_episode(
    spec: EpisodeSpec, *, budget_visible: bool, task_text: str, task_options: dict
) -> tuple[Playing, str | None]:
    """A fresh environment at the spec's state and its episode record, and the first prompt's
    text to encode (None when the spec brings its own `prompt_ids`, already in the record)."""
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
        episode.add_context(list(spec.prompt_ids))
        return Playing(env, episode), None
    shown = spec.budget if budget_visible else None
    return Playing(env, episode), budget_text(obs, shown, env.natural)


def play_reply(
    playing: Playing,
    reply: list[int],
    logps: list[float],
    text: str,
    *,
    eos: int,
    budget_visible: bool,
    max_turns: int | None,
) -> str | None:
    """Record a sampled reply (`text` is its decoded text), step the environment with it.

    Returns the next user message (the observation, with the turns left when visible), or None
    when the episode is over: done, out of budget, or at `max_turns`.
    """
    episode, env = playing.episode, playing.env
    episode.add_reply(reply, len(episode.turns), logps)
    if reply[-1] != eos:
        # Cut off by max_new_tokens: close the message so the template stays well formed. The
        # added eos was not sampled, so it is not trained on.
        episode.truncated_replies += 1
        episode.add_context([eos])
    text = env.reply_prefix + text
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
    episode.success = bool(info["success"])
    turns_left = episode.budget - episode.start_turn - len(episode.turns)
    if step.done or turns_left == 0 or len(episode.turns) == max_turns:
        return None
    return budget_text(step.observation, turns_left if budget_visible else None, env.natural)


class DenseTurns:
    """Samples each turn's replies on the dense copy (minirl.engine), one KV cache per rollout.

    The cache holds a prefix of every active episode's tokens; a turn feeds each row the rest
    (`episode.input_ids[cached:]`: the last reply's final token, the observation, the next
    assistant header), then samples the reply token by token.
    """

    def __init__(
        self, decoder: DenseDecoder, rows: int, max_new_tokens: int, temperature: float, eos: int
    ) -> None:
        self.decoder, self.eos = decoder, eos
        self.max_new_tokens, self.temperature = max_new_tokens, temperature
        self.cache = new_cache(decoder, rows, slots=256)

    def sample(self, active: list[Playing]) -> tuple[list[list[int]], list[list[float]]]:
        pending = [
            p.episode.input_ids[cached:]
            for p, cached in zip(active, self.cache.host_lengths, strict=True)
        ]
        return sample_replies(
            self.decoder,
            self.cache,
            pending,
            max_new_tokens=self.max_new_tokens,
            temperature=self.temperature,
            eos=self.eos,
        )

    def keep(self, rows: list[int], active: list[Playing]) -> None:
        self.cache.keep(rows)


@torch.no_grad()
def rollout(
    policy: PreTrainedModel | DenseDecoder,
    tokenizer: PreTrainedTokenizerBase,
    specs: list[EpisodeSpec],
    *,
    max_new_tokens: int = 4,
    temperature: float = 1.0,
    budget_visible: bool = True,
    task_text: str = "compact",
    task_options: dict[str, dict] | None = None,
    engine: str = "auto",
    reuse_cache: bool = True,
    max_turns: int | None = None,
) -> list[Episode]:
    """Play every spec to the end; one batched sampling pass per turn over the active episodes.

    `policy` is the model, or its dense copy (minirl.engine.for_sampling) when the caller rolls
    out the same weights many times. With a model, `engine` picks the sampler: 'dense' copies it
    (minirl.engine), 'generate' uses transformers' `generate` (the reference path; there
    `reuse_cache=False` re-encodes the whole history every turn, O(T^2)), 'auto' is dense where
    the model family is supported. A spec with `replies` starts from that point of its episode
    (see EpisodeSpec); `max_turns` stops every episode after that many new turns (1 asks for a
    single decision per state). `task_text` is the tasks' text, 'compact' or 'natural'
    (tasks/base.py; chat.resolve_task_text picks it for a tokenizer).
    """
    for spec in specs:
        if spec.budget - len(spec.replies) < 1:
            raise ValueError(
                f"turn budget must leave >= 1 turn, got {spec.budget} after {len(spec.replies)}"
            )
        if spec.replies and not spec.prompt_ids:
            raise ValueError("a spec that starts after some replies needs their prompt_ids")
    options = task_options or {}
    eos = eos_id(tokenizer)
    started = [
        start_episode(
            spec, budget_visible=budget_visible, task_text=task_text, task_options=options
        )
        for spec in specs
    ]
    playing = [p for p, _ in started]
    # The first prompts, encoded in one batch (the chat template rendered per episode).
    fresh = [(p, first) for p, first in started if first is not None]
    texts = [
        prompt_text(tokenizer, p.env.system_prompt, first) + p.env.reply_prefix
        for p, first in fresh
    ]
    for (p, _), ids in zip(fresh, encode_texts(tokenizer, texts), strict=True):
        p.episode.add_context(ids)

    policy = for_sampling(policy, engine)
    with eval_mode(policy):
        if isinstance(policy, DenseDecoder):
            turns = DenseTurns(policy, len(playing), max_new_tokens, temperature, eos)
        else:
            turns = GenerateTurns(policy, tokenizer, max_new_tokens, temperature, reuse_cache)
        active = playing
        while active:
            replies, logps = turns.sample(active)
            said = tokenizer.batch_decode(replies, skip_special_tokens=True)
            messages = [
                play_reply(
                    p, reply, lp, text, eos=eos, budget_visible=budget_visible, max_turns=max_turns
                )
                for p, reply, lp, text in zip(active, replies, logps, said, strict=True)
            ]
            going = [row for row, message in enumerate(messages) if message is not None]
            # The next turn's template and observation, for every episode going on, in one batch.
            suffixes = [
                turn_suffix_text(tokenizer, messages[row], active[row].env.reply_prefix)
                for row in going
            ]
            for row, ids in zip(going, encode_texts(tokenizer, suffixes), strict=True):
                active[row].episode.add_context(ids)
            active = [active[row] for row in going]
            if active:
                turns.keep(going, active)
    return [p.episode for p in playing]


def rollout_in_chunks(
    policy: PreTrainedModel | DenseDecoder,
    tokenizer: PreTrainedTokenizerBase,
    specs: list[EpisodeSpec],
    chunk: int | None,
    *,
    engine: str = "auto",
    **options: Any,
) -> list[Episode]:
    """`rollout` of `specs`, at most `chunk` episodes side by side (all at once when None).

    The KV cache of a rollout grows with the episodes it plays together; chunks bound it (the
    trainer's --generation_batch_size) at the cost of smaller, slower batches. The dense copy
    (minirl.engine) is made once and serves every chunk.
    """
    policy = for_sampling(policy, engine)
    size = chunk or max(1, len(specs))
    return [
        episode
        for start in range(0, len(specs), size)
        for episode in rollout(
            policy, tokenizer, specs[start : start + size], engine=engine, **options
        )
    ]
