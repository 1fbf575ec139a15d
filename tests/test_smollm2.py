"""`--model smollm2`: a real pretrained chat model, converted from its GGUF, through minirl's path.

Slow and bounded (about 2 minutes on 2 CPU cores, most of it the one-time conversion): one GRPO
step of 2 episodes x 2 turns on SmolLM2-135M-Instruct in 4-bit NF4 with LoRA. It checks what the
tiny word-level model cannot: that the loss mask selects exactly the assistant text under a real
chat template and a byte-level BPE tokenizer, where token boundaries do not follow words.
"""

from __future__ import annotations

import json
import random

import bitsandbytes as bnb
import pytest
import torch

import minirl.rollout as rollout_module
import tasks
from minirl import grpo, trainer
from minirl.chat import budget_text, resolve_task_text
from minirl.config import BudgetArgs, Config, GRPOArgs, ModelArgs, TaskArgs
from minirl.infra.smollm2 import ensure_smollm2
from minirl.logprobs import sequence_logps, to_batch
from minirl.models import load_policy, trainable_parameters
from minirl.rewards import outcome_rewards
from minirl.rollout import rollout

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def step() -> dict:
    """Convert (or find) the checkpoint, then one real GRPO step, keeping the episodes it played."""
    conversion = ensure_smollm2()
    model, tok = load_policy("smollm2", quant="nf4")
    cfg = Config(
        model=ModelArgs(model="smollm2"),
        grpo=GRPOArgs(num_generations=2, learning_rate=1e-3, eval_seeds=0),
        budget=BudgetArgs(mode="fixed", budget=2),
        task=TaskArgs(tasks_per_step=1, max_new_tokens=5, invalid_penalty=0.5),
    )
    played = []

    def keep(*args, **kwargs):
        episodes = rollout(*args, **kwargs)
        played.extend(episodes)
        return episodes

    optimizer = torch.optim.AdamW(trainable_parameters(model), lr=1e-3)
    before = [p.detach().clone() for p in trainable_parameters(model)]
    torch.manual_seed(0)
    mp = pytest.MonkeyPatch()
    mp.setattr(rollout_module, "rollout", keep)
    try:
        metrics = trainer.train_step(model, tok, optimizer, cfg, random.Random(0), 0)
    finally:
        mp.undo()
    moved = any(
        not torch.equal(a, b) for a, b in zip(before, trainable_parameters(model), strict=True)
    )
    return {
        "conversion": conversion,
        "model": model,
        "tok": tok,
        "episodes": played,
        "metrics": metrics,
        "moved": moved,
    }


def test_the_conversion_is_a_normal_checkpoint(step: dict) -> None:
    path = step["conversion"].path
    config = json.loads((path / "config.json").read_text())
    assert "quantization_config" not in config and config["model_type"] == "llama"
    assert (path / "model.safetensors").is_file()
    model, tok = step["model"], step["tok"]
    assert tok.eos_token == "<|im_end|>" and tok.pad_token_id == tok.eos_token_id  # pad == eos
    linears = [m for m in model.modules() if isinstance(m, bnb.nn.Linear4bit)]
    assert len(linears) == 30 * 7  # every projection of every block is NF4
    assert ensure_smollm2().converted is False  # the second use finds the cache
    assert resolve_task_text("auto", tok) == "natural"  # a BPE chat tokenizer reads sentences
    # train.py's unset --gradient_checkpointing turns it on for a chat model (off for tiny).
    checkpointed, _ = load_policy("smollm2", gradient_checkpointing=None)
    assert checkpointed.get_base_model().is_gradient_checkpointing


def test_masks_select_exactly_the_assistant_text(step: dict) -> None:
    """Under the natural text (a chat model's default), whose replies start with a written
    "Action:" that the model continues: the prefix is part of the assistant message the template
    renders, but only what the model sampled after it is trained on."""
    tok, episodes = step["tok"], step["episodes"]
    assert len(episodes) == 2 and all(e.turns_used == 2 for e in episodes)
    for ep in episodes:
        assert ep.task_text == "natural"  # --task_text auto, for a BPE tokenizer
        # The whole conversation decodes to exactly what the model's own chat template renders.
        env = tasks.make(ep.task, text=ep.task_text)
        obs = env.reset(ep.seed)
        assert env.reply_prefix == "Action:" and obs.startswith("You are at row ")
        messages = [{"role": "system", "content": env.system_prompt}]
        for k, turn in enumerate(ep.turns):
            assert turn.reply.startswith(env.reply_prefix)
            shown = budget_text(obs, ep.budget - k, natural=True)
            messages.append({"role": "user", "content": shown})
            messages.append({"role": "assistant", "content": turn.reply})
            obs = env.step(turn.reply).observation
        rendered = tok.apply_chat_template(messages, tokenize=False)
        text = tok.decode(ep.input_ids)
        assert text.endswith("<|im_end|>") and rendered.startswith(text)
        assert rendered[len(text) :] == "\n"
        # Each turn's masked tokens are the sampled rest of that reply (not the written prefix),
        # plus its eos when the model sampled one.
        for k, turn in enumerate(ep.turns):
            ids = [i for i, t in zip(ep.input_ids, ep.turn_index, strict=True) if t == k]
            sampled = turn.reply.removeprefix(env.reply_prefix)
            assert 0 < len(ids) <= 5
            assert tok.decode(ids, skip_special_tokens=True) == sampled
            assert tok.decode(ids).removesuffix("<|im_end|>") == sampled
        # Nothing else is trained: the unmasked tokens decode to the template and observations.
        unmasked = tok.decode([i for i, m in zip(ep.input_ids, ep.loss_mask, strict=True) if not m])
        assert unmasked.count("<|im_start|>assistant\nAction:") == 2
        logps = [lp for lp, m in zip(ep.logprobs, ep.loss_mask, strict=True) if m]
        assert all(lp <= 0 for lp in logps) and any(lp < 0 for lp in logps)


def test_one_grpo_step_on_the_real_model(step: dict) -> None:
    m = step["metrics"]
    assert m["turns"] == 2 and m["skipped_updates"] == 0
    assert torch.isfinite(torch.tensor([m["loss"], m["grad_norm"], m["entropy"]])).all()
    rewards = outcome_rewards(step["episodes"], 0.5)
    if len(set(rewards)) > 1:  # a non-tied group has a gradient, and the step uses it
        assert m["grad_norm"] > 0 and step["moved"]
    else:
        assert m["grad_norm"] == 0 and m["frac_reward_zero_std"] == 1.0


def test_an_update_moves_the_real_model_toward_the_better_episode(step: dict) -> None:
    """The GRPO loss on these two episodes, as if the first had won its group: the gradient
    reaches the adapters of every layer through the 4-bit weights, and one AdamW step raises the
    first episode's log-probability against the second's (to first order it must)."""
    model, tok = step["model"], step["tok"]
    batch = to_batch(step["episodes"], tok.pad_token_id, torch.device("cpu"))
    advantages = grpo.trajectory_token_advantages(torch.tensor([1.0, -1.0]), batch.loss_mask)
    params = trainable_parameters(model)
    optimizer = torch.optim.AdamW(params, lr=1e-3)
    model.train()
    logps = sequence_logps(model, batch.input_ids, batch.attention_mask)
    loss, _ = grpo.policy_loss(logps, logps.detach(), advantages, batch.loss_mask)
    loss.backward()
    grads = {n: p.grad for n, p in model.named_parameters() if p.requires_grad}
    assert all(torch.isfinite(g).all() for g in grads.values())
    for layer in ("layers.0.", "layers.29."):
        lora_a = [g for n, g in grads.items() if layer in n and "lora_A" in n]
        assert lora_a and all(g.abs().sum() == 0 for g in lora_a)  # B = 0 at the start
        lora_b = [g for n, g in grads.items() if layer in n and "lora_B" in n]
        assert lora_b and all(g.abs().sum() > 0 for g in lora_b)
    optimizer.step()
    with torch.no_grad():
        after = sequence_logps(model, batch.input_ids, batch.attention_mask)
    change = ((after - logps.detach()) * batch.loss_mask).sum(dim=1)
    assert change[0] - change[1] > 0
