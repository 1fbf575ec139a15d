"""`python -m minirl.bench`: where the time of multi-turn RL goes, measured as ratios in one run.

Multi-turn RL spends most of its time generating. This benchmark times the parts on one model and
task, each against its alternative in the same run (shared machines are noisy: absolute seconds
drift from run to run, ratios much less):

1. rollout cost against the turn budget T, with the KV cache kept across turns and with the
   simple path that re-encodes the whole history every turn (minirl.rollout). Fitting
   ``seconds ~ c * T^p`` over the budgets gives the slope p: 1 is linear, 2 quadratic. The
   default base is barely warm-started, so episodes rarely end early and every T is played out;
2. one batched rollout of E episodes against a naive loop that plays them one at a time;
3. the training forward and backward over one step's episodes, padded to the longest episode
   against length-sorted micro-batches (minirl.trainer.bucketed_logps), with the padding fraction;
   and seconds per training step, minirl's loop against `--backend trl` on the same config;
4. peak memory: the process's peak RSS on the CPU, `torch.cuda.max_memory_allocated` on CUDA;
5. a roofline line: the generation's achieved FLOP/s against this machine's measured matmul
   FLOP/s, and its achieved bytes/s against the measured memory bandwidth. FLOPs and bytes are
   estimated from the shapes of every forward call (2 FLOPs per weight per token, plus
   attention; every weight and the KV cache read once per call).

It prints rich tables and writes OUTPUT/bench.json and OUTPUT/bench_rollout.png.
"""

from __future__ import annotations

import json
import math
import resource
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from transformers import HfArgumentParser
from transformers.hf_argparser import HfArg

import tasks
from minirl.config import ConfigError, parse_ints


@dataclass
class BenchArgs:
    """python -m minirl.bench: rollout, batching, training-step and roofline measurements."""

    model: str = HfArg(
        default="tiny", help="Base model: 'tiny' (see --warm_start_steps), a path or a hub id."
    )
    warm_start_steps: int = HfArg(
        default=4,
        help="For --model tiny: warm-start steps of the base. 4 leaves a near-random policy whose "
        "episodes rarely end before T, so every budget is played in full; 200 is the trained "
        "default base, whose episodes end early and hide the cost of late turns.",
    )
    task: str = HfArg(default="gridnav", help="Environment (see tasks/).")
    quant: str = HfArg(default="nf4", help="Base weights: 'nf4' (4-bit) or 'none' (fp32).")
    turns: str = HfArg(default="2,4,8,16", help="Turn budgets T of the rollout-cost sweep.")
    episodes: int = HfArg(default=64, help="Episodes per rollout (batched, and in the naive loop).")
    naive_budget: int = HfArg(default=8, help="T of the batched-against-naive comparison.")
    max_new_tokens: int = HfArg(default=4, help="Token limit of one assistant reply.")
    tasks_per_step: int = HfArg(default=8, help="Instances per training step (both backends).")
    num_generations: int = HfArg(default=8, help="G: episodes per instance in a training step.")
    per_device_train_batch_size: int = HfArg(
        default=16, help="Episodes per micro-batch of the bucketed training forward."
    )
    train_steps: int = HfArg(
        default=3, help="Timed training steps per backend, after one untimed warm-up (0 = skip)."
    )
    backends: str = HfArg(default="minirl,trl", help="Training backends to time.")
    seed: int = HfArg(default=0, help="Sampling seed; both rollout paths start from it.")
    output: str = HfArg(default="runs/bench", help="Directory for bench.json and the plot.")


# ---- measuring -------------------------------------------------------------------------------


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


def peak_memory_mb() -> float:
    """Peak resident memory of this process so far (CPU), or peak CUDA memory since reset."""
    if torch.cuda.is_available():
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def reset_peak_memory() -> None:
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def machine_peaks(size: int = 1024, repeats: int = 5) -> dict[str, float]:
    """This machine's matmul FLOP/s (fp32, size x size) and memory copy bandwidth, best of N."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    a = torch.randn(size, size, device=device)
    b = torch.randn(size, size, device=device)
    best_mm = math.inf
    for _ in range(repeats):
        _sync()
        start = time.perf_counter()
        a @ b
        _sync()
        best_mm = min(best_mm, time.perf_counter() - start)
    big = torch.empty(64 * 2**20, device=device)  # 256 MiB of fp32, far beyond any cache
    out = torch.empty_like(big)
    best_copy = math.inf
    for _ in range(repeats):
        _sync()
        start = time.perf_counter()
        out.copy_(big)
        _sync()
        best_copy = min(best_copy, time.perf_counter() - start)
    return {
        "matmul_flops_per_s": 2 * size**3 / best_mm,
        "copy_bytes_per_s": 2 * big.numel() * big.element_size() / best_copy,  # read + write
    }


def specs_at(task: str, n: int, budget: int) -> list:
    from minirl.rollout import EpisodeSpec

    return [EpisodeSpec(task, s, budget, group=i) for i, s in enumerate(tasks.EVAL_SEEDS[:n])]


def timed_rollout(model, tokenizer, specs, args: BenchArgs, reuse_cache: bool, shape) -> dict:
    """Play `specs` once from the bench seed; seconds, token counts and the episodes."""
    from minirl.rollout import rollout

    count = ForwardCount()
    hook = count_forwards(model, count, shape)
    torch.manual_seed(args.seed)
    _sync()
    start = time.perf_counter()
    try:
        episodes = rollout(
            model, tokenizer, specs, max_new_tokens=args.max_new_tokens, reuse_cache=reuse_cache
        )
    finally:
        _sync()
        seconds = time.perf_counter() - start
        hook.remove()
    generated = sum(sum(e.loss_mask) for e in episodes)
    return {
        "seconds": seconds,
        "episodes": episodes,
        "turns_played": sum(e.turns_used for e in episodes) / len(episodes),
        "generated_tokens": generated,
        "generated_tokens_per_s": generated / seconds,
        "forward_calls": count.calls,
        "tokens_fed": count.tokens,
        "flops": count.flops,
        "bytes": count.bytes,
    }


def same_episodes(a: list, b: list) -> dict[str, float]:
    """How closely two rollouts from the same seed agree: token ids, and log-probs."""
    identical = sum(x.input_ids == y.input_ids for x, y in zip(a, b, strict=True))
    diffs = [
        abs(p - q)
        for x, y in zip(a, b, strict=True)
        if x.input_ids == y.input_ids
        for p, q in zip(x.logprobs, y.logprobs, strict=True)
    ]
    return {"identical_episodes": identical / len(a), "max_logprob_diff": max(diffs, default=0.0)}


def loglog_slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope p of log y = p log x + c (the exponent of a power law)."""
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    var = sum((x - mx) ** 2 for x in lx)
    if var == 0:
        return float("nan")
    return sum((x - mx) * (y - my) for x, y in zip(lx, ly, strict=True)) / var


# ---- the five measurements -------------------------------------------------------------------


def bench_rollouts(model, tokenizer, args: BenchArgs, shape) -> dict:
    """Cached against simple path at every T; both from the same seed, so they must agree."""
    rows = []
    for budget in parse_ints(args.turns, "turns"):
        specs = specs_at(args.task, args.episodes, budget)
        reset_peak_memory()
        simple = timed_rollout(model, tokenizer, specs, args, False, shape)
        cached = timed_rollout(model, tokenizer, specs, args, True, shape)
        agree = same_episodes(simple.pop("episodes"), cached.pop("episodes"))
        rows.append(
            {
                "T": budget,
                "cached": cached,
                "simple": simple,
                "speedup": simple["seconds"] / cached["seconds"],
                **agree,
                "peak_memory_mb": peak_memory_mb(),
            }
        )
    ts = [float(r["T"]) for r in rows]
    slopes = {}
    if len(ts) > 1:
        for path in ("cached", "simple"):
            slopes[path] = loglog_slope(ts, [r[path]["seconds"] for r in rows])
    return {"rows": rows, "slope": slopes}


def bench_batching(model, tokenizer, args: BenchArgs, shape) -> dict:
    """One batched rollout of all episodes against a loop that plays them one at a time."""
    specs = specs_at(args.task, args.episodes, args.naive_budget)
    batched = timed_rollout(model, tokenizer, specs, args, True, shape)
    batched.pop("episodes")
    start = time.perf_counter()
    for spec in specs:
        one = timed_rollout(model, tokenizer, [spec], args, True, shape)
        one.pop("episodes")
    naive = time.perf_counter() - start
    return {
        "episodes": len(specs),
        "T": args.naive_budget,
        "batched_seconds": batched["seconds"],
        "naive_seconds": naive,
        "speedup": naive / batched["seconds"],
    }


def bench_training_forward(model, tokenizer, args: BenchArgs) -> dict:
    """Forward + backward over one step's episodes: one padded pass against length buckets."""
    import random

    from minirl import grpo
    from minirl.budgets import sample_budgets
    from minirl.config import BudgetArgs
    from minirl.rollout import EpisodeSpec, rollout
    from minirl.trainer import bucketed_logps, to_batch

    mix = BudgetArgs()  # the default BudgetMix range: the lengths a training step really mixes
    budgets = sample_budgets(
        args.tasks_per_step,
        mode="budgetmix",
        budget=mix.budget,
        budget_min=mix.budget_min,
        budget_max=mix.budget_max,
        rng=random.Random(args.seed),
    )
    specs = [
        EpisodeSpec(args.task, tasks.TRAIN_SEEDS[i], budget, i)
        for i, budget in enumerate(budgets)
        for _ in range(args.num_generations)
    ]
    torch.manual_seed(args.seed)
    episodes = rollout(model, tokenizer, specs, max_new_tokens=args.max_new_tokens)
    device = next(model.parameters()).device
    batch = to_batch(episodes, tokenizer.pad_token_id, device)
    advantages = grpo.trajectory_token_advantages(torch.randn(len(episodes)), batch.loss_mask)
    result = {}
    model.train()
    for name, size in (
        ("single_pass", len(episodes)),
        ("bucketed", args.per_device_train_batch_size),
    ):
        reset_peak_memory()
        _sync()
        start = time.perf_counter()
        logps, _, pad = bucketed_logps(model, batch, 1.0, size)
        loss, _ = grpo.policy_loss(logps, batch.old_logps, advantages, batch.loss_mask)
        loss.backward()
        _sync()
        result[name] = {
            "micro_batch": size,
            "seconds": time.perf_counter() - start,
            "padding_fraction": pad,
            "peak_memory_mb": peak_memory_mb(),
        }
        model.zero_grad(set_to_none=True)
    model.eval()
    result["speedup"] = result["single_pass"]["seconds"] / result["bucketed"]["seconds"]
    return result


def bench_train_steps(model_path: str, args: BenchArgs) -> dict:
    """Seconds per step of each backend on the same config (the first step is a warm-up)."""
    from minirl.config import BudgetArgs, Config, GRPOArgs, ModelArgs, TaskArgs

    results: dict[str, dict] = {}
    for backend in [b.strip() for b in args.backends.split(",") if b.strip()]:
        with tempfile.TemporaryDirectory() as tmp:
            cfg = Config(
                ModelArgs(model=model_path, quant=args.quant),
                GRPOArgs(
                    num_generations=args.num_generations,
                    per_device_train_batch_size=args.per_device_train_batch_size,
                    max_steps=args.train_steps + 1,
                    save_steps=10**6,
                    eval_seeds=0,
                    seed=args.seed,
                    output_dir=tmp,
                    backend=backend,
                ),
                BudgetArgs(mode="budgetmix"),
                TaskArgs(task=args.task, tasks_per_step=args.tasks_per_step),
            )
            reset_peak_memory()
            seconds = step_seconds(cfg)
        results[backend] = {
            "seconds_per_step": sum(seconds[1:]) / len(seconds[1:]),
            "steps_timed": len(seconds) - 1,
            "peak_memory_mb": peak_memory_mb(),
        }
    if "minirl" in results and "trl" in results:
        results["trl_over_minirl"] = (
            results["trl"]["seconds_per_step"] / results["minirl"]["seconds_per_step"]
        )
    return results


def step_seconds(cfg) -> list[float]:
    """Wall seconds of every optimizer step of a short run of `cfg` on its backend."""
    if cfg.grpo.backend == "minirl":
        from minirl.trainer import train

        return [m["seconds"] for m in train(cfg, progress=False).metrics]
    from transformers import TrainerCallback

    from minirl.models import load_policy
    from minirl.trl_backend import build_trainer

    class StepTimer(TrainerCallback):
        """Generation and update both happen between on_step_begin and on_step_end."""

        def __init__(self) -> None:
            self.seconds: list[float] = []

        def on_step_begin(self, *args: object, **kwargs: object) -> None:
            self.start = time.perf_counter()

        def on_step_end(self, *args: object, **kwargs: object) -> None:
            _sync()
            self.seconds.append(time.perf_counter() - self.start)

    torch.manual_seed(cfg.grpo.seed)
    model, tokenizer = load_policy(cfg.model.model, cfg.model.quant, task=cfg.task.task)
    trainer = build_trainer(cfg, model, tokenizer, cfg.grpo.output_dir, progress=False)
    timer = StepTimer()
    trainer.add_callback(timer)
    trainer.train()
    return timer.seconds


def roofline(rollouts: dict, peaks: dict[str, float]) -> dict:
    """Achieved generation FLOP/s and bytes/s (cached path, largest T) against the peaks."""
    row = rollouts["rows"][-1]["cached"]
    flops_per_s = row["flops"] / row["seconds"]
    bytes_per_s = row["bytes"] / row["seconds"]
    return {
        "T": rollouts["rows"][-1]["T"],
        "achieved_flops_per_s": flops_per_s,
        "achieved_bytes_per_s": bytes_per_s,
        **peaks,
        "flops_fraction": flops_per_s / peaks["matmul_flops_per_s"],
        "bandwidth_fraction": bytes_per_s / peaks["copy_bytes_per_s"],
    }


# ---- running and reporting -------------------------------------------------------------------


def load_bench_model(args: BenchArgs):
    """The policy to measure: base (4-bit or not) + LoRA, exactly as training loads it."""
    from minirl.models import load_policy

    path = args.model
    if args.model == "tiny":
        from minirl.tiny import TinyRecipe, ensure_tiny

        recipe = TinyRecipe.for_task(args.task)
        recipe = TinyRecipe(**{**asdict(recipe), "max_steps": args.warm_start_steps})
        path = str(ensure_tiny(recipe, progress=False).path)
    model, tokenizer = load_policy(path, args.quant, task=args.task)
    return path, model, tokenizer


def validate_bench(args: BenchArgs) -> None:
    if args.task not in tasks.NAMES:
        raise ConfigError(f"--task {args.task!r}: valid tasks are {', '.join(tasks.NAMES)}")
    parse_ints(args.turns, "turns")
    for name in ("episodes", "naive_budget", "max_new_tokens", "tasks_per_step"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name} must be >= 1, got {getattr(args, name)}")
    if args.num_generations < 2:
        raise ConfigError(f"--num_generations must be >= 2, got {args.num_generations}")
    if args.warm_start_steps < 1 or args.train_steps < 0:
        raise ConfigError("need --warm_start_steps >= 1 and --train_steps >= 0")
    for backend in [b.strip() for b in args.backends.split(",") if b.strip()]:
        if backend not in ("minirl", "trl"):
            raise ConfigError(f"--backends {args.backends!r}: valid backends are minirl, trl")


def run_bench(args: BenchArgs, progress: bool = True) -> dict:
    """All five measurements; returns what bench.json holds."""
    from minirl.progress import track

    validate_bench(args)
    torch.set_grad_enabled(True)
    path, model, tokenizer = load_bench_model(args)
    shape = model_shape(model)
    # One small untimed rollout first: the first generate pays one-off setup costs.
    timed_rollout(model, tokenizer, specs_at(args.task, 2, 2), args, True, shape)
    parts = ["machine", "rollouts", "batching", "training_forward", "train_steps"]
    results: dict = {"args": asdict(args), "device": _device_name(), "model_path": path}
    for part in track(parts, "bench", enabled=progress):
        if part == "machine":
            results["machine"] = machine_peaks()
        elif part == "rollouts":
            results["rollouts"] = bench_rollouts(model, tokenizer, args, shape)
        elif part == "batching":
            results["batching"] = bench_batching(model, tokenizer, args, shape)
        elif part == "training_forward":
            results["training_forward"] = bench_training_forward(model, tokenizer, args)
        elif args.train_steps > 0:
            results["train_steps"] = bench_train_steps(path, args)
    results["roofline"] = roofline(results["rollouts"], results["machine"])
    results["peak_memory_mb"] = peak_memory_mb()
    return results


def _device_name() -> str:
    if torch.cuda.is_available():
        return torch.cuda.get_device_name()
    return f"cpu ({torch.get_num_threads()} threads)"


def print_report(results: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 120)
    r = results["rollouts"]
    table = Table(title=f"Rollout cost against T ({results['args']['episodes']} episodes)")
    for col in (
        "T",
        "turns played",
        "simple s",
        "cached s",
        "speedup",
        "simple tok fed",
        "cached tok fed",
        "cached gen tok/s",
        "same tokens",
    ):
        table.add_column(col, justify="right")
    for row in r["rows"]:
        s, c = row["simple"], row["cached"]
        table.add_row(
            str(row["T"]),
            f"{c['turns_played']:.1f}",
            f"{s['seconds']:.2f}",
            f"{c['seconds']:.2f}",
            f"{row['speedup']:.2f}x",
            f"{s['tokens_fed']:,}",
            f"{c['tokens_fed']:,}",
            f"{c['generated_tokens_per_s']:.0f}",
            f"{row['identical_episodes']:.0%}",
        )
    console.print(table)
    if r["slope"]:
        console.print(
            f"slope of log(seconds) on log(T): cached {r['slope']['cached']:.2f}, "
            f"simple {r['slope']['simple']:.2f} (1 = linear, 2 = quadratic)"
        )
    b = results["batching"]
    console.print(
        f"batched vs naive, {b['episodes']} episodes at T={b['T']}: {b['batched_seconds']:.2f} s "
        f"vs {b['naive_seconds']:.2f} s ({b['speedup']:.1f}x)"
    )
    f = results["training_forward"]
    console.print(
        "training forward+backward, one step: single pass "
        f"{f['single_pass']['seconds']:.2f} s at {f['single_pass']['padding_fraction']:.0%} "
        f"padding; micro-batches of {f['bucketed']['micro_batch']} by length "
        f"{f['bucketed']['seconds']:.2f} s at {f['bucketed']['padding_fraction']:.0%} padding "
        f"({f['speedup']:.2f}x)"
    )
    if "train_steps" in results:
        t = results["train_steps"]
        line = ", ".join(
            f"{k} {v['seconds_per_step']:.2f} s/step" for k, v in t.items() if isinstance(v, dict)
        )
        ratio = t.get("trl_over_minirl")
        console.print(
            f"training step: {line}" + (f" (trl / minirl = {ratio:.2f})" if ratio else "")
        )
    rf = results["roofline"]
    console.print(
        f"roofline (cached rollout, T={rf['T']}, estimated work): "
        f"{rf['achieved_flops_per_s'] / 1e9:.2f} GFLOP/s of {rf['matmul_flops_per_s'] / 1e9:.1f} "
        f"measured matmul peak ({rf['flops_fraction']:.1%}); "
        f"{rf['achieved_bytes_per_s'] / 1e9:.2f} GB/s of {rf['copy_bytes_per_s'] / 1e9:.1f} "
        f"measured copy bandwidth ({rf['bandwidth_fraction']:.1%})"
    )
    console.print(f"peak memory ({results['device']}): {results['peak_memory_mb']:.0f} MiB")


def plot_rollouts(results: dict, path: Path) -> Path:
    """Rollout seconds against T on log-log axes: the slope is the cost's exponent."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = results["rollouts"]["rows"]
    ts = [r["T"] for r in rows]
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for name, style in (("simple", "o--"), ("cached", "s-")):
        label = f"{name} path"
        slope = results["rollouts"]["slope"].get(name)
        if slope is not None:
            label += f" (slope {slope:.2f})"
        ax.plot(ts, [r[name]["seconds"] for r in rows], style, label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(ts, [str(t) for t in ts])
    ax.set_xlabel("turn budget T")
    ax.set_ylabel("rollout wall time (s)")
    ax.set_title(f"Rollout cost, {results['args']['episodes']} episodes ({results['device']})")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = HfArgumentParser(BenchArgs, description=__doc__.split("\n")[0], allow_abbrev=False)
    (args,) = parser.parse_args_into_dataclasses(args=list(sys.argv[1:] if argv is None else argv))
    try:
        validate_bench(args)
        results = run_bench(args)
    except ConfigError as err:
        print(f"minirl.bench: error: {err}", file=sys.stderr)
        return 2
    print_report(results)
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_text(json.dumps(results, indent=1))
    plot_rollouts(results, out / "bench_rollout.png")
    print(f"wrote {out / 'bench.json'} and {out / 'bench_rollout.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
