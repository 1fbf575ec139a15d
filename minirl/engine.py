"""The sampling engine: a dense copy of the policy, and a decode loop that only does arithmetic.

Why a copy. During a rollout the policy's weights do not change, yet the training model pays for
its flexibility on every call: each of its linear layers dequantizes its NF4 weight, runs the
base matmul, then the LoRA matmuls, and every layer goes through transformers' generic
machinery (mask builders, cache objects, hub-kernel hooks). For a 1M-parameter model that
overhead is almost all of the time. So, once per training step, `dense_copy` turns the policy
into plain tensors, the way trainers that sample with vLLM sync their weights into it:

    W = dequantize(W_nf4) + (lora_alpha / r) * B @ A          (one dense matrix per linear layer)

with q, k, v stacked into one matrix and gate, up into another (one matmul each instead of three
and two). The training forward stays the 4-bit + LoRA model: the gradient must reach the
adapters, and memory stays 4-bit. The two compute the same function, so the log-probs stored at
sampling are the ones the first training forward recomputes: tests/test_engine.py holds them to
2e-4 in float32. In bf16 (a GPU, or a chat model on a CPU with bf16 matmuls) the delta is kept
apart rather than merged (`DenseLinear` says why), and the log-probs agree as closely as bf16
matmuls in two different batch shapes can: the stated tolerance there is 0.1 (measured on
smollm2: mean 0.01).

The forward, for the Llama family (Llama, SmolLM2, Qwen2: `SUPPORTED`), written out:

    h = embed[ids]
    for each layer:
        x = rmsnorm(h);  q, k, v = x @ W_qkv (+ b_qkv);  rotate q, k by each token's position
        write k, v into this row's next free cache slots
        h = h + softmax(q K^T / sqrt(d) + mask) V @ W_o          (K, V: every slot of the row)
        x = rmsnorm(h);  h = h + (silu(x @ W_gate) * (x @ W_up)) @ W_down
    logits = rmsnorm(h_last) @ W_head

Written here rather than called from transformers because the point is what is *not* in it:
no per-call validation, no cache object that grows by concatenation, nothing per token but the
forward and the sampling. The rotary embedding is transformers' own module (it knows every RoPE
variant a checkpoint may ask for); `tests/test_engine.py` checks the logits against the model's.

The KV cache (`KVCache`). One preallocated [B, kv_heads, slots, head_dim] tensor of keys and one
of values per layer, and per row the number of slots it has filled, `lengths[b]`. Rows fill at
their own pace (episodes differ in length): a call feeds row b `widths[b]` new tokens, right
padded to the call's width W; they go into slots lengths[b] .. lengths[b] + W - 1 and the row's
length grows by widths[b]. Query j of row b sees slots 0 .. lengths[b] + j, so a real token sees
exactly its history; what a padding position writes lies past the row's length and is
overwritten by the row's next real token. Nothing is ever copied per token; the cache grows by
doubling when full, and rows whose episodes end leave it at the end of the turn (`keep`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor

# Model families whose decoder layer is exactly the forward above.
SUPPORTED = ("llama", "qwen2")
ENGINES = ("auto", "dense", "generate")


@dataclass
class DenseLinear:
    """One linear map of the copy: y = x W^T + b, plus LoRA's (x A^T) B^T kept apart if set.

    In float32 the LoRA delta is merged into W (exact to rounding). In a lower precision it is
    not: W + scaling * B @ A rounded to bf16 is a different rounding of every weight than the
    training forward's bf16(W) + LoRA in float32, and shifted log-probs by up to 0.16 on smollm2;
    kept apart, only the matmuls' accumulation order differs (tests/test_engine.py).
    """

    weight: Tensor  # [out, in], in the compute dtype
    bias: Tensor | None = None
    lora_a: Tensor | None = None  # [R, in] float32, the adapters' A stacked
    lora_b: Tensor | None = None  # [out, R] float32, scaling * B (block-diagonal when stacked)


@dataclass
class DenseLayer:
    """One decoder layer's weights, dense, in the engine's compute dtype."""

    attn_norm: Tensor  # [H]
    qkv: DenseLinear  # [(heads + 2 * kv_heads) * head_dim, H]: q, k, v stacked
    out: DenseLinear  # [H, heads * head_dim]
    mlp_norm: Tensor  # [H]
    gate_up: DenseLinear  # [2 * I, H]: gate, then up
    down: DenseLinear  # [H, I]


@dataclass
class DenseDecoder:
    """A frozen, dense copy of a causal LM's weights: what `forward` runs."""

    embed: Tensor  # [V, H], the residual stream's dtype
    layers: list[DenseLayer]
    norm: Tensor  # [H]
    head: DenseLinear  # [V, H]
    rotary: torch.nn.Module  # transformers' rotary embedding: (x, positions) -> cos, sin
    heads: int
    kv_heads: int
    head_dim: int
    eps: float

    @property
    def device(self) -> torch.device:
        return self.embed.device


def supports(model: torch.nn.Module) -> bool:
    """True when `dense_copy` can copy this model (a Llama-family causal LM, SiLU MLP)."""
    config = getattr(model, "config", None)
    return (
        config is not None
        and getattr(config, "model_type", None) in SUPPORTED
        and getattr(config, "hidden_act", None) == "silu"
        and not getattr(config, "use_sliding_window", False)
    )


def resolve_engine(choice: str, model: torch.nn.Module) -> str:
    """`--rollout_engine auto` made concrete: 'dense' where the model is supported."""
    if choice not in ENGINES:
        raise ValueError(f"unknown rollout engine {choice!r}; choose one of {ENGINES}")
    if choice == "auto":
        return "dense" if supports(model) else "generate"
    if choice == "dense" and not supports(model):
        model_type = getattr(getattr(model, "config", None), "model_type", None)
        raise ValueError(
            f"--rollout_engine dense supports the model families {', '.join(SUPPORTED)}, not "
            f"{model_type!r}; use --rollout_engine generate"
        )
    return choice


def for_sampling(
    policy: torch.nn.Module | DenseDecoder, engine: str = "auto"
) -> torch.nn.Module | DenseDecoder:
    """What a rollout samples from: the model's dense copy, or the model itself (`generate`).

    A copy passed in is returned as it is, so callers that roll out the same weights many times
    (an evaluation sweep, a step played in chunks) make it once.
    """
    if isinstance(policy, DenseDecoder):
        return policy
    return dense_copy(policy) if resolve_engine(engine, policy) == "dense" else policy


def _is_4bit(weight: Tensor) -> bool:
    return type(weight).__name__ == "Params4bit"


@torch.no_grad()
def dense_linear(module: torch.nn.Module) -> DenseLinear:
    """A linear layer of the policy as plain tensors, in the dtype its matmul runs in.

    Handles the three kinds the policy holds: a plain `nn.Linear`, bitsandbytes' `Linear4bit`
    (dequantized: exactly the matrix its kernel multiplies by), and peft's LoRA wrapper of either,
    whose active adapters' ``scaling * B @ A`` is added (unless the adapters are disabled, or
    already merged into the base weight).
    """
    factors: list[tuple[Tensor, Tensor]] = []  # (A, scaling * B) per active adapter
    base = module
    if hasattr(module, "base_layer") and hasattr(module, "lora_A"):  # a peft LoRA layer
        base = module.base_layer
        if not module.disable_adapters and not module.merged:
            for name in module.active_adapters:
                if name in module.lora_A:
                    if getattr(module, "use_dora", {}).get(name, False):
                        raise ValueError("the dense sampling copy does not support DoRA adapters")
                    a = module.lora_A[name].weight.detach().float()
                    b = module.lora_B[name].weight.detach().float() * module.scaling[name]
                    factors.append((a, b))
    weight = base.weight
    if _is_4bit(weight):
        import bitsandbytes as bnb

        dense = bnb.functional.dequantize_4bit(weight.data, weight.quant_state).float()
        dtype = base.compute_dtype or torch.float32
    else:
        dense = weight.detach().float()
        dtype = weight.dtype
    bias = None if base.bias is None else base.bias.detach().to(dtype)
    if dtype == torch.float32:
        for a, b in factors:
            dense = dense + b @ a
        return DenseLinear(dense, bias)
    if not factors:
        return DenseLinear(dense.to(dtype), bias)
    return DenseLinear(
        dense.to(dtype),
        bias,
        torch.cat([a for a, _ in factors]),
        torch.cat([b for _, b in factors], dim=1),
    )


def _stack(modules: list[torch.nn.Module]) -> DenseLinear:
    """Several linear layers reading the same input, as one: their outputs concatenated."""
    parts = [dense_linear(m) for m in modules]
    weight = torch.cat([p.weight for p in parts])
    bias = None
    if any(p.bias is not None for p in parts):
        bias = torch.cat(
            [p.bias if p.bias is not None else p.weight.new_zeros(p.weight.shape[0]) for p in parts]
        )
    if all(p.lora_a is None for p in parts):
        return DenseLinear(weight, bias)
    # Each layer's A reads the same input, so the A's stack; each B writes only its own outputs,
    # so the B's sit on the diagonal of one [sum out, sum R] matrix.
    empty = [weight.new_zeros(0, weight.shape[1], dtype=torch.float32)]
    a = torch.cat([p.lora_a for p in parts if p.lora_a is not None] + empty)
    b = torch.block_diag(
        *[
            p.lora_b if p.lora_b is not None else p.weight.new_zeros(p.weight.shape[0], 0).float()
            for p in parts
        ]
    )
    return DenseLinear(weight, bias, a, b)


@torch.no_grad()
def dense_copy(model: torch.nn.Module) -> DenseDecoder:
    """The model's weights as one `DenseDecoder` (LoRA merged, NF4 dequantized); made per step."""
    if not supports(model):
        raise ValueError(f"dense_copy supports the model families {', '.join(SUPPORTED)}")
    causal_lm = model.get_base_model() if hasattr(model, "get_base_model") else model
    decoder = causal_lm.get_decoder()
    config = causal_lm.config
    layers = []
    for layer in decoder.layers:
        attn, mlp = layer.self_attn, layer.mlp
        layers.append(
            DenseLayer(
                attn_norm=layer.input_layernorm.weight.detach(),
                qkv=_stack([attn.q_proj, attn.k_proj, attn.v_proj]),
                out=dense_linear(attn.o_proj),
                mlp_norm=layer.post_attention_layernorm.weight.detach(),
                gate_up=_stack([mlp.gate_proj, mlp.up_proj]),
                down=dense_linear(mlp.down_proj),
            )
        )
    head = dense_linear(causal_lm.get_output_embeddings())
    heads = config.num_attention_heads
    return DenseDecoder(
        embed=decoder.embed_tokens.weight.detach(),
        layers=layers,
        norm=decoder.norm.weight.detach(),
        head=head,
        rotary=decoder.rotary_emb,
        heads=heads,
        kv_heads=config.num_key_value_heads or heads,
        head_dim=getattr(config, "head_dim", None) or config.hidden_size // heads,
        eps=config.rms_norm_eps,
    )


@dataclass
class KVCache:
    """Keys and values of every fed token, per layer, with each row's filled length."""

    keys: list[Tensor]  # per layer [B, kv_heads, slots, head_dim]
    values: list[Tensor]
    lengths: Tensor  # [B] long, on the device: slots filled per row
    host_lengths: list[int] = field(default_factory=list)  # the same, readable without a sync

    @property
    def slots(self) -> int:
        return self.keys[0].shape[2]

    def reserve(self, needed: int) -> None:
        """Make room for `needed` slots per row, doubling the capacity (a copy per doubling)."""
        if needed <= self.slots:
            return
        grow = max(needed, 2 * self.slots) - self.slots
        for store in (self.keys, self.values):
            for i, t in enumerate(store):
                extra = t.new_zeros(t.shape[0], t.shape[1], grow, t.shape[3])
                store[i] = torch.cat([t, extra], dim=2)

    def keep(self, rows: list[int]) -> None:
        """Keep only these rows (episodes still playing), in this order.

        No copy while every row plays on. Else, in place: the kept rows' filled slots are
        gathered and written over the first rows, and the cache becomes a view of those rows,
        capacity and all. A new cache of just the filled slots would make the next call's
        `reserve` grow it back, a second copy of everything every turn (a fifth of a large
        evaluation's time, tutorials/measured.md); a new one of full capacity must be zeroed
        first. The slots past a row's length weigh nothing (every query's mask stops at its own
        position), but they still enter softmax(..) @ V as 0 * value, so they must hold finite
        numbers: here only zeros or what the model wrote (an uninitialised cache may hold a NaN).
        """
        if rows == list(range(len(self.host_lengths))):
            return
        used = max(self.host_lengths[r] for r in rows)
        index = torch.tensor(rows, dtype=torch.long, device=self.lengths.device)
        for store in (self.keys, self.values):
            for i, t in enumerate(store):
                # index_select gathers into a new tensor first: no row is read after it is written
                t[: len(rows), :, :used] = t[:, :, :used].index_select(0, index)
                store[i] = t[: len(rows)]
        self.lengths = self.lengths.index_select(0, index)
        self.host_lengths = [self.host_lengths[r] for r in rows]


def new_cache(decoder: DenseDecoder, batch: int, slots: int) -> KVCache:
    """An empty cache for `batch` rows with room for `slots` tokens each (it grows if needed)."""
    shape = (batch, decoder.kv_heads, slots, decoder.head_dim)
    dtype, device = decoder.embed.dtype, decoder.device
    return KVCache(
        keys=[torch.zeros(shape, dtype=dtype, device=device) for _ in decoder.layers],
        values=[torch.zeros(shape, dtype=dtype, device=device) for _ in decoder.layers],
        lengths=torch.zeros(batch, dtype=torch.long, device=device),
        host_lengths=[0] * batch,
    )


def _linear(x: Tensor, linear: DenseLinear) -> Tensor:
    # The matmul runs in the weight's dtype (bf16 on a GPU with NF4), the residual stream stays
    # in its own, as bitsandbytes' Linear4bit does; LoRA kept apart runs in float32, as in peft.
    y = F.linear(x.to(linear.weight.dtype), linear.weight, linear.bias).to(x.dtype)
    if linear.lora_a is not None:
        y = y + F.linear(F.linear(x.float(), linear.lora_a), linear.lora_b).to(x.dtype)
    return y


def _rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    # As transformers' LlamaRMSNorm: normalise in float32, scale in the input's dtype.
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x32.to(x.dtype)


def _rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """RoPE on [B, heads, W, D]; cos, sin are [B, W, D]."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos.unsqueeze(1) + rotated * sin.unsqueeze(1)


# Tokens one chunk of a wide call feeds at once. A turn's prefill of every episode in one call
# would hold activations (and attention scores, [rows, heads, W, slots]) for all of them: the
# step's peak would grow with the episodes per step (tests/test_tools_step_memory.py catches it).
# Chunks of this many tokens keep that peak fixed and the matmuls still large enough to be fast.
CHUNK_TOKENS = 2048


@torch.no_grad()
def forward(decoder: DenseDecoder, cache: KVCache, ids: Tensor, widths: list[int]) -> Tensor:
    """Feed each row its new tokens; return the logits after each row's last one, [B, V] float32.

    `ids` is [B, W], row b's `widths[b]` real tokens first, then padding. A row with width 0
    feeds nothing (its length does not move; the logits returned for it mean nothing). Rows go
    through in chunks of about CHUNK_TOKENS tokens; each chunk writes into its rows of the cache.
    """
    batch, width = ids.shape
    cache.reserve(max(cache.host_lengths) + width)
    step = max(1, CHUNK_TOKENS // width)
    logits = []
    for a in range(0, batch, step):
        rows = slice(a, a + step)
        part = KVCache(  # views of the chunk's rows: writes land in the whole cache
            keys=[t[rows] for t in cache.keys],
            values=[t[rows] for t in cache.values],
            lengths=cache.lengths[rows],
            host_lengths=cache.host_lengths[rows],
        )
        logits.append(_forward_rows(decoder, part, ids[rows], widths[rows]))
    fed = torch.tensor(widths, dtype=torch.long, device=decoder.device)
    cache.lengths = cache.lengths + fed
    cache.host_lengths = [n + w for n, w in zip(cache.host_lengths, widths, strict=True)]
    return logits[0] if len(logits) == 1 else torch.cat(logits)


def _forward_rows(decoder: DenseDecoder, cache: KVCache, ids: Tensor, widths: list[int]) -> Tensor:
    """`forward` for one chunk of rows, whose cache already has room; lengths are left as they
    were (forward moves them once, for every row)."""
    batch, width = ids.shape
    device = decoder.device
    starts = cache.lengths
    positions = starts[:, None] + torch.arange(width, device=device)  # [B, W]
    span = max(cache.host_lengths) + width  # slots any query of this call can see
    # visible[b, j, s]: query j of row b sees slot s iff s <= its own position.
    visible = torch.arange(span, device=device)[None, None, :] <= positions[:, :, None]
    rows = torch.arange(batch, device=device)[:, None].expand(batch, width)
    h = F.embedding(ids, decoder.embed)  # [B, W, H]
    cos, sin = decoder.rotary(h, positions)
    heads, kv_heads, d = decoder.heads, decoder.kv_heads, decoder.head_dim
    for i, layer in enumerate(decoder.layers):
        x = _rms_norm(h, layer.attn_norm, decoder.eps)
        q, k, v = _linear(x, layer.qkv).split([heads * d, kv_heads * d, kv_heads * d], dim=-1)
        q = _rotate(q.view(batch, width, heads, d).transpose(1, 2), cos, sin)
        k = _rotate(k.view(batch, width, kv_heads, d).transpose(1, 2), cos, sin)
        v = v.view(batch, width, kv_heads, d).transpose(1, 2)
        # Advanced indices on dims 0 and 2 put [B, W] first: the values go in as [B, W, kv, D].
        cache.keys[i][rows, :, positions] = k.transpose(1, 2)
        cache.values[i][rows, :, positions] = v.transpose(1, 2)
        attended = F.scaled_dot_product_attention(
            q,
            cache.keys[i][:, :, :span],
            cache.values[i][:, :, :span],
            attn_mask=visible[:, None],
            scale=d**-0.5,
            enable_gqa=kv_heads != heads,
        )  # [B, heads, W, D]
        h = h + _linear(attended.transpose(1, 2).reshape(batch, width, heads * d), layer.out)
        x = _rms_norm(h, layer.mlp_norm, decoder.eps)
        gate, up = _linear(x, layer.gate_up).chunk(2, dim=-1)
        h = h + _linear(F.silu(gate) * up, layer.down)
    fed = torch.tensor(widths, dtype=torch.long, device=device)
    last = h[torch.arange(batch, device=device), (fed - 1).clamp(min=0)]  # [B, H]
    return _linear(_rms_norm(last, decoder.norm, decoder.eps), decoder.head).float()


def sample(logits: Tensor, temperature: float) -> tuple[Tensor, Tensor]:
    """One token per row from softmax(logits / temperature), and its log-probability.

    The draw is `generate`'s: `torch.multinomial` over the same probabilities, one call per
    position, so both paths consume the random stream alike. temperature <= 0 is greedy.
    """
    if temperature <= 0:
        token = logits.argmax(-1)
        logps = torch.log_softmax(logits, dim=-1)
    else:
        scaled = logits / temperature
        token = torch.multinomial(torch.softmax(scaled, dim=-1), 1).squeeze(-1)
        logps = torch.log_softmax(scaled, dim=-1)
    return token, logps.gather(-1, token[:, None]).squeeze(-1)


def right_pad(sequences: list[list[int]], device: torch.device) -> tuple[Tensor, list[int]]:
    """[B, W] ids, each row's tokens first, zeros after (never attended), and the row widths."""
    widths = [len(s) for s in sequences]
    width = max(widths)
    padded = [list(s) + [0] * (width - len(s)) for s in sequences]
    return torch.tensor(padded, dtype=torch.long, device=device), widths


def sample_replies(
    decoder: DenseDecoder,
    cache: KVCache,
    pending: list[list[int]],
    *,
    max_new_tokens: int,
    temperature: float,
    eos: int,
) -> tuple[list[list[int]], list[list[float]]]:
    """One turn: feed each row its pending tokens, then sample until eos or `max_new_tokens`.

    A reply ends at its first eos (kept). A token is fed only to sample the next one, so each
    reply's last token (its eos, or the token the limit cut) is still pending when this returns:
    the cache then holds exactly the first `cache.host_lengths[b]` tokens of the episode.
    """
    ids, widths = right_pad(pending, decoder.device)
    logits = forward(decoder, cache, ids, widths)
    tokens, logps = [], []
    finished = torch.zeros(len(pending), dtype=torch.bool, device=decoder.device)
    for k in range(max_new_tokens):
        token, logp = sample(logits, temperature)
        tokens.append(token)
        logps.append(logp)
        finished = finished | (token == eos)
        if k + 1 == max_new_tokens or bool(finished.all()):
            break
        # Rows that have finished feed nothing: width 0 leaves their length where it was.
        logits = forward(decoder, cache, token[:, None], (~finished).long().tolist())
    sampled = torch.stack(tokens, dim=1).tolist()
    logprobs = torch.stack(logps, dim=1).tolist()
    replies, reply_logps = [], []
    for row, lp in zip(sampled, logprobs, strict=True):
        end = row.index(eos) + 1 if eos in row else len(row)
        replies.append(row[:end])
        reply_logps.append(lp[:end])
    return replies, reply_logps
