"""Compare checkpoints: Pass@(K,T) grids and behaviour analyses on identical held-out instances.

This is the engine behind `evaluate.py` (and the study). For each checkpoint it
1. loads the base model with that checkpoint's LoRA adapter (`base` = no adapter),
2. plays n episodes per instance and budget (minirl.eval.sampler), from the same sampling seed,
3. turns the success counts into the K x T grid (minirl.eval.passkt),
4. runs the analyses (minirl.eval.analysis) on the episodes at the largest T, single-step
   quality on one set of fresh states and recovery on one set of post-error states, each
   matched to fresh states (minirl.eval.recovery), all sampled once from the base policy; scores
   it exactly in the same position before and after each of the base's failed first errors
   (minirl.eval.position); and measures its feedback use at every T from the same episodes
   (minirl.eval.feedback).
Beside them goes the open-loop yardstick at every T (minirl.eval.openloop): what the best policy
that never reads an observation wins, the line a checkpoint must clear to show multi-turn skill.
It returns the typed results (minirl.eval.results) and writes results.json (grid + analyses +
metadata), results.jsonl (the grid as a flat table,
`datasets.load_dataset("json", data_files=...)`) and the PNGs of minirl.eval.plots.

It sits beside trainer.py, not in minirl/eval: like train(), it reads and writes run directories
(checkpoints through minirl.rundir.checkpoint, the viewer's episodes through
minirl.rundir.sample_episodes), while the evaluation's pieces in minirl/eval stay below them.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import torch
from peft import PeftModel
from rich.progress import Progress
from transformers import PreTrainedTokenizerBase

import tasks
from minirl.chat import resolve_task_text
from minirl.config import EvalArgs, validate_eval
from minirl.engine import for_sampling
from minirl.episode import Episode, EpisodeSpec
from minirl.eval.analysis import (
    decision_quality,
    error_free,
    error_recovery,
    sample_states,
    success_by_horizon,
    turn_efficiency,
)
from minirl.eval.feedback import FeedbackUse, feedback_use
from minirl.eval.openloop import yardsticks
from minirl.eval.passkt import pass_at_kt
from minirl.eval.position import Pair, pair_record, position_scores, same_position_pairs, score
from minirl.eval.recovery import RecoveryStates, covariates, recover, recovery_states
from minirl.eval.results import (
    Analysis,
    CheckpointResult,
    EvalMeta,
    EvalResults,
    save_results,
)
from minirl.eval.sampler import episodes_to_play, success_counts, sweep
from minirl.infra.errors import CheckpointError, ConfigError
from minirl.infra.progress import progress_bar
from minirl.models import load_policy
from minirl.rundir.checkpoint import CHECKPOINT_NAME, check_base, read_adapter
from minirl.rundir.checkpoint import checkpoints as run_checkpoints
from minirl.rundir.sample_episodes import add_samples

BASE = "base"


def minirl_version() -> str:
    try:
        return version("minirl")
    except PackageNotFoundError:
        return "unknown"


def resolve_checkpoint(name: str, task: str, model: str) -> Path | None:
    """`base` -> None; a run directory -> its newest checkpoint; an adapter directory -> itself.

    The adapter is read and checked here, before any model loads: a corrupt, incomplete or
    non-finite one is an error naming the file (and, in a run directory whose newest checkpoint
    is broken, the newest intact one to evaluate instead). A checkpoint written by minirl's
    trainer records its config and base; evaluating it on another task or base model would
    silently measure nonsense (the tiny base is task-specific): an error too.
    """
    if name == BASE:
        return None
    path = Path(name).expanduser()
    if not path.is_dir():
        raise ConfigError(f"--checkpoints: {name!r} is not 'base' or an existing directory")
    if (path / "adapter_config.json").is_file() or CHECKPOINT_NAME.fullmatch(path.name):
        read_adapter(path)
    else:
        found = run_checkpoints(path)
        if not found:
            raise ConfigError(
                f"--checkpoints: {name!r} holds no adapter (adapter_config.json) or checkpoint-*"
            )
        path = newest_intact(found)
    config = recorded_config(path)
    trained_task = config.get("task", {}).get("task", task)
    trained_model = config.get("model", {}).get("model", model)
    if trained_task != task:
        raise ConfigError(f"--checkpoints: {name!r} was trained on {trained_task!r}, not {task!r}")
    if trained_model != model:
        raise ConfigError(
            f"--checkpoints: {name!r} was trained on --model {trained_model!r}, not {model!r}"
        )
    check_base(path, model, task, "--checkpoints")
    return path


def load_probed(
    model: str, adapter: str, task: str, quant: str, dtype: str
) -> tuple[PeftModel, PreTrainedTokenizerBase, Path | None]:
    """The probes' model (minirl.tools): `model` with the adapter named by `--adapter` ("" for
    none, a run or adapter directory as `--checkpoints` takes it), in eval mode, and the adapter's
    resolved path. The adapter is checked before the model loads, as evaluate.py does."""
    path = None
    if adapter:
        try:
            path = resolve_checkpoint(adapter, task, model)
        except ConfigError as err:  # its messages name evaluate.py's flag
            raise ConfigError(str(err).replace("--checkpoints:", "--adapter:", 1)) from err
    policy, tokenizer = load_policy(model, quant, adapter=path, task=task, dtype=dtype)
    policy.eval()
    return policy, tokenizer, path


def recorded_config(path: Path) -> dict:
    """The minirl config a checkpoint records ({} if none: a peft adapter, a TRL checkpoint)."""
    meta = path / "trainer_state.json"
    if not meta.is_file():
        return {}
    try:
        data = json.loads(meta.read_text())
    except ValueError as err:
        raise CheckpointError(f"{meta} is corrupt ({str(err).splitlines()[0]})") from err
    config = data.get("config", {}) if isinstance(data, dict) else None
    if not isinstance(config, dict):
        raise CheckpointError(f"{meta} is corrupt (not a checkpoint's trainer state)")
    return config


def newest_intact(found: list[Path]) -> Path:
    """The newest checkpoint of a run; if it is broken, an error that offers the newest intact one.

    Evaluating an older checkpoint silently would report another policy under the run's name.
    """

    def check(path: Path) -> None:
        read_adapter(path)
        recorded_config(path)

    try:
        check(found[-1])
        return found[-1]
    except CheckpointError as err:
        for older in reversed(found[:-1]):
            try:
                check(older)
            except CheckpointError:
                continue
            raise CheckpointError(f"{err}; {older} is intact: evaluate it by that path") from err
        raise CheckpointError(
            f"{err}; no checkpoint of this run is intact: train it again"
        ) from err


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


def compare(args: EvalArgs, progress: bool = True, samples: Path | None = None) -> EvalResults:
    """Evaluate every checkpoint of `args` on the same instances, states and sampling seed.

    With `samples`, the first episode of the first few instances at every T, for every
    checkpoint, is kept in that file for the episode viewer (minirl.rundir.sample_episodes,
    minirl.rundir.viewer).
    """
    ks, ts = validate_eval(args)
    labelled = checkpoint_labels(args.checkpoints)
    paths = {
        name: resolve_checkpoint(spec, args.task, args.model) for name, spec in labelled.items()
    }
    seeds = list(tasks.EVAL_SEEDS[: args.instances])
    results = EvalResults(eval_meta(args, seeds, ks, ts))
    with progress_bar(disable=not progress) as bar:
        states = fixed_states(args, seeds, results.meta)
        results.open_loop = yardsticks(args.task, ts)  # cached: seconds once, then nothing
        for name, path in paths.items():
            results.checkpoints[name] = evaluate_checkpoint(
                args, name, path, results, states, bar, samples
            )
    return results


def eval_meta(args: EvalArgs, seeds: list[int], ks: list[int], ts: list[int]) -> EvalMeta:
    """What every checkpoint of this evaluation shares: instances, breadths, budgets, sampling."""
    t_max = max(ts)
    return EvalMeta(
        task=args.task,
        model=args.model,
        quant=args.quant,
        seeds=seeds,
        n=args.n,
        ks=ks,
        ts=ts,
        seed=args.seed,
        budget_visible=args.budget_visible,
        mode="visible: each T rolled out separately"
        if args.budget_visible
        else f"hidden: one rollout at T={t_max}, truncated to every T",
        temperature=args.temperature,
        max_new_tokens=args.max_new_tokens,
        analysis_budget=t_max,
        minirl_version=minirl_version(),
        device="cuda" if torch.cuda.is_available() else "cpu",
    )


def rollout_options(args: EvalArgs, task_text: str) -> dict:
    """The sampling settings every episode of the evaluation is played with."""
    return dict(
        budget_visible=args.budget_visible,
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        batch_size=args.batch_size,
        task_text=task_text,
    )


@dataclass
class FixedStates:
    """The states every checkpoint is asked about: fresh ones (no error behind them) for
    single-step quality, and post-error ones with their matched fresh states for recovery."""

    fresh: list[EpisodeSpec]
    recovery: RecoveryStates
    pairs: list[Pair]  # the same position before and after a failed first error


def fixed_states(args: EvalArgs, seeds: list[int], meta: EvalMeta) -> FixedStates:
    """Base episodes at T_max, from a seed of their own whatever checkpoints are compared, and the
    states drawn from them. Records the task text and every state in `meta`."""
    t_max = max(meta.ts)
    base_model, tokenizer = load_policy(args.model, args.quant, task=args.task, dtype=args.dtype)
    base_policy = for_sampling(base_model, args.rollout_engine)
    meta.task_text = text = resolve_task_text(args.task_text, tokenizer)
    episodes = sweep(
        base_policy,
        tokenizer,
        args.task,
        [t_max],
        seeds,
        args.state_episodes,
        seed=args.seed + 1,
        **rollout_options(args, text),
    )[t_max]
    fresh = sample_states(episodes, args.decision_states, seed=args.seed, where=error_free)
    fixed = recovery_states(
        episodes,
        args.recovery_states,
        seed=args.seed,
        task_text=text,
        horizon=args.recovery_horizon,
        per_state=args.recovery_matches,
    )
    meta.decision_samples = args.decision_samples
    meta.decision_states = [
        {"seed": s.seed, "replies": list(s.replies), **covariates(s, text)} for s in fresh
    ]
    meta.post_error_states = [
        {
            "seed": s.seed,
            "replies": list(s.replies),
            **c,
            "kind": kind,
            "turns_left": s.budget - len(s.replies),
            "after": after,
            "matches": m,
        }
        for s, c, kind, after, m in zip(
            fixed.post, fixed.post_covariates, fixed.kinds, fixed.after, fixed.matches, strict=True
        )
    ]
    meta.matched_states = [
        {"seed": s.seed, "replies": list(s.replies), **c}
        for s, c in zip(fixed.matched, fixed.matched_covariates, strict=True)
    ]
    meta.base_error_rate = [fixed.hardness.get(s, math.nan) for s in seeds]
    pairs = same_position_pairs(episodes, text)
    meta.position_pairs = [pair_record(p) for p in pairs]
    return FixedStates(fresh, fixed, pairs)


def evaluate_checkpoint(
    args: EvalArgs,
    name: str,
    path: Path | None,
    results: EvalResults,
    states: FixedStates,
    bar: Progress,
    samples: Path | None,
) -> CheckpointResult:
    """One checkpoint: its episodes at every T (Pass@(K,T), feedback use, the per-episode
    analyses) and its replies at the fixed states (single-step quality, recovery)."""
    started = time.perf_counter()
    meta = results.meta
    ts, t_max = meta.ts, max(meta.ts)
    model, tokenizer = load_policy(
        args.model, args.quant, adapter=path, task=args.task, dtype=args.dtype
    )
    # One sampling copy per checkpoint (minirl.engine) serves every analysis below.
    policy = for_sampling(model, args.rollout_engine)
    total = episodes_to_play(ts, len(meta.seeds), args.n, args.budget_visible)
    job = bar.add_task(f"eval {name}", total=total, metrics="")
    episodes = sweep(
        policy,
        tokenizer,
        args.task,
        ts,
        meta.seeds,
        args.n,
        seed=args.seed,
        on_batch=lambda done: bar.update(job, completed=min(done, total)),
        **rollout_options(args, meta.task_text),
    )
    used = {t: feedback_use(episodes[t]) for t in ts}  # from the same episodes
    if samples is not None:
        keep_samples(samples, name, episodes, used, args, results)
    counts = success_counts(episodes, args.n)
    grid = pass_at_kt(counts, args.n, meta.ks, bootstrap=args.bootstrap, seed=args.seed)
    ask = dict(
        samples=args.decision_samples,
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        task_text=meta.task_text,
        seed=args.seed,
        batch_size=args.batch_size,
        engine=args.rollout_engine,
    )
    fixed = states.recovery
    decision = decision_quality(policy, tokenizer, states.fresh, **ask)
    on_matched = (
        decision_quality(policy, tokenizer, fixed.matched, **ask) if fixed.matched else None
    )
    from_errors = recover(policy, tokenizer, fixed.post, fixed.kinds, **ask) if fixed.post else None
    # Exact, not sampled: the training-side model scores every action's reply tokens.
    position = position_scores(score(model, tokenizer, states.pairs, meta.task_text))
    at_max = episodes[t_max]
    turns = sum(e.turns_used for e in at_max)
    return CheckpointResult(
        path=str(path) if path else None,
        grid=[grid.cells[(k, t)] for k in grid.ks for t in grid.ts],
        analysis=Analysis(
            decision=decision,
            recovery=error_recovery(at_max),
            horizon=success_by_horizon(at_max),
            efficiency={t: turn_efficiency(episodes[t]) for t in ts},
            invalid_rate=sum(not x.valid for e in at_max for x in e.turns) / max(1, turns),
            from_errors=from_errors,
            matched=on_matched,
            position=position,
        ),
        seconds=round(time.perf_counter() - started, 2),
        successes=counts,
        feedback_use=used,
    )


def keep_samples(
    path: Path,
    name: str,
    episodes: dict[int, list[Episode]],
    used: dict[int, FeedbackUse],
    args: EvalArgs,
    results: EvalResults,
) -> None:
    """A few of the checkpoint's episodes, with its success and feedback use at every T and the
    open-loop yardstick, into the episode viewer's file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    add_samples(
        path,
        name,
        episodes,
        task=args.task,
        budget_visible=args.budget_visible,
        per_instance=args.n,
        stats={
            str(t): {
                "success": sum(e.success for e in episodes[t]) / len(episodes[t]),
                "feedback_use": used[t].bits,
                "feedback_use_sd": used[t].null_sd,
            }
            for t in results.meta.ts
        },
        open_loop={str(t): dataclasses.asdict(y) for t, y in results.open_loop.items()},
    )


def write_outputs(results: EvalResults, output: str | Path) -> list[Path]:
    """results.json, results.jsonl and the PNGs; returns the paths written."""
    from minirl.eval import plots

    out = Path(output)
    out.mkdir(parents=True, exist_ok=True)
    written = [save_results(results, out / "results.json"), out / "results.jsonl"]
    meta = results.meta
    with open(out / "results.jsonl", "w") as f:
        for name, entry in results.checkpoints.items():
            for cell in entry.grid:
                row = {"checkpoint": name, "task": meta.task, "budget_visible": meta.budget_visible}
                f.write(json.dumps({**row, **dataclasses.asdict(cell)}) + "\n")
    hidden = "" if meta.budget_visible else ", budget hidden"
    for name, entry in results.checkpoints.items():
        written.append(
            plots.heatmap(
                entry,
                f"Pass@(K,T): {name} on {meta.task}{hidden}",
                out / f"heatmap_{plots.slug(name)}.png",
            )
        )
    written.append(
        plots.curves(
            results.checkpoints,
            f"Pass@(K,T) against T on {meta.task} ({len(meta.seeds)} instances, "
            f"n={meta.n}{hidden})",
            out / "passkt_curves.png",
            open_loop=results.open_loop,
        )
    )
    written.append(
        plots.behaviour(
            results.checkpoints,
            f"Where does RL help? {meta.task}, T={meta.analysis_budget}",
            out / "behaviour.png",
        )
    )
    return written
