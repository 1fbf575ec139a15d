"""Batched multi-turn rollout: exact masks, true log-probs, safe padding, one generate per turn."""

from __future__ import annotations

import copy
import time

import pytest
import torch

import tasks
from minirl.chat import budget_text
from minirl.episode import EpisodeSpec
from minirl.logprobs import sequence_logps, to_batch
from minirl.rollout import rollout


def specs(n: int, budget: int, task: str = "gridnav") -> list[EpisodeSpec]:
    return [EpisodeSpec(task, s, budget, group=i) for i, s in enumerate(tasks.TRAIN_SEEDS[:n])]


def conversation_ids(tokenizer, episode) -> list[int]:
    """Re-render an episode's conversation with the chat template (valid here: word-level text)."""
    env = tasks.make(episode.task)
    obs = env.reset(episode.seed)
    msgs = [{"role": "system", "content": env.system_prompt}]
    for k, turn in enumerate(episode.turns):
        left = episode.budget - k if episode.budget_visible else None
        msgs.append({"role": "user", "content": budget_text(obs, left)})
        msgs.append({"role": "assistant", "content": turn.reply})
        obs = env.step(turn.reply).observation
    text = tokenizer.apply_chat_template(msgs, tokenize=False)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


@pytest.mark.parametrize("task", tasks.NAMES)
def test_mask_decodes_to_exactly_the_replies(quick_policy, task: str) -> None:
    model, tok = quick_policy
    torch.manual_seed(0)
    episodes = rollout(model, tok, specs(6, 5, task), max_new_tokens=3)
    checked = 0
    for ep in episodes:
        assert len(ep.input_ids) == len(ep.loss_mask) == len(ep.logprobs) == len(ep.turn_index)
        for k, turn in enumerate(ep.turns):
            ids = [i for i, t in zip(ep.input_ids, ep.turn_index, strict=True) if t == k]
            assert tok.decode(ids, skip_special_tokens=True) == turn.reply
        # The mask is exactly the sampled reply tokens, at most max_new_tokens per turn.
        assert all((m == 1) == (t >= 0) for m, t in zip(ep.loss_mask, ep.turn_index, strict=True))
        assert all(0 < ep.turn_index.count(k) <= 3 for k in range(ep.turns_used))
        # Everything unmasked is exactly the chat template around the replies. (Re-rendering needs
        # the reply text to round-trip, so replies with a sampled special token are skipped here.)
        special = set(tok.all_special_ids) - {tok.eos_token_id}
        if not special & {i for i, m in zip(ep.input_ids, ep.loss_mask, strict=True) if m}:
            expected = conversation_ids(tok, ep)
            assert ep.input_ids == expected[: len(ep.input_ids)]
            checked += 1
        assert ep.turns_used <= ep.budget
    assert checked >= 2


@pytest.mark.parametrize("policy", ["quick_policy", "quick_policy_fp32"])
def test_stored_logprobs_match_a_fresh_forward_pass(request, policy: str) -> None:
    model, tok = request.getfixturevalue(policy)
    torch.manual_seed(1)
    episodes = rollout(model, tok, specs(12, 6), max_new_tokens=3, temperature=0.8)
    batch = to_batch(episodes, tok.pad_token_id, torch.device("cpu"))
    with torch.no_grad():
        fresh = sequence_logps(model, batch.input_ids, batch.attention_mask, 0.8)
    mask = batch.loss_mask.bool()
    assert mask.sum() > 12
    torch.testing.assert_close(fresh[mask], batch.old_logps[mask], atol=2e-4, rtol=1e-4)


def test_pad_equal_to_eos_does_not_corrupt_running_episodes(quick_policy) -> None:
    model, tok = quick_policy
    tok_eos = copy.deepcopy(tok)
    tok_eos.pad_token = tok_eos.eos_token
    assert tok_eos.pad_token_id == tok_eos.eos_token_id
    # Different budgets make episodes stop at different turns while others keep running.
    batch_specs = [
        EpisodeSpec("gridnav", s, 2 + i % 7, i) for i, s in enumerate(tasks.TRAIN_SEEDS[:16])
    ]
    # Greedy decoding is deterministic, so any effect of padding would change the tokens.
    alone = [rollout(model, tok, [s], temperature=0.0)[0] for s in batch_specs]
    together = rollout(model, tok_eos, batch_specs, temperature=0.0)
    lengths = {ep.turns_used for ep in together}
    assert len(lengths) > 1, "need episodes that end at different turns"
    for a, b in zip(alone, together, strict=True):
        assert a.input_ids == b.input_ids
        torch.testing.assert_close(
            torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=2e-4, rtol=0
        )


def test_one_batched_generate_per_turn(quick_policy, monkeypatch) -> None:
    model, tok = quick_policy
    calls: list[int] = []
    original = model.generate

    def counting_generate(*args, **kwargs):
        calls.append(kwargs["input_ids"].shape[0])
        return original(*args, **kwargs)

    monkeypatch.setattr(model, "generate", counting_generate)
    torch.manual_seed(2)
    start = time.perf_counter()
    episodes = rollout(model, tok, specs(64, 8), max_new_tokens=4, engine="generate")
    seconds = time.perf_counter() - start
    longest = max(ep.turns_used for ep in episodes)
    assert len(calls) == longest <= 8
    assert calls[0] == 64
    # The batch shrinks exactly as episodes finish.
    for turn, size in enumerate(calls):
        assert size == sum(ep.turns_used > turn for ep in episodes)
    print(f"\n64 episodes x 8 turns (nf4): {seconds:.2f} s, {len(calls)} generate calls")


def test_budget_is_respected_and_bad_budget_rejected(quick_policy) -> None:
    model, tok = quick_policy
    episodes = rollout(model, tok, specs(8, 2), max_new_tokens=2)
    assert all(ep.turns_used <= 2 for ep in episodes)
    with pytest.raises(ValueError, match="budget"):
        rollout(model, tok, [EpisodeSpec("gridnav", 0, 0)])


@pytest.mark.parametrize("policy", ["quick_policy", "quick_policy_fp32"])
def test_cached_and_simple_paths_sample_the_same_episodes(request, policy: str) -> None:
    """The KV cache across turns is an optimisation only: same seed, same tokens, same log-probs."""
    model, tok = request.getfixturevalue(policy)
    # Mixed budgets: rows leave the batch (and the cache) at different turns.
    batch_specs = [
        EpisodeSpec("gridnav", s, 2 + i % 6, i) for i, s in enumerate(tasks.TRAIN_SEEDS[:24])
    ]
    played = {}
    for reuse in (False, True):
        torch.manual_seed(5)
        played[reuse] = rollout(
            model, tok, batch_specs, max_new_tokens=3, engine="generate", reuse_cache=reuse
        )
    assert len({ep.turns_used for ep in played[True]}) > 2
    assert sum(ep.truncated_replies for ep in played[True]) > 0, "exercise the added-eos branch"
    for simple, cached in zip(played[False], played[True], strict=True):
        assert cached.input_ids == simple.input_ids
        assert cached.loss_mask == simple.loss_mask
        assert [t.reply for t in cached.turns] == [t.reply for t in simple.turns]
        torch.testing.assert_close(
            torch.tensor(cached.logprobs), torch.tensor(simple.logprobs), atol=1e-5, rtol=0
        )


def test_cached_path_feeds_only_the_new_tokens_each_turn(quick_policy) -> None:
    """Prompt work per turn: flat with the cache, growing with the history without it."""
    model, tok = quick_policy
    base = model.get_base_model()
    batch_specs = [EpisodeSpec("gridnav", s, 8, i) for i, s in enumerate(tasks.TRAIN_SEEDS[:8])]
    widths: dict[bool, list[int]] = {}
    for reuse in (False, True):
        fed: list[int] = []
        hook = base.register_forward_pre_hook(
            lambda _m, _a, kw, fed=fed: fed.append(kw["input_ids"].shape[1]), with_kwargs=True
        )
        try:
            torch.manual_seed(3)
            episodes = rollout(
                model, tok, batch_specs, max_new_tokens=4, engine="generate", reuse_cache=reuse
            )
        finally:
            hook.remove()
        # A forward that takes more than one token is a turn's prefill; the rest decode 1 by 1.
        widths[reuse] = [w for w in fed if w > 1]
    turns = max(ep.turns_used for ep in episodes)
    assert turns >= 4
    assert len(widths[True]) == len(widths[False]) == turns
    # Without the cache each prefill re-reads the whole (growing) history ...
    assert widths[False] == sorted(widths[False]) and widths[False][-1] > 3 * widths[False][1]
    # ... with it, every later prefill is just the closing tokens and the next observation.
    suffix = max(len(ep.input_ids) for ep in episodes)  # a loose bound, far above a chunk
    assert max(widths[True][1:]) <= 2 * widths[True][1] < suffix
    assert sum(widths[True]) < sum(widths[False]) / 2
