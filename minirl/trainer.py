"""The training loop: sample task instances and budgets, roll out groups, update the LoRA adapter.

One step of multi-turn GRPO:

1. draw `tasks_per_step` training instances and one turn budget T per instance
   (minirl.budgets: `fixed` or `budgetmix`);
2. play G = `num_generations` episodes of each instance at its T, all in one batched rollout;
3. score them: R_i = success - invalid_penalty * #invalid (outcome), plus per-turn oracle
   progress in `process` mode; turn the scores into group-normalised advantages (minirl.grpo);
4. recompute the log-probs of the sampled tokens with gradients and minimise the clipped
   surrogate for `num_iterations` epochs; only the LoRA parameters move.

Before the first step and after the last, the policy is evaluated on held-out instances at a
tight, a middle and a generous budget (minirl.evaluation), so every run reports base vs trained.
Every step appends one line to OUTPUT/metrics.jsonl; checkpoints (minirl.checkpoint) make
`--resume` continue a killed run with the same numbers it would have produced uninterrupted.
"""

from __future__ import annotations

import json
import random
import shutil
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch
from peft import PeftModel
from transformers import PreTrainedTokenizerBase

import tasks
from minirl import grpo
from minirl.budgets import sample_budgets
from minirl.checkpoint import (
    CheckpointError,
    TrainerState,
    checkpoints,
    load_checkpoint,
    restore_rng,
    save_checkpoint,
)
from minirl.config import Config, ConfigError, validate
from minirl.evaluation import as_json, evaluate_success
from minirl.models import load_policy, reference_policy, trainable_parameters
from minirl.progress import make_progress
from minirl.rollout import Episode, EpisodeSpec, progress_rewards, rollout

# Flags that may differ between a run and its resumption without changing its results.
RESUMABLE_CHANGES = {
    "max_steps",
    "resume",
    "overwrite_output_dir",
    "output_dir",
    "logging_steps",
    "save_steps",
}


@dataclass
class Batch:
    """Episodes as right-padded tensors, ready for the loss."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    loss_mask: torch.Tensor
    old_logps: torch.Tensor
    turn_index: torch.Tensor


@dataclass
class TrainResult:
    """What a finished run hands back (also written to OUTPUT/summary.json)."""

    output_dir: Path
    steps: int
    metrics: list[dict] = field(default_factory=list)
    summary: dict = field(default_factory=dict)


def to_batch(episodes: list[Episode], pad_id: int, device: torch.device) -> Batch:
    width = max(len(e.input_ids) for e in episodes)

    def pad(rows: list[list], value, dtype) -> torch.Tensor:
        out = torch.full((len(rows), width), value, dtype=dtype)
        for i, row in enumerate(rows):
            out[i, : len(row)] = torch.tensor(row, dtype=dtype)
        return out.to(device)

    return Batch(
        input_ids=pad([e.input_ids for e in episodes], pad_id, torch.long),
        attention_mask=pad([[1] * len(e.input_ids) for e in episodes], 0, torch.long),
        loss_mask=pad([e.loss_mask for e in episodes], 0, torch.float32),
        old_logps=pad([e.logprobs for e in episodes], 0.0, torch.float32),
        turn_index=pad([e.turn_index for e in episodes], -1, torch.long),
    )


def episode_rewards(episodes: list[Episode], invalid_penalty: float) -> list[float]:
    """The outcome reward: 1 for success, minus a penalty per invalid action."""
    return [
        float(e.success) - invalid_penalty * sum(not t.valid for t in e.turns) for e in episodes
    ]


def token_advantages(
    episodes: list[Episode], batch: Batch, cfg: Config
) -> tuple[torch.Tensor, float]:
    """Advantages on every token, and the fraction of groups whose rewards all tie."""
    g = cfg.grpo.num_generations
    rewards = episode_rewards(episodes, cfg.task.invalid_penalty)
    adv, zero_std = grpo.group_advantages(torch.tensor(rewards), g, cfg.grpo.scale_rewards)
    if cfg.task.reward_mode == "outcome":
        return grpo.trajectory_token_advantages(adv, batch.loss_mask), zero_std
    per_turn = grpo.turn_advantages(
        [progress_rewards(e) for e in episodes], rewards, g, cfg.grpo.scale_rewards
    )
    return grpo.turn_token_advantages(per_turn, batch.turn_index.cpu()).to(
        batch.loss_mask
    ), zero_std


def masked_entropy(logits: torch.Tensor, mask: torch.Tensor, temperature: float) -> float:
    """Mean entropy of the sampling distribution at the assistant tokens (collapse detector)."""
    total, count = _entropy_sum(logits, mask, temperature)
    return total / max(count, 1.0)


def _entropy_sum(
    logits: torch.Tensor, mask: torch.Tensor, temperature: float
) -> tuple[float, float]:
    with torch.no_grad():
        logp = torch.log_softmax(logits[:, :-1].float() / temperature, dim=-1)
        ent = -(logp.exp() * logp).sum(-1)
        m = mask[:, 1:]
        return float((ent * m).sum()), float(m.sum())


def length_buckets(lengths: list[int], size: int) -> list[list[int]]:
    """Row indices sorted by length and cut into micro-batches of `size` (the last may be smaller).

    Episodes of similar length share a forward pass, so each pass pads only to its own longest
    row instead of the batch's; under BudgetMix the lengths differ several-fold.
    """
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    return [order[k : k + size] for k in range(0, len(order), size)]


def padding_fraction(lengths: list[int], buckets: list[list[int]]) -> float:
    """Share of the positions fed to the model that are padding, for this micro-batching."""
    fed = sum(len(rows) * max(lengths[i] for i in rows) for rows in buckets)
    return 1.0 - sum(lengths) / fed


def bucketed_logps(
    model: torch.nn.Module, batch: Batch, temperature: float, micro_batch_size: int
) -> tuple[torch.Tensor, float, float]:
    """Per-token log-probs [B, L] of the whole batch, computed in length-sorted micro-batches.

    The pieces are written back into one [B, L] tensor (autograd follows the copies), so the loss
    is computed once over the whole batch exactly as with a single padded pass: the same numbers
    and the same gradient, with less padding computed. The activations of every micro-batch are
    kept until backward, so this saves compute, not peak memory; gradient accumulation would save
    memory but needs each loss_type's denominator split across chunks.
    Returns the log-probs, the mean entropy on assistant tokens, and the padding fraction.
    """
    lengths = batch.attention_mask.sum(1).tolist()
    buckets = length_buckets(lengths, micro_batch_size)
    logps = torch.zeros(batch.input_ids.shape, device=batch.input_ids.device)
    entropy, count = 0.0, 0.0
    for rows in buckets:
        width = max(lengths[i] for i in rows)
        index = torch.tensor(rows, device=batch.input_ids.device)
        ids, attention = batch.input_ids[index, :width], batch.attention_mask[index, :width]
        logits = model(input_ids=ids, attention_mask=attention).logits
        logps[index, :width] = grpo.token_logps(logits, ids, temperature)
        e, c = _entropy_sum(logits, batch.loss_mask[index, :width], temperature)
        entropy, count = entropy + e, count + c
    return logps, entropy / max(count, 1.0), padding_fraction(lengths, buckets)


def rollout_stats(episodes: list[Episode]) -> dict[str, float]:
    turns = [t for e in episodes for t in e.turns]
    n_turns = max(1, len(turns))
    return {
        "success": sum(e.success for e in episodes) / len(episodes),
        "turns": sum(e.turns_used for e in episodes) / len(episodes),
        "budget": sum(e.budget for e in episodes) / len(episodes),
        "invalid_rate": sum(not t.valid for t in turns) / n_turns,
        "mistake_rate": sum(t.mistake for t in turns) / n_turns,
        "optimal_rate": sum(t.optimal for t in turns) / n_turns,
    }


def draw_groups(cfg: Config, rng: random.Random) -> list[tuple[int, int]]:
    """One step's groups: (training instance seed, turn budget T) for each of tasks_per_step.

    Both backends draw through here (--backend trl builds its dataset with it), so from the same
    seed they play the same instances at the same budgets.
    """
    t, b = cfg.task, cfg.budget
    seeds = [rng.choice(tasks.TRAIN_SEEDS) for _ in range(t.tasks_per_step)]
    budgets = sample_budgets(
        t.tasks_per_step,
        mode=b.mode,
        budget=b.budget,
        budget_min=b.budget_min,
        budget_max=b.budget_max,
        distribution=b.budget_distribution,
        rng=rng,
    )
    return list(zip(seeds, budgets, strict=True))


def check_output_dir(out: Path, cfg: Config) -> list[Path]:
    """The run directory's checkpoints, after refusing to silently resume or overwrite them."""
    existing = checkpoints(out)
    if cfg.grpo.resume and not existing:
        raise CheckpointError(f"--resume: no checkpoint found in {out}")
    if existing and not cfg.grpo.resume and not cfg.grpo.overwrite_output_dir:
        raise ConfigError(
            f"{out} already holds {existing[-1].name}; pass --resume to continue it, "
            "--overwrite_output_dir to start afresh, or a new --output_dir"
        )
    return existing


def train_step(
    model: PeftModel,
    tokenizer: PreTrainedTokenizerBase,
    optimizer: torch.optim.Optimizer,
    cfg: Config,
    rng: random.Random,
    step: int,
) -> dict:
    """One GRPO step; returns its metrics."""
    g, b, t = cfg.grpo, cfg.budget, cfg.task
    start = time.perf_counter()
    specs = [
        EpisodeSpec(t.task, seed, budget, group)
        for group, (seed, budget) in enumerate(draw_groups(cfg, rng))
        for _ in range(g.num_generations)
    ]
    episodes = rollout(
        model,
        tokenizer,
        specs,
        max_new_tokens=t.max_new_tokens,
        temperature=g.temperature,
        budget_visible=b.budget_visible,
        reuse_cache=g.reuse_kv_cache,
    )
    rollout_seconds = time.perf_counter() - start

    device = next(model.parameters()).device
    batch = to_batch(episodes, tokenizer.pad_token_id, device)
    advantages, zero_std = token_advantages(episodes, batch, cfg)
    ref_logps = None
    if g.beta > 0:
        with torch.no_grad(), reference_policy(model):
            ref_logps, _, _ = bucketed_logps(
                model, batch, g.temperature, g.per_device_train_batch_size
            )
    model.train()
    losses, stats, entropy, grad_norm, skipped, pad_frac = [], {}, 0.0, 0.0, 0, 0.0
    for _ in range(g.num_iterations):
        logps, entropy, pad_frac = bucketed_logps(
            model, batch, g.temperature, g.per_device_train_batch_size
        )
        loss, stats = grpo.policy_loss(
            logps,
            batch.old_logps,
            advantages,
            batch.loss_mask,
            epsilon=g.epsilon,
            epsilon_high=g.epsilon_high,
            beta=g.beta,
            ref_logps=ref_logps,
            loss_type=g.loss_type,
            # dr_grpo's constant: the most assistant tokens any episode of this run can have.
            max_completion_length=t.max_new_tokens
            * (b.budget if b.mode == "fixed" else b.budget_max),
        )
        optimizer.zero_grad(set_to_none=True)
        if not torch.isfinite(loss):
            warnings.warn(
                f"step {step}: non-finite loss ({loss.item()}); update skipped", stacklevel=1
            )
            skipped += 1
            continue
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(trainable_parameters(model), g.max_grad_norm)
        if not torch.isfinite(norm):
            warnings.warn(f"step {step}: non-finite gradient; update skipped", stacklevel=1)
            optimizer.zero_grad(set_to_none=True)
            skipped += 1
            continue
        optimizer.step()
        losses.append(loss.item())
        grad_norm = float(norm)
    model.eval()

    rewards = episode_rewards(episodes, t.invalid_penalty)
    return {
        "step": step + 1,
        "reward": sum(rewards) / len(rewards),
        **rollout_stats(episodes),
        "loss": sum(losses) / len(losses) if losses else float("nan"),
        "kl": stats.get("kl", 0.0),
        "clip_ratio": stats.get("clip_ratio", 0.0),
        "entropy": entropy,
        "grad_norm": grad_norm,
        "zero_std_frac": zero_std,
        "skipped_updates": skipped,
        "padding_fraction": pad_frac,
        "rollout_seconds": rollout_seconds,
        "seconds": time.perf_counter() - start,
    }


def evaluate(model: PeftModel, tokenizer: PreTrainedTokenizerBase, cfg: Config) -> dict:
    results = evaluate_success(
        model,
        tokenizer,
        cfg.task.task,
        cfg.eval_budgets(),
        cfg.grpo.eval_seeds,
        max_new_tokens=cfg.task.max_new_tokens,
        temperature=cfg.grpo.temperature,
        budget_visible=cfg.budget.budget_visible,
    )
    return as_json(results)


def metrics_up_to(path: Path, step: int) -> list[str]:
    """The metrics lines of steps <= `step`.

    A killed run may have logged steps after its last checkpoint (they will be replayed, so they
    go), and may have died mid-line (a line that does not parse goes too).
    """
    if not path.exists():
        return []
    kept = []
    for line in path.read_text().splitlines():
        try:
            if json.loads(line)["step"] <= step:
                kept.append(line)
        except (json.JSONDecodeError, KeyError, TypeError):
            continue
    return kept


def _check_resume_config(saved: dict, cfg: Config) -> None:
    now = cfg.to_dict()
    # A flag added after the checkpoint was written had its default then.
    defaults = Config().to_dict()
    diffs = [
        f"--{key}"
        for section in now
        for key in now[section]
        if key not in RESUMABLE_CHANGES
        and saved[section].get(key, defaults[section][key]) != now[section][key]
    ]
    if diffs:
        raise ConfigError(
            f"--resume: the checkpoint was made with different {', '.join(diffs)}; "
            "resume with the original flags or use a new --output_dir"
        )


def _metric_line(m: dict) -> str:
    return (
        f"R {m['reward']:.2f} succ {m['success']:.2f} turns {m['turns']:.1f} "
        f"inval {m['invalid_rate']:.2f} kl {m['kl']:.3f} ent {m['entropy']:.2f} "
        f"{m['seconds']:.1f}s/step"
    )


def train(cfg: Config, progress: bool = True) -> TrainResult:
    """Run (or resume) a training run described by `cfg`; see the module docstring."""
    validate(cfg)
    out = Path(cfg.output_dir)
    existing = check_output_dir(out, cfg)
    torch.manual_seed(cfg.grpo.seed)
    rng = random.Random(cfg.grpo.seed)
    model, tokenizer = load_policy(
        cfg.model.model,
        cfg.model.quant,
        cfg.model.lora_r,
        cfg.model.lora_alpha,
        cfg.model.lora_dropout,
        task=cfg.task.task,
    )
    optimizer = torch.optim.AdamW(
        trainable_parameters(model), lr=cfg.grpo.learning_rate, weight_decay=0.0
    )
    metrics_path = out / "metrics.jsonl"
    start_step, summary = 0, {}
    if cfg.grpo.resume:
        state = load_checkpoint(existing[-1], model)
        _check_resume_config(state.config, cfg)
        optimizer.load_state_dict(state.optimizer)
        restore_rng(state, rng)
        start_step, summary = state.step, state.summary
        kept = metrics_up_to(metrics_path, start_step)
        metrics_path.write_text("".join(line + "\n" for line in kept))
    else:
        out.mkdir(parents=True, exist_ok=True)
        metrics_path.write_text("")
        for old in existing:  # --overwrite_output_dir
            shutil.rmtree(old)
        summary = {"config": cfg.to_dict()}
        if cfg.grpo.eval_seeds:
            summary["base"] = evaluate(model, tokenizer, cfg)

    history: list[dict] = []
    steps = range(start_step, cfg.grpo.max_steps)
    with make_progress() if progress else _NullProgress() as bar:
        task_id = bar.add_task("train", total=cfg.grpo.max_steps, completed=start_step, metrics="")
        for step in steps:
            m = train_step(model, tokenizer, optimizer, cfg, rng, step)
            history.append(m)
            with metrics_path.open("a") as f:
                f.write(json.dumps(m) + "\n")
            bar.update(task_id, advance=1, metrics=_metric_line(m))
            if (step + 1) % cfg.grpo.logging_steps == 0:
                # A plain line too: it survives in logs and CI, where no live bar is drawn.
                bar.console.print(f"step {step + 1}/{cfg.grpo.max_steps} " + _metric_line(m))
            done = step + 1 == cfg.grpo.max_steps
            if (step + 1) % cfg.grpo.save_steps == 0 or done:
                state = TrainerState(
                    step=step + 1,
                    optimizer=optimizer.state_dict(),
                    torch_rng=torch.get_rng_state(),
                    python_rng=rng.getstate(),
                    config=cfg.to_dict(),
                    summary=summary,
                )
                save_checkpoint(out, model, state)
    if cfg.grpo.eval_seeds and "trained" not in summary:
        summary["trained"] = evaluate(model, tokenizer, cfg)
    summary["steps"] = cfg.grpo.max_steps
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    return TrainResult(out, cfg.grpo.max_steps, history, summary)


class _NullProgress:
    """Stands in for a rich Progress when bars are off (tests, --no-progress)."""

    def __enter__(self) -> _NullProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def add_task(self, *args: object, **kwargs: object) -> int:
        return 0

    def update(self, *args: object, **kwargs: object) -> None:
        return None

    @property
    def console(self) -> _NullProgress:
        return self

    def print(self, *args: object, **kwargs: object) -> None:
        return None
