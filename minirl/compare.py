"""Compare checkpoints: Pass@(K,T) grids and behaviour analyses on identical held-out instances.

This is the engine behind `evaluate.py` (and the study). For each checkpoint it
1. loads the base model with that checkpoint's LoRA adapter (`base` = no adapter),
2. plays n episodes per instance and budget with minirl.sweep, from the same sampling seed,
3. turns the success counts into the K x T grid (minirl.passkt),
4. runs the analyses (minirl.analysis) on the episodes at the largest T, and single-step
   quality on one set of states sampled once from the base policy.
It then writes results.json (grid + analyses + metadata), results.jsonl (the grid as a flat
table, `datasets.load_dataset("json", data_files=...)`), and the PNGs of minirl.plots.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import torch

import tasks
from minirl.analysis import (
    decision_quality,
    error_recovery,
    sample_states,
    success_by_horizon,
    turn_efficiency,
)
from minirl.checkpoint import checkpoints as run_checkpoints
from minirl.config import ConfigError, EvalArgs, validate_eval
from minirl.models import load_policy
from minirl.passkt import pass_at_kt
from minirl.progress import make_progress
from minirl.sweep import episodes_to_play, success_counts, sweep

BASE = "base"


def minirl_version() -> str:
    try:
        return version("minirl")
    except PackageNotFoundError:
        return "unknown"


def resolve_checkpoint(name: str, task: str, model: str) -> Path | None:
    """`base` -> None; a run directory -> its newest checkpoint; an adapter directory -> itself.

    A checkpoint written by minirl's trainer records its config; evaluating it on another task
    or base model would silently measure nonsense (the tiny base is task-specific): an error.
    """
    if name == BASE:
        return None
    path = Path(name).expanduser()
    if not path.is_dir():
        raise ConfigError(f"--checkpoints: {name!r} is not 'base' or an existing directory")
    if not (path / "adapter_config.json").is_file():
        found = run_checkpoints(path)
        if not found:
            raise ConfigError(
                f"--checkpoints: {name!r} holds no adapter (adapter_config.json) or checkpoint-*"
            )
        path = found[-1]
    meta = path / "trainer_state.json"
    if meta.is_file():
        config = json.loads(meta.read_text()).get("config", {})
        trained_task = config.get("task", {}).get("task", task)
        trained_model = config.get("model", {}).get("model", model)
        if trained_task != task:
            raise ConfigError(
                f"--checkpoints: {name!r} was trained on {trained_task!r}, not {task!r}"
            )
        if trained_model != model:
            raise ConfigError(
                f"--checkpoints: {name!r} was trained on --model {trained_model!r}, not {model!r}"
            )
    return path


def checkpoint_labels(text: str) -> dict[str, str]:
    """'base,bm=runs/bm,runs/fixed' -> {'base': 'base', 'bm': 'runs/bm', 'fixed': 'runs/fixed'}.

    A `label=path` entry names a checkpoint in tables and plots; otherwise the label is the
    path's last component.
    """
    labels: dict[str, str] = {}
    for item in (c.strip() for c in text.split(",")):
        if not item:
            continue
        label, _, path = item.rpartition("=") if "=" in item else ("", "", item)
        label = label or Path(path.rstrip("/")).name or path
        if label in labels:
            raise ConfigError(
                f"--checkpoints: the label {label!r} is used twice; name them with label=path"
            )
        labels[label] = path
    return labels


def _jsonable(value: object) -> object:
    """Dataclasses to dicts, int keys to strings, NaN to None (strict JSON has no NaN)."""
    if hasattr(value, "__dataclass_fields__"):
        value = asdict(value)  # type: ignore[arg-type]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def _nan_back(value: object) -> object:
    """Inverse of the NaN -> None step, so plots and tables can treat every rate as a float."""
    if isinstance(value, dict):
        return {
            k: (math.nan if k == "rate" and v is None else _nan_back(v)) for k, v in value.items()
        }
    if isinstance(value, list):
        return [_nan_back(v) for v in value]
    return value


def load_results(path: str | Path) -> dict:
    """Read a results.json back, with missing rates as NaN."""
    return _nan_back(json.loads(Path(path).read_text()))  # type: ignore[return-value]


def compare(args: EvalArgs, progress: bool = True) -> dict:
    """Evaluate every checkpoint of `args`; returns the results dict that results.json holds."""
    ks, ts = validate_eval(args)
    labelled = checkpoint_labels(args.checkpoints)
    names = list(labelled)
    paths = {
        name: resolve_checkpoint(spec, args.task, args.model) for name, spec in labelled.items()
    }
    seeds = list(tasks.EVAL_SEEDS[: args.instances])
    t_max = max(ts)
    rollout_kwargs = dict(
        budget_visible=args.budget_visible,
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        batch_size=args.batch_size,
    )
    results: dict = {
        "meta": {
            "task": args.task,
            "model": args.model,
            "quant": args.quant,
            "seeds": seeds,
            "n": args.n,
            "ks": ks,
            "ts": ts,
            "seed": args.seed,
            "budget_visible": args.budget_visible,
            "mode": "visible: each T rolled out separately"
            if args.budget_visible
            else f"hidden: one rollout at T={t_max}, truncated to every T",
            "temperature": args.temperature,
            "max_new_tokens": args.max_new_tokens,
            "analysis_budget": t_max,
            "minirl_version": minirl_version(),
            "device": "cuda" if torch.cuda.is_available() else "cpu",
        },
        "checkpoints": {},
    }
    bar = make_progress() if progress else None
    if bar is not None:
        bar.start()
    try:
        # The fixed states of the single-step analysis: one base episode per instance at T_max,
        # from a seed of their own, whatever checkpoints are compared.
        base_model, tokenizer = load_policy(args.model, args.quant, task=args.task)
        state_episodes = sweep(
            base_model,
            tokenizer,
            args.task,
            [t_max],
            seeds,
            1,
            seed=args.seed + 1,
            **rollout_kwargs,
        )[t_max]
        states = sample_states(state_episodes, args.decision_states, seed=args.seed)
        results["meta"]["decision_states"] = [
            {"seed": s.seed, "turn": len(s.replies) + 1, "replies": s.replies} for s in states
        ]
        del base_model
        total = episodes_to_play(ts, len(seeds), args.n, args.budget_visible)
        for name in names:
            started = time.perf_counter()
            model, tokenizer = load_policy(
                args.model, args.quant, adapter=paths[name], task=args.task
            )
            job = bar.add_task(f"eval {name}", total=total, metrics="") if bar else None

            def advance(done: int, job: object = job) -> None:
                if bar is not None:
                    bar.update(job, completed=min(done, total))

            episodes = sweep(
                model,
                tokenizer,
                args.task,
                ts,
                seeds,
                args.n,
                seed=args.seed,
                on_batch=advance,
                **rollout_kwargs,
            )
            grid = pass_at_kt(
                success_counts(episodes, args.n),
                args.n,
                ks,
                bootstrap=args.bootstrap,
                seed=args.seed,
            )
            decision = decision_quality(
                model,
                tokenizer,
                states,
                samples=args.decision_samples,
                max_new_tokens=args.max_new_tokens,
                temperature=args.temperature,
                seed=args.seed,
                batch_size=args.batch_size,
            )
            at_max = episodes[t_max]
            results["checkpoints"][name] = {
                "path": str(paths[name]) if paths[name] else None,
                "grid": grid.rows(),
                "analysis": _jsonable(
                    {
                        "decision": decision,
                        "recovery": error_recovery(at_max),
                        "horizon": success_by_horizon(at_max),
                        "efficiency": {t: turn_efficiency(episodes[t]) for t in ts},
                        "invalid_rate": sum(not x.valid for e in at_max for x in e.turns)
                        / max(1, sum(e.turns_used for e in at_max)),
                    }
                ),
                "seconds": round(time.perf_counter() - started, 2),
            }
            del model
    finally:
        if bar is not None:
            bar.stop()
    return _nan_back(_jsonable(results))  # type: ignore[return-value]


def write_outputs(results: dict, output: str | Path) -> list[Path]:
    """results.json, results.jsonl and the PNGs; returns the paths written."""
    from minirl import plots

    out = Path(output)
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "results.json", out / "results.jsonl"]
    tmp = out / "results.json.tmp"  # a crash mid-write must not leave a truncated results.json
    tmp.write_text(json.dumps(_jsonable(results), indent=1))
    tmp.replace(out / "results.json")
    with open(out / "results.jsonl", "w") as f:
        for name, entry in results["checkpoints"].items():
            for row in entry["grid"]:
                f.write(
                    json.dumps(
                        {
                            "checkpoint": name,
                            "task": results["meta"]["task"],
                            "budget_visible": results["meta"]["budget_visible"],
                            **row,
                        }
                    )
                    + "\n"
                )
    task = results["meta"]["task"]
    hidden = "" if results["meta"]["budget_visible"] else ", budget hidden"
    for name, entry in results["checkpoints"].items():
        written.append(
            plots.heatmap(
                entry,
                f"Pass@(K,T): {name} on {task}{hidden}",
                out / f"heatmap_{plots.slug(name)}.png",
            )
        )
    entries = results["checkpoints"]
    n_inst = len(results["meta"]["seeds"])
    written.append(
        plots.curves(
            entries,
            f"Pass@(K,T) against T on {task} ({n_inst} instances, "
            f"n={results['meta']['n']}{hidden})",
            out / "passkt_curves.png",
        )
    )
    written.append(
        plots.behaviour(
            entries,
            f"Where does RL help? {task}, T={results['meta']['analysis_budget']}",
            out / "behaviour.png",
        )
    )
    return written
