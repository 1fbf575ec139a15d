"""`python -m minirl.tools.bench`: where the time of multi-turn RL goes, as ratios in one run.

Multi-turn RL spends most of its time generating. This benchmark times the parts on one model and
task, each against its alternative in the same run (shared machines are noisy: absolute seconds
drift from run to run, ratios much less):

1. rollout cost against the turn budget T, with the KV cache kept across turns and with the
   simple path that re-encodes the whole history every turn (minirl.rollout). Fitting
   ``seconds ~ c * T^p`` over the budgets gives the slope p: 1 is linear, 2 quadratic. The
   default base is barely warm-started, so episodes rarely end early and every T is played out;
2. one batched rollout of E episodes against a naive loop that plays them one at a time;
3. the training forward and backward over one step's episodes, padded to the longest episode
   against length-sorted micro-batches with a backward each (minirl.update), with the padding
   fraction; and seconds per training step, minirl's loop against `--backend trl` on the same
   config;
4. memory: the peak of one training step against episodes per step (8, 16, 32, 64 by default,
   with smollm2), each backend, every step in a fresh process (minirl.tools.step_memory): the
   process's peak RSS on the CPU, `torch.cuda.max_memory_allocated` on CUDA. With gradient
   accumulation it should not grow with the episodes;
5. a roofline line: the generation's achieved FLOP/s against this machine's measured matmul
   FLOP/s, and its achieved bytes/s against the measured memory bandwidth. FLOPs and bytes are
   estimated from the shapes of every forward call (2 FLOPs per weight per token, plus
   attention; every weight and the KV cache read once per call).

It prints rich tables and writes OUTPUT/bench.json and OUTPUT/bench_rollout.png
(minirl.tools.bench_report); the counting and the machine's peaks are in minirl.tools.measure.
Flags: `BenchArgs` in minirl.config.
"""

from __future__ import annotations

import json
import random
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import torch

import tasks
from minirl.chat import resolve_task_text
from minirl.config import MAX_TURNS, TURNS, BenchArgs, memory_episodes, validate_bench
from minirl.episode import EpisodeSpec
from minirl.infra.cli import ArgParser, run_cli
from minirl.infra.errors import ConfigError, MinirlError
from minirl.infra.validation import parse_ints
from minirl.rundir.checkpoint import check_writable
from minirl.tools.bench_report import plot_rollouts, print_report
from minirl.tools.measure import (
    ForwardCount,
    count_engine_forwards,
    count_forwards,
    loglog_slope,
    machine_peaks,
    model_shape,
    peak_memory_mb,
    reset_peak_memory,
    roofline,
    sync,
)


def specs_at(task: str, n: int, budget: int) -> list[EpisodeSpec]:
    return [EpisodeSpec(task, s, budget, group=i) for i, s in enumerate(tasks.EVAL_SEEDS[:n])]


def timed_rollout(model, tokenizer, specs, args: BenchArgs, path: str, shape) -> dict:
    """Play `specs` once from the bench seed on one rollout path; seconds, counts, episodes.

    `path` is "simple" (generate, the history re-encoded every turn), "cached" (generate with the
    KV cache kept across turns) or "dense" (the sampling engine, minirl.engine).
    """
    from minirl.engine import dense_copy
    from minirl.rollout import rollout

    count = ForwardCount()
    torch.manual_seed(args.seed)
    sync()
    start = time.perf_counter()  # the dense path's time includes making its copy
    if path == "dense":
        counting = count_engine_forwards(count, shape)
        policy = dense_copy(model)
    else:
        counting = count_forwards(model, count, shape)  # a hook handle: removed on exit
        policy = model
    with counting:
        episodes = rollout(
            policy,
            tokenizer,
            specs,
            max_new_tokens=args.max_new_tokens,
            task_text=resolve_task_text("auto", tokenizer),
            engine="dense" if path == "dense" else "generate",
            reuse_cache=path != "simple",
        )
        sync()
        seconds = time.perf_counter() - start
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


# ---- the five measurements -------------------------------------------------------------------


def bench_rollouts(model, tokenizer, args: BenchArgs, shape) -> dict:
    """The three rollout paths at every T, from the same seed, so they must agree."""
    rows = []
    for budget in parse_ints(args.turns, "turns", MAX_TURNS, TURNS.why):
        specs = specs_at(args.task, args.episodes, budget)
        reset_peak_memory()
        played = {path: timed_rollout(model, tokenizer, specs, args, path, shape) for path in PATHS}
        episodes = {path: played[path].pop("episodes") for path in PATHS}
        rows.append(
            {
                "T": budget,
                **played,
                "speedup": played["simple"]["seconds"] / played["cached"]["seconds"],
                "engine_speedup": played["cached"]["seconds"] / played["dense"]["seconds"],
                **same_episodes(episodes["simple"], episodes["cached"]),
                "engine": same_episodes(episodes["cached"], episodes["dense"]),
                "peak_memory_mb": peak_memory_mb(),
            }
        )
    ts = [float(r["T"]) for r in rows]
    slopes = {}
    if len(ts) > 1:
        for path in PATHS:
            slopes[path] = loglog_slope(ts, [r[path]["seconds"] for r in rows])
    return {"rows": rows, "slope": slopes}


PATHS = ("simple", "cached", "dense")


def bench_batching(model, tokenizer, args: BenchArgs, shape) -> dict:
    """One batched rollout of all episodes against a loop that plays them one at a time."""
    specs = specs_at(args.task, args.episodes, args.naive_budget)
    batched = timed_rollout(model, tokenizer, specs, args, "cached", shape)
    batched.pop("episodes")
    start = time.perf_counter()
    for spec in specs:
        one = timed_rollout(model, tokenizer, [spec], args, "cached", shape)
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
    from minirl import grpo
    from minirl.budgets import sample_budgets
    from minirl.config import BudgetArgs
    from minirl.logprobs import to_batch
    from minirl.rollout import rollout
    from minirl.update import accumulate_gradients

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
    text = resolve_task_text("auto", tokenizer)
    episodes = rollout(model, tokenizer, specs, max_new_tokens=args.max_new_tokens, task_text=text)
    device = next(model.parameters()).device
    batch = to_batch(episodes, tokenizer.pad_token_id, device)
    noise = torch.randn(len(episodes), device=device)  # stand-in advantages: any values serve
    advantages = grpo.trajectory_token_advantages(noise, batch.loss_mask)
    result = {}
    model.train()
    for name, size in (
        ("single_pass", len(episodes)),
        ("bucketed", args.per_device_train_batch_size),
    ):
        reset_peak_memory()
        sync()
        start = time.perf_counter()
        grad = accumulate_gradients(
            model, batch, advantages, temperature=1.0, micro_batch_size=size
        )
        sync()
        result[name] = {
            "micro_batch": size,
            "seconds": time.perf_counter() - start,
            "padding_fraction": grad.padding_fraction,
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
    for backend in backends_of(args):
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
            sync()
            self.seconds.append(time.perf_counter() - self.start)

    torch.manual_seed(cfg.grpo.seed)
    model, tokenizer = load_policy(
        cfg.model.model, cfg.model.quant, task=cfg.task.task, dtype=cfg.model.dtype
    )
    trainer = build_trainer(cfg, model, tokenizer, cfg.grpo.output_dir, progress=False)
    timer = StepTimer()
    trainer.add_callback(timer)
    trainer.train()
    return timer.seconds


def engine_config(name: str, args: BenchArgs):
    """The training step the engine part times for `name`: the default tiny step (train.py's
    defaults on the task), or a small chat-model step (guess, T=4, 2 x 4 episodes)."""
    from minirl.config import BudgetArgs, Config, GRPOArgs, ModelArgs, TaskArgs

    if name == "tiny":
        return Config(ModelArgs(), GRPOArgs(eval_seeds=0), BudgetArgs(), TaskArgs(task=args.task))
    return Config(
        ModelArgs(model=name),
        GRPOArgs(num_generations=4, eval_seeds=0, learning_rate=2e-4),
        BudgetArgs(mode="fixed", budget=4),
        TaskArgs(task="guess", tasks_per_step=2, max_new_tokens=6),
    )


def bench_engine(args: BenchArgs) -> dict:
    """Training steps with the dense sampling engine against the generate path, alternated.

    One warm-up step on each path, then `engine_steps` rounds of one step on each, so machine
    noise falls on both; medians of the step's and the rollout's wall seconds, and the rollout's
    generated tokens per second.
    """
    from minirl.models import load_policy, trainable_parameters
    from minirl.trainer import train_step

    rows = []
    for name in [m.strip() for m in args.engine_models.split(",") if m.strip()]:
        cfg = engine_config(name, args)
        model, tokenizer = load_policy(
            cfg.model.model, cfg.model.quant, task=cfg.task.task, gradient_checkpointing=None
        )
        optimizer = torch.optim.AdamW(trainable_parameters(model), lr=cfg.grpo.learning_rate)
        rng = random.Random(args.seed)
        timed: dict[str, list[dict]] = {"generate": [], "dense": []}
        for round_ in range(args.engine_steps + 1):
            for engine in timed:
                cfg.grpo.rollout_engine = engine
                reset_peak_memory()
                m = train_step(model, tokenizer, optimizer, cfg, rng, round_)
                if round_:  # the first round warms both paths up
                    m["peak_memory_mb"] = peak_memory_mb()
                    timed[engine].append(m)
        row: dict = {"model": name, "steps_per_path": args.engine_steps}
        for engine, steps in timed.items():
            row[engine] = {
                "seconds_per_step": median([m["seconds"] for m in steps]),
                "rollout_seconds": median([m["rollout_seconds"] for m in steps]),
                "generated_tokens_per_s": median(
                    [m["generated_tokens"] / m["rollout_seconds"] for m in steps]
                ),
                "peak_memory_mb": max(m["peak_memory_mb"] for m in steps),
            }
        row["step_speedup"] = row["generate"]["seconds_per_step"] / row["dense"]["seconds_per_step"]
        row["rollout_speedup"] = (
            row["generate"]["rollout_seconds"] / row["dense"]["rollout_seconds"]
        )
        rows.append(row)
        del model, optimizer
    return {"rows": rows}


def median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def memory_argv(args: BenchArgs, episodes: int, backend: str) -> list[str]:
    """train.py flags of one memory-part step; a ConfigError if they do not make one."""
    import contextlib
    import io
    import shlex

    from minirl.tools.step_memory import parse_config

    try:
        words = shlex.split(args.memory_flags)
    except ValueError as err:  # an unclosed quote: shlex cannot split it into flags
        raise ConfigError(f"--memory_flags {args.memory_flags!r}: {err}") from err
    flags = [*words, "--model", args.memory_model, "--backend", backend]
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):  # argparse's line becomes part of this one
            generations = parse_config(flags).grpo.num_generations
    except SystemExit as err:
        why = said.getvalue().strip().split("error: ", 1)[-1] or "not train.py flags"
        raise ConfigError(f"--memory_flags {args.memory_flags!r}: {why}") from err
    if episodes % generations:
        raise ConfigError(
            f"--memory_episodes {episodes} is not a multiple of --num_generations {generations}"
        )
    argv = [*flags, "--tasks_per_step", str(episodes // generations)]
    parse_config(argv)  # e.g. --backend trl's micro-batch must divide the episodes
    return argv


def bench_memory(args: BenchArgs) -> dict:
    """Peak memory of one training step against episodes per step, for each backend.

    Every step runs in a fresh process (minirl.tools.step_memory), since a process's peak RSS
    never goes down. `growth` is each backend's peak at the most episodes over its peak at the
    fewest: 1.0 means the step's memory does not depend on the episodes per step.
    """
    import subprocess

    rows = []
    for backend in backends_of(args):
        for episodes in memory_episodes(args):
            argv = memory_argv(args, episodes, backend)
            done = subprocess.run(
                [sys.executable, "-m", "minirl.tools.step_memory", *argv],
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode != 0:
                last = (done.stderr.strip().splitlines() or ["no output"])[-1]
                raise MinirlError(f"memory step ({backend}, {episodes} episodes) failed: {last}")
            rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    growth = {}
    for backend in backends_of(args):
        peaks = [r["peak_mb"] for r in rows if r["backend"] == backend]
        growth[backend] = peaks[-1] / peaks[0]
    return {
        "model": args.memory_model,
        "flags": args.memory_flags,
        "measure": "cuda max_memory_allocated" if torch.cuda.is_available() else "peak RSS",
        "rows": rows,
        "growth": growth,
    }


def backends_of(args: BenchArgs) -> list[str]:
    return [b.strip() for b in args.backends.split(",") if b.strip()]


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


def run_bench(args: BenchArgs, progress: bool = True) -> dict:
    """All five measurements; returns what bench.json holds."""
    from minirl.infra.progress import progress_bar

    validate_bench(args)
    torch.set_grad_enabled(True)
    path, model, tokenizer = load_bench_model(args)
    shape = model_shape(model)
    # One small untimed rollout per path first: the first call pays one-off setup costs.
    for rollout_path in PATHS:
        timed_rollout(model, tokenizer, specs_at(args.task, 2, 2), args, rollout_path, shape)
    results: dict = {"args": asdict(args), "device": _device_name(), "model_path": path}
    measurements = {
        "machine": lambda: machine_peaks(),
        "rollouts": lambda: bench_rollouts(model, tokenizer, args, shape),
        "batching": lambda: bench_batching(model, tokenizer, args, shape),
        "training_forward": lambda: bench_training_forward(model, tokenizer, args),
    }
    if args.train_steps > 0:
        measurements["train_steps"] = lambda: bench_train_steps(path, args)
    if args.engine_steps > 0 and args.engine_models.strip():
        measurements["engine"] = lambda: bench_engine(args)
    if args.memory_episodes.strip():
        measurements["memory"] = lambda: bench_memory(args)
    with progress_bar(disable=not progress) as bar:
        for part in bar.track(list(measurements), description="bench"):
            results[part] = measurements[part]()
    results["roofline"] = roofline(results["rollouts"], results["machine"])
    results["roofline_dense"] = roofline(results["rollouts"], results["machine"], "dense")
    results["peak_memory_mb"] = peak_memory_mb()
    return results


def _device_name() -> str:
    if torch.cuda.is_available():
        return torch.cuda.get_device_name()
    return f"cpu ({torch.get_num_threads()} threads)"


def main(argv: list[str] | None = None) -> int:
    parser = ArgParser(
        BenchArgs,
        prog="minirl.tools.bench",
        description=__doc__.split("\n")[0],
        allow_abbrev=False,
    )
    (args,) = parser.parse_args_into_dataclasses(args=list(sys.argv[1:] if argv is None else argv))
    kept = f"nothing was written to {args.output}"
    return run_cli("minirl.tools.bench", lambda: bench(args), lambda: kept)


def bench(args: BenchArgs) -> int:
    validate_bench(args)
    check_writable(args.output, "--output")
    for episodes in memory_episodes(args):  # bad memory flags fail now, not after an hour
        for backend in backends_of(args):
            memory_argv(args, episodes, backend)
    results = run_bench(args)
    print_report(results)
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_text(json.dumps(results, indent=1))
    plot_rollouts(results, out / "bench_rollout.png")
    print(f"wrote {out / 'bench.json'} and {out / 'bench_rollout.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
