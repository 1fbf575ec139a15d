"""The benchmark's terminal report and its plot (minirl.tools.bench measures, this shows)."""

from __future__ import annotations

import sys
from pathlib import Path


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
        "dense s",
        "cached/simple",
        "dense/cached",
        "simple tok fed",
        "cached tok fed",
        "dense gen tok/s",
        "same tokens",
    ):
        table.add_column(col, justify="right")
    for row in r["rows"]:
        s, c, d = row["simple"], row["cached"], row["dense"]
        table.add_row(
            str(row["T"]),
            f"{c['turns_played']:.1f}",
            f"{s['seconds']:.2f}",
            f"{c['seconds']:.2f}",
            f"{d['seconds']:.2f}",
            f"{row['speedup']:.2f}x",
            f"{row['engine_speedup']:.2f}x",
            f"{s['tokens_fed']:,}",
            f"{c['tokens_fed']:,}",
            f"{d['generated_tokens_per_s']:.0f}",
            f"{row['identical_episodes']:.0%} / {row['engine']['identical_episodes']:.0%}",
        )
    console.print(table)
    console.print(
        "simple and cached are transformers' generate without and with the KV cache across "
        "turns; dense is the sampling engine (minirl.engine); 'same tokens': cached vs simple / "
        "dense vs cached, from the same seed"
    )
    if r["slope"]:
        console.print(
            "slope of log(seconds) on log(T): "
            + ", ".join(f"{path} {value:.2f}" for path, value in r["slope"].items())
            + " (1 = linear, 2 = quadratic)"
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
    if "engine" in results:
        print_engine(console, results["engine"])
    if "memory" in results:
        print_memory(console, results["memory"])
    for key in ("roofline", "roofline_dense"):
        rf = results[key]
        console.print(
            f"roofline ({rf['path']} rollout, T={rf['T']}, estimated work): "
            f"{rf['achieved_flops_per_s'] / 1e9:.2f} GFLOP/s of "
            f"{rf['matmul_flops_per_s'] / 1e9:.1f} measured fp32 matmul peak "
            f"({rf['flops_fraction']:.1%}); {rf['achieved_bytes_per_s'] / 1e9:.2f} GB/s of "
            f"{rf['copy_bytes_per_s'] / 1e9:.1f} measured copy bandwidth "
            f"({rf['bandwidth_fraction']:.1%})"
        )
    console.print(f"peak memory ({results['device']}): {results['peak_memory_mb']:.0f} MiB")


def print_engine(console, engine: dict) -> None:  # noqa: ANN001
    from rich.table import Table

    table = Table(title="Training steps: dense sampling engine against generate (medians)")
    for col in (
        "model",
        "generate s/step",
        "dense s/step",
        "step speedup",
        "generate rollout s",
        "dense rollout s",
        "rollout speedup",
        "dense gen tok/s",
        "peak MiB gen / dense",
    ):
        table.add_column(col, justify="right")
    for row in engine["rows"]:
        g, d = row["generate"], row["dense"]
        table.add_row(
            row["model"],
            f"{g['seconds_per_step']:.2f}",
            f"{d['seconds_per_step']:.2f}",
            f"{row['step_speedup']:.2f}x",
            f"{g['rollout_seconds']:.2f}",
            f"{d['rollout_seconds']:.2f}",
            f"{row['rollout_speedup']:.2f}x",
            f"{d['generated_tokens_per_s']:.0f}",
            f"{g['peak_memory_mb']:,.0f} / {d['peak_memory_mb']:,.0f}",
        )
    console.print(table)


def print_memory(console, memory: dict) -> None:  # noqa: ANN001
    from rich.table import Table

    backends = list(memory["growth"])
    title = f"Peak memory of one training step ({memory['model']}, {memory['measure']})"
    table = Table(title=title)
    table.add_column("episodes per step", justify="right")
    for backend in backends:
        table.add_column(f"{backend} MiB", justify="right")
        table.add_column(f"{backend} s", justify="right")
    if len(backends) == 2:
        table.add_column(f"{backends[0]} / {backends[1]}", justify="right")
    by = {(r["backend"], r["episodes"]): r for r in memory["rows"]}
    for episodes in sorted({r["episodes"] for r in memory["rows"]}):
        cells = [str(episodes)]
        for backend in backends:
            row = by[backend, episodes]
            cells += [f"{row['peak_mb']:,.0f}", f"{row['seconds']:.0f}"]
        if len(backends) == 2:
            a, b = (by[x, episodes]["peak_mb"] for x in backends)
            cells.append(f"{a / b:.2f}")
        table.add_row(*cells)
    console.print(table)
    growth = ", ".join(f"{k} {v:.2f}x" for k, v in memory["growth"].items())
    console.print(
        f"peak at the most episodes / peak at the fewest: {growth} (1.00 = flat); "
        f"{memory['rows'][0]['loaded_mb']:,.0f} MiB after loading the model; "
        f"flags: {memory['flags']}"
    )


def plot_rollouts(results: dict, path: Path) -> Path:
    """Rollout seconds against T on log-log axes: the slope is the cost's exponent."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = results["rollouts"]["rows"]
    ts = [r["T"] for r in rows]
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for name, style in (("simple", "o--"), ("cached", "s-"), ("dense", "^-")):
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
