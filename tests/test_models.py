"""Loading the policy: 4-bit NF4 base, LoRA adapters, and gradients that are really right."""

from __future__ import annotations

from pathlib import Path

import bitsandbytes as bnb
import pytest
import torch
from bitsandbytes.functional import dequantize_4bit
from hubstub import HUB_ID, small_qwen_repo, stub_hub_download

from minirl.episode import EpisodeSpec
from minirl.infra.errors import ModelLoadError
from minirl.logprobs import sequence_logps, to_batch
from minirl.models import (
    base_identity,
    ensure_base,
    load_base,
    load_kwargs,
    load_policy,
    load_tokenizer,
    reference_policy,
    resolve_model_path,
    tiny_recipe,
)
from minirl.rollout import rollout


def test_4bit_policy_has_nf4_linears_and_only_lora_trains(quick_policy) -> None:
    model, _ = quick_policy
    linears = [m for n, m in model.named_modules() if isinstance(m, bnb.nn.Linear4bit)]
    assert len(linears) == 4 * 7  # q, k, v, o, gate, up, down in each of 4 blocks
    assert all(m.weight.quant_state.quant_type == "nf4" for m in linears)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    assert len(trainable) == 2 * len(linears)  # one A and one B per adapted linear


def test_reference_is_the_base_with_adapters_disabled(quick_policy, quick_tiny_path) -> None:
    model, tok = quick_policy
    ids = torch.tensor([tok("pos 1 2 goal up 1 blocked none")["input_ids"]])
    lora_b = [p for n, p in model.named_parameters() if "lora_B" in n]
    saved = [p.detach().clone() for p in lora_b]
    try:
        with torch.no_grad():
            for p in lora_b:
                p.normal_(0, 0.5)
            adapted = model(input_ids=ids).logits
            with reference_policy(model):
                reference = model(input_ids=ids).logits
            base = load_base(quick_tiny_path, "nf4")(input_ids=ids).logits
    finally:
        with torch.no_grad():
            for p, s in zip(lora_b, saved, strict=True):
                p.copy_(s)
    torch.testing.assert_close(reference, base)
    assert (adapted - reference).abs().max() > 1e-3


def test_nf4_lora_gradients_match_a_full_precision_twin(quick_tiny_path) -> None:
    """The LoRA gradient through frozen NF4 weights equals the one through the same weights in
    fp32, after a rollout has run the model in inference mode (which once broke it)."""
    torch.manual_seed(0)
    nf4, tok = load_policy(quick_tiny_path, quant="nf4")
    torch.manual_seed(0)
    fp32, _ = load_policy(quick_tiny_path, quant="none")
    with torch.no_grad():
        nf4_linears = dict(nf4.named_modules())
        for name, module in fp32.named_modules():
            twin = nf4_linears[name]
            if isinstance(twin, bnb.nn.Linear4bit):
                w = dequantize_4bit(twin.weight.data, twin.weight.quant_state)
                module.weight.copy_(w.to(torch.float32))
        for (n1, p1), (_, p2) in zip(nf4.named_parameters(), fp32.named_parameters(), strict=True):
            if "lora_B" in n1:
                p1.normal_(0, 0.1)
                p2.copy_(p1)
    episodes = rollout(nf4, tok, [EpisodeSpec("gridnav", s, 4) for s in range(8)])
    batch = to_batch(episodes, tok.pad_token_id, torch.device("cpu"))
    grads = []
    for model in (nf4, fp32):
        model.train()
        model.zero_grad()
        logps = sequence_logps(model, batch.input_ids, batch.attention_mask, 1.0)
        (-(logps * batch.loss_mask).sum()).backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad})
    lower = [n for n in grads[0] if "layers.0." in n and "lora_A" in n]
    assert lower and all(grads[0][n].abs().sum() > 0 for n in lower)
    for name, g in grads[0].items():
        torch.testing.assert_close(g, grads[1][name], atol=1e-4, rtol=2e-3, msg=name)


def test_unknown_model_and_quant_are_clear_errors(quick_tiny_path, tmp_path) -> None:
    with pytest.raises(ModelLoadError, match="no such model directory"):
        load_policy("./does-not-exist")
    with pytest.raises(ModelLoadError, match="valid choices are nf4, none"):
        load_base(quick_tiny_path, quant="int3")
    # A typo is not a hub id (those name their owner): refused without asking the network.
    with pytest.raises(ModelLoadError, match="'tinyx': no such model directory"):
        resolve_model_path("tinyx")
    (tmp_path / "notes.txt").write_text("not a model")
    with pytest.raises(ModelLoadError, match="directory without config.json, not a model; use"):
        resolve_model_path(str(tmp_path))
    (tmp_path / "adapter_config.json").write_text("{}")
    with pytest.raises(ModelLoadError, match="LoRA adapter: evaluate it with evaluate.py"):
        resolve_model_path(str(tmp_path))
    assert resolve_model_path("Qwen/Qwen2.5-0.5B-Instruct") == "Qwen/Qwen2.5-0.5B-Instruct"


def test_a_hub_id_missing_from_the_cache_offline_is_one_clear_line(tmp_path, monkeypatch) -> None:
    stub_hub_download(tmp_path, monkeypatch)  # an empty cache for HUB_ID, offline mode on
    with pytest.raises(ModelLoadError) as err:
        load_tokenizer("Org/not-downloaded")
    assert str(err.value).startswith(
        "--model 'Org/not-downloaded' is not in the local Hugging Face cache and HF_HUB_OFFLINE "
        "is set: download it once with internet access, or use 'tiny'"
    )


# ---- a hub model on a GPU, with the download stubbed out ---------------------------------------

# The architecture fields of the model's published config.json.
# Qwen2.5's chat template without its tool-calling branch.


def test_hub_id_loads_in_4bit_with_lora_and_bf16_compute_on_cuda(tmp_path, monkeypatch) -> None:
    small_qwen_repo(stub_hub_download(tmp_path, monkeypatch))
    model, tok = load_policy(HUB_ID)  # resolved from the (stubbed) hub cache
    assert type(tok).__name__ == "Qwen2Tokenizer" and tok.eos_token == "<|im_end|>"
    linears = [m for m in model.modules() if isinstance(m, bnb.nn.Linear4bit)]
    assert len(linears) == 2 * 7
    assert all("lora_" in n for n, p in model.named_parameters() if p.requires_grad)
    # The compute dtype follows the device: bf16 matmuls on a GPU, fp32 on the CPU.
    cuda = load_kwargs("nf4", torch.device("cuda"))["quantization_config"]
    cpu = load_kwargs("nf4", torch.device("cpu"))["quantization_config"]
    assert cuda.load_in_4bit and cuda.bnb_4bit_quant_type == "nf4"
    assert cuda.bnb_4bit_compute_dtype == torch.bfloat16
    assert cpu.bnb_4bit_compute_dtype == torch.float32
    # This machine has no GPU: a chat model computes in bf16 where the CPU has bf16 matmuls.
    from minirl.models import cpu_has_fast_bf16

    assert linears[0].compute_dtype == (torch.bfloat16 if cpu_has_fast_bf16() else torch.float32)
    # Qwen's template and BPE: every reply is exactly its masked tokens.
    torch.manual_seed(0)
    episodes = rollout(model, tok, [EpisodeSpec("gridnav", s, 2) for s in range(2)])
    for ep in episodes:
        for k, turn in enumerate(ep.turns):
            ids = [i for i, t in zip(ep.input_ids, ep.turn_index, strict=True) if t == k]
            assert tok.decode(ids, skip_special_tokens=True) == turn.reply
        assert tok.decode(ep.input_ids).startswith("<|im_start|>system\ngridnav")


def test_dtype_auto_follows_the_device_and_the_model(monkeypatch) -> None:
    from minirl import models

    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert models.resolve_dtype("auto", cuda, chat_model=False) == torch.bfloat16
    assert models.resolve_dtype("auto", cpu, chat_model=False) == torch.float32  # tiny: always
    for fast in (True, False):
        monkeypatch.setattr(models, "cpu_has_fast_bf16", lambda fast=fast: fast)
        want = torch.bfloat16 if fast else torch.float32
        assert models.resolve_dtype("auto", cpu, chat_model=True) == want
    assert models.resolve_dtype("float32", cuda, chat_model=True) == torch.float32
    assert models.resolve_dtype("bfloat16", cpu, chat_model=False) == torch.bfloat16
    with pytest.raises(ModelLoadError, match="--dtype 'half'"):
        models.resolve_dtype("half", cpu, chat_model=True)
    # NF4 computes in the dtype; --quant none loads its weights in it.
    nf4 = load_kwargs("nf4", cpu, torch.bfloat16)["quantization_config"]
    assert nf4.bnb_4bit_compute_dtype == torch.bfloat16
    assert load_kwargs("none", cpu, torch.bfloat16) == {"dtype": torch.bfloat16}


def test_ensure_base_builds_a_missing_tiny_base_once_and_only_minirl_s_own(
    tmp_path, monkeypatch
) -> None:
    """The study builds each task's base with ensure_base before its runs: built the first time
    (True), found after (False), and it is the very directory the runs then load."""
    import dataclasses

    import minirl.models

    monkeypatch.setenv("MINIRL_CACHE", str(tmp_path / "cache"))

    def quick(name: str, task: str):  # the real recipe, warm-started for 2 steps only
        return dataclasses.replace(tiny_recipe(name, task), max_steps=2)

    monkeypatch.setattr(minirl.models, "tiny_recipe", quick)
    assert ensure_base("tiny-sticky", "fog", progress=False) is True
    assert ensure_base("tiny-sticky", "fog", progress=False) is False
    built = sorted(p.name for p in (tmp_path / "cache").iterdir() if p.is_dir())
    assert built == [Path(resolve_model_path("tiny-sticky", "fog")).name]
    assert base_identity("tiny-sticky", "fog").endswith(f"({built[0]})")
    assert ensure_base(str(tmp_path), "fog") is False  # a model directory is loaded as it is
