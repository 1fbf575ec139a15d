"""A rough estimate of the GPU memory a minirl run needs, computed from the model's config.

It backs the advice for hub models on a laptop GPU (the README, tutorials/measured.md) until
someone measures a run on one. It is an estimate and says so: it counts the big items of
minirl's path (minirl.models, minirl.rollout, minirl.update) and nothing else. The CUDA context
and the allocator's slack (often 0.5-1 GiB) are not counted.

- Frozen base: the decoder's linear weights in NF4 (half a byte each, plus one fp32 scale per
  block of 64). Everything else (embeddings, norms) is fp32, because
  `prepare_model_for_kbit_training` upcasts it.
- LoRA on every linear layer of the decoder, fp32, with its gradient and two AdamW moments:
  16 bytes per adapter parameter.
- Activations are fp32 too: the embeddings are, and bitsandbytes returns each 4-bit layer's output
  in its input's dtype, so the residual stream never leaves fp32 (bf16 is used inside the matmul).
- Rollout: all of a step's episodes play in one batch, so it holds their KV cache at full length,
  plus the raw logits `generate` returns for every new token of a turn ([episodes, V] each).
- Training (minirl.update): one micro-batch of `micro_batch` episodes at a time, each with its own
  backward, so the step's episode count does not enter. Per token and layer the backward keeps
  about 8 hidden-width, 2 key/value-width and 4 MLP-width vectors (inputs of the norms and
  linears, attention output, the MLP's gate, up and product); with gradient checkpointing only the
  layer's input (1 hidden-width vector) is kept, and one layer's full set exists during its
  recomputation. The LM head runs only on the loss tokens (minirl.logprobs.loss_token_logps): about
  3 copies of their [tokens, V] float32 logits at the peak (the saved logits, their gradient, a
  chunk's temporaries).

The rollout and the update do not overlap: the KV cache is freed before the first training
forward. On the CPU, `python -m minirl.tools.bench` and minirl.tools.step_memory measure the real
peak (RSS) of a step; tutorials/measured.md compares the two for a Qwen2.5-0.5B-shaped model.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import AutoModelForCausalLM, PretrainedConfig

GIB = 2**30
FP32 = 4
NF4_BYTES_PER_WEIGHT = 0.5 + FP32 / 64  # 4-bit codes plus one fp32 absmax per block of 64
ADAPTER_BYTES_PER_PARAM = 4 * FP32  # weight, gradient, two AdamW moments
LOGIT_COPIES = 3
SAVED_HIDDEN, SAVED_KV, SAVED_MLP = 8, 2, 4  # vectors kept per token and layer, by width


@dataclass
class MemoryEstimate:
    """Estimated GiB, by item, for one training step (rollout, then update)."""

    parameters: int  # of the base model
    base_gib: float  # frozen weights: NF4 linears + fp32 rest
    adapters_gib: float  # LoRA weights, gradients, AdamW state
    rollout_gib: float  # KV cache and returned logits of the rollout batch
    activations_gib: float  # kept for the backward pass of one micro-batch
    logits_gib: float  # one micro-batch's loss-token logits, at the peak

    @property
    def total_gib(self) -> float:
        # Rollout and update do not overlap: the KV cache is freed before the training forward.
        fixed = self.base_gib + self.adapters_gib
        return fixed + max(self.rollout_gib, self.activations_gib + self.logits_gib)


def estimate(
    config: PretrainedConfig,
    *,
    episodes: int,
    tokens: int,
    reply_tokens: int,
    micro_batch: int = 16,
    generation_batch: int | None = None,
    max_new_tokens: int = 8,
    gradient_checkpointing: bool = False,
    lora_r: int = 16,
    quant: str = "nf4",
) -> MemoryEstimate:
    """Estimate one step of `episodes` conversations of `tokens` tokens each, `reply_tokens` of
    them sampled (the loss tokens), played `generation_batch` episodes at a time (all of them
    when None: train.py's --generation_batch_size) and trained `micro_batch` at a time.

    The model is built on PyTorch's meta device (shapes, no memory) so the parameter count and the
    LoRA shapes are exact for any architecture transformers knows.
    """
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    output_layer = model.get_output_embeddings()
    linear, adapters = 0, 0
    for module in model.modules():
        if isinstance(module, torch.nn.Linear) and module is not output_layer:
            linear += module.in_features * module.out_features
            adapters += lora_r * (module.in_features + module.out_features)
    total = sum(p.numel() for p in model.parameters())
    rest = total - linear
    base_bytes = (linear * NF4_BYTES_PER_WEIGHT if quant == "nf4" else linear * FP32) + rest * FP32

    text = config.get_text_config()
    heads = text.num_attention_heads
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
    kv_width = getattr(text, "num_key_value_heads", heads) * head_dim
    layers, width, vocab = text.num_hidden_layers, text.hidden_size, text.vocab_size
    played = min(generation_batch or episodes, episodes)  # episodes side by side in a rollout
    kv_cache = played * tokens * layers * 2 * kv_width * FP32
    returned_logits = played * max_new_tokens * vocab * FP32
    micro = min(micro_batch, episodes) * tokens  # positions of the largest micro-batch
    saved = SAVED_HIDDEN * width + SAVED_KV * kv_width + SAVED_MLP * text.intermediate_size
    if gradient_checkpointing:
        activations = micro * (layers * width + saved) * FP32
    else:
        activations = micro * layers * saved * FP32
    logits = LOGIT_COPIES * min(micro_batch, episodes) * reply_tokens * vocab * FP32
    return MemoryEstimate(
        parameters=total,
        base_gib=base_bytes / GIB,
        adapters_gib=adapters * ADAPTER_BYTES_PER_PARAM / GIB,
        rollout_gib=(kv_cache + returned_logits) / GIB,
        activations_gib=activations / GIB,
        logits_gib=logits / GIB,
    )
