"""What the benchmark measures with: work counted per forward pass, peak memory, machine peaks.

A rollout's speed means little alone; against what the machine can do it tells where the time
goes. `count_forwards` hooks the model (`count_engine_forwards` the dense sampling engine) and
adds, for every forward call, the positions fed, the
FLOPs (2 per weight per token for the linear layers, plus 4 * hidden per query-key pair for
attention) and the bytes read (every weight once per call, and the whole fp32 KV cache).
`machine_peaks` measures this machine's fp32 matmul FLOP/s and memory-copy bandwidth, and
`roofline` puts the two side by side: a small fraction of both means the run is bound by per-call
overhead, not by arithmetic or memory. Peak memory is the process's peak RSS on the CPU and
`torch.cuda.max_memory_allocated` on CUDA.
"""

from __future__ import annotations

import contextlib
import math
import resource
import time
from collections.abc import Iterator
from dataclasses import dataclass

import torch


@dataclass
class ForwardCount:
    """Shapes of every forward call during a timed region, turned into token/FLOP/byte counts."""

    calls: int = 0
    tokens: int = 0  # positions run through the model, padding included
    flops: float = 0.0
    bytes: float = 0.0


def model_shape(model: torch.nn.Module) -> dict[str, float]:
    """Weights per token (non-embedding, plus the output head) and the stored weight bytes."""
    config = model.config
    # bitsandbytes' Linear4bit is an nn.Linear; peft's LoRA wrapper around it is not, so each
    # base weight counts once, and the (tiny) adapter matrices are left out.
    linear = sum(
        m.in_features * m.out_features
        for name, m in model.named_modules()
        if isinstance(m, torch.nn.Linear) and "lora_" not in name
    )
    stored = sum(p.numel() * p.element_size() for p in model.parameters())
    return {
        "linear_weights": float(linear),
        "weight_bytes": float(stored),
        "layers": float(config.num_hidden_layers),
        "hidden": float(config.hidden_size),
        "kv_width": float(
            config.hidden_size
            * getattr(config, "num_key_value_heads", config.num_attention_heads)
            / config.num_attention_heads
        ),
    }


def count_forwards(model: torch.nn.Module, count: ForwardCount, shape: dict[str, float]):
    """A forward pre-hook on the innermost model that adds each call's work to `count`."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model

    def hook(_module: torch.nn.Module, _args: tuple, kwargs: dict) -> None:
        batch, new = kwargs["input_ids"].shape
        # Cached + new positions each query sees. generate drops an all-ones mask, so then
        # the cache tells how many positions came before.
        mask = kwargs.get("attention_mask")
        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        past = cache.get_seq_length() if cache is not None else 0
        context = mask.shape[1] if mask is not None else past + new
        count.calls += 1
        count.tokens += batch * new
        # 2 FLOPs per weight per token, plus QK^T and AV: 4 * hidden per (query, key) pair.
        count.flops += 2 * shape["linear_weights"] * batch * new
        count.flops += 4 * shape["layers"] * shape["hidden"] * batch * new * context
        # Every weight read once per call, and the whole KV cache (fp32 K and V) per layer.
        count.bytes += shape["weight_bytes"]
        count.bytes += 2 * shape["layers"] * shape["kv_width"] * batch * context * 4

    return base.register_forward_pre_hook(hook, with_kwargs=True)


@contextlib.contextmanager
def count_engine_forwards(count: ForwardCount, shape: dict[str, float]) -> Iterator[None]:
    """The same counts for the dense sampling engine (minirl.engine), whose forward is a plain
    function: it is wrapped for the duration (the engine looks it up on every call)."""
    from minirl import engine

    original = engine.forward

    def counted(decoder, cache, ids, widths):  # noqa: ANN001, ANN202
        batch, new = ids.shape
        context = max(cache.host_lengths) + new  # the slots each call's attention reads
        count.calls += 1
        count.tokens += batch * new
        count.flops += 2 * shape["linear_weights"] * batch * new
        count.flops += 4 * shape["layers"] * shape["hidden"] * batch * new * context
        itemsize = decoder.layers[0].qkv.weight.element_size()
        count.bytes += shape["linear_weights"] * itemsize  # the dense copy's weights
        count.bytes += 2 * shape["layers"] * shape["kv_width"] * batch * context * 4
        return original(decoder, cache, ids, widths)

    engine.forward = counted
    try:
        yield
    finally:
        engine.forward = original


def peak_memory_mb() -> float:
    """Peak memory since the last `reset_peak_memory`: CUDA's allocated peak on a GPU; on a CPU the
    resident set's high-water mark (Linux's VmHWM, else the whole process's `ru_maxrss`)."""
    if torch.cuda.is_available():
        return torch.cuda.max_memory_allocated() / 2**20
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def reset_peak_memory() -> None:
    """Start a new peak. On a CPU, writing 5 to /proc/self/clear_refs resets Linux's VmHWM, so a
    step's peak is not hidden under the larger peak of loading the model (where the kernel does
    not allow it, the peak stays the process's)."""
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
        return
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def machine_peaks(size: int = 1024, repeats: int = 5) -> dict[str, float]:
    """This machine's matmul FLOP/s (fp32, size x size) and memory copy bandwidth, best of N."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    a = torch.randn(size, size, device=device)
    b = torch.randn(size, size, device=device)
    best_mm = math.inf
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        a @ b
        sync()
        best_mm = min(best_mm, time.perf_counter() - start)
    big = torch.empty(64 * 2**20, device=device)  # 256 MiB of fp32, far beyond any cache
    out = torch.empty_like(big)
    best_copy = math.inf
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        out.copy_(big)
        sync()
        best_copy = min(best_copy, time.perf_counter() - start)
    return {
        "matmul_flops_per_s": 2 * size**3 / best_mm,
        "copy_bytes_per_s": 2 * big.numel() * big.element_size() / best_copy,  # read + write
    }


def loglog_slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope p of log y = p log x + c (the exponent of a power law)."""
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    var = sum((x - mx) ** 2 for x in lx)
    if var == 0:
        return float("nan")
    return sum((x - mx) * (y - my) for x, y in zip(lx, ly, strict=True)) / var


def roofline(rollouts: dict, peaks: dict[str, float], path: str = "cached") -> dict:
    """Achieved generation FLOP/s and bytes/s (one rollout path, largest T) against the peaks."""
    row = rollouts["rows"][-1][path]
    flops_per_s = row["flops"] / row["seconds"]
    bytes_per_s = row["bytes"] / row["seconds"]
    return {
        "T": rollouts["rows"][-1]["T"],
        "path": path,
        "achieved_flops_per_s": flops_per_s,
        "achieved_bytes_per_s": bytes_per_s,
        **peaks,
        "flops_fraction": flops_per_s / peaks["matmul_flops_per_s"],
        "bandwidth_fraction": bytes_per_s / peaks["copy_bytes_per_s"],
    }
