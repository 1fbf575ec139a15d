"""The training loop: sample task instances and budgets, roll out groups, update the LoRA adapter.

One step of multi-turn GRPO, each part in its own module:

1. draw `tasks_per_step` training instances and one turn budget T per instance
   (minirl.budgets: `fixed` or `budgetmix`);
2. play G = `num_generations` episodes of each instance at its T, all in one batched rollout
   (minirl.rollout);
3. score them: R_i = success - invalid_penalty * #invalid (outcome; the penalty is the format
   reward), plus per-turn oracle progress in `process` mode (minirl.rewards); turn the scores
   into group-normalised advantages on every assistant token (minirl.grpo);
4. recompute the log-probs of the sampled tokens with gradients (minirl.batch) and minimise the
   clipped surrogate (minirl.grpo) for `num_iterations` epochs, one optimizer step each, its
   gradient accumulated micro-batch by micro-batch (minirl.update), so memory is bounded by
   `per_device_train_batch_size`, not by the episodes per step; only the LoRA parameters move.

Before the first step and after the last, the policy is evaluated on held-out instances at a
tight, a middle and a generous budget (minirl.eval.sampler), so every run reports base vs trained.
Every step appends one line to OUTPUT/metrics.jsonl (and sends it to the trackers of
`--report_to`, minirl.trackers); the run ends by drawing OUTPUT/curves.png and the episode viewer
OUTPUT/episodes.html (minirl.outputs). Checkpoints (minirl.checkpoint) make
`--resume` continue a killed run with the same numbers it would have produced uninterrupted.
"""

from __future__ import annotations

import json
import random
import shutil
import time
import warnings
from pathlib import Path

import torch
from peft import PeftModel
from transformers import PreTrainedTokenizerBase

from minirl import grpo
from minirl.batch import bucketed_logps, to_batch
from minirl.budgets import draw_groups
from minirl.chat import resolve_task_text
from minirl.checkpoint import (
    TrainerState,
    TrainResult,
    check_not_diverged,
    check_output_dir,
    load_checkpoint,
    metrics_up_to,
    restore_rng,
    resume_point,
    save_checkpoint,
    sole_writer,
)
from minirl.config import Config, validate
from minirl.episode import EpisodeSpec, episode_stats
from minirl.models import load_policy, reference_policy, trainable_parameters
from minirl.outputs import evaluate_policy, finish_run
from minirl.progress import progress_bar
from minirl.rewards import invalid_penalty_for, outcome_rewards, progress_rewards
from minirl.rollout import rollout_in_chunks
from minirl.trackers import check_trackers, tracking
from minirl.update import accumulate_gradients


def train(cfg: Config, progress: bool = True) -> TrainResult:
    """Run (or resume) a training run described by `cfg`; see the module docstring."""
    validate(cfg)
    with sole_writer(cfg.output_dir, "--output_dir"):  # one run writes a directory at a time
        return _train(cfg, progress)


def _train(cfg: Config, progress: bool) -> TrainResult:
    out = Path(cfg.output_dir)
    existing = check_output_dir(out, cfg)
    check_trackers(cfg.grpo.report_to, out)  # before the model loads, not after the run
    # The checkpoint to continue from, its flags and step checked before the model loads.
    resume_from = resume_point(existing, cfg) if cfg.grpo.resume else None
    torch.manual_seed(cfg.grpo.seed)
    rng = random.Random(cfg.grpo.seed)
    model, tokenizer = load_policy(
        cfg.model.model,
        cfg.model.quant,
        cfg.model.lora_r,
        cfg.model.lora_alpha,
        cfg.model.lora_dropout,
        task=cfg.task.task,
        gradient_checkpointing=cfg.grpo.gradient_checkpointing,
    )
    optimizer = torch.optim.AdamW(
        trainable_parameters(model), lr=cfg.grpo.learning_rate, weight_decay=0.0
    )
    metrics_path = out / "metrics.jsonl"
    start_step, summary = 0, {}
    if resume_from is not None:
        state = load_checkpoint(resume_from, model)
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
        (out / "episodes.json").unlink(missing_ok=True)  # an overwritten run's sample episodes
        summary = {"config": cfg.to_dict()}
    # The text the tasks were played in: --task_text auto resolves by the tokenizer.
    summary["task_text"] = resolve_task_text(cfg.task.task_text, tokenizer)

    history: list[dict] = []
    # Besides metrics.jsonl: the trackers of --report_to, closed (so flushed) even if the run dies.
    trackers_open = tracking(
        cfg.grpo.report_to,
        out,
        cfg.to_dict(),
        resume=cfg.grpo.resume,
        # TensorBoard forgets what a killed run logged after its checkpoint, as metrics.jsonl does.
        purge_step=start_step + 1 if cfg.grpo.resume else None,
    )
    with progress_bar(disable=not progress) as bar, trackers_open as trackers:
        if cfg.grpo.eval_seeds and "base" not in summary:
            summary["base"] = evaluate_policy(model, tokenizer, cfg, out, "base", trackers, 0)
        job = bar.add_task("train", total=cfg.grpo.max_steps, completed=start_step, metrics="")
        for step in range(start_step, cfg.grpo.max_steps):
            m = train_step(model, tokenizer, optimizer, cfg, rng, step)
            history.append(m)
            with metrics_path.open("a") as f:
                f.write(json.dumps(m) + "\n")
            trackers.log_metrics(m)
            check_not_diverged(model, step + 1, cfg.grpo.learning_rate)  # before it is saved
            bar.update(job, advance=1, metrics=metric_line(m))
            if progress and (step + 1) % cfg.grpo.logging_steps == 0:
                # A plain line too: it survives in logs and CI, where no live bar is drawn.
                bar.console.print(f"step {step + 1}/{cfg.grpo.max_steps} " + metric_line(m))
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
            summary["trained"] = evaluate_policy(
                model, tokenizer, cfg, out, "trained", trackers, cfg.grpo.max_steps
            )
        summary["steps"] = cfg.grpo.max_steps
        (out / "summary.json").write_text(json.dumps(summary, indent=1))
        finish_run(out, trackers, cfg.grpo.max_steps)  # curves.png, episodes.html
    return TrainResult(out, cfg.grpo.max_steps, history, summary)


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
    text = resolve_task_text(t.task_text, tokenizer)  # compact for tiny, natural for a chat model
    start = time.perf_counter()
    # 1. This step's groups: G episodes of each drawn instance, all at the instance's budget T.
    specs = [
        EpisodeSpec(t.task, seed, budget, group)
        for group, (seed, budget) in enumerate(draw_groups(cfg, rng))
        for _ in range(g.num_generations)
    ]
    # 2. Play them together: one batched generate per turn, generation_batch_size episodes at a
    #    time (all of them when unset), so the rollout's KV cache need not grow with the step.
    episodes = rollout_in_chunks(
        model,
        tokenizer,
        specs,
        g.generation_batch_size,
        max_new_tokens=t.max_new_tokens,
        temperature=g.temperature,
        budget_visible=b.budget_visible,
        task_text=text,
        reuse_cache=g.reuse_kv_cache,
    )
    rollout_seconds = time.perf_counter() - start

    # 3. Rewards, then advantages on every assistant token (0 on observations and padding).
    device = next(model.parameters()).device
    batch = to_batch(episodes, tokenizer.pad_token_id, device)
    rewards = outcome_rewards(episodes, invalid_penalty_for(t.invalid_penalty, text))
    process = t.reward_mode == "process"
    advantages, zero_std = grpo.token_advantages(
        rewards,
        batch.loss_mask,
        g.num_generations,
        g.scale_rewards,
        turn_rewards=[progress_rewards(e) for e in episodes] if process else None,
        turn_index=batch.turn_index,
    )
    ref_logps = None
    if g.beta > 0:  # the KL reference: the same model with its adapters switched off
        with reference_policy(model):
            ref_logps = bucketed_logps(model, batch, g.temperature, g.per_device_train_batch_size)

    # 4. The update: num_iterations epochs of the clipped surrogate over the same episodes, each
    #    one optimizer step on gradients accumulated micro-batch by micro-batch (minirl.update).
    model.train()
    losses, stats, entropy, grad_norm, skipped, pad_frac = [], {}, 0.0, 0.0, 0, 0.0
    for _ in range(g.num_iterations):
        optimizer.zero_grad(set_to_none=True)
        grad = accumulate_gradients(
            model,
            batch,
            advantages,
            temperature=g.temperature,
            micro_batch_size=g.per_device_train_batch_size,
            ref_logps=ref_logps,
            epsilon=g.epsilon,
            epsilon_high=g.epsilon_high,
            beta=g.beta,
            loss_type=g.loss_type,
            # dr_grpo's constant: the most assistant tokens any episode of this run can have.
            max_completion_length=t.max_new_tokens
            * (b.budget if b.mode == "fixed" else b.budget_max),
        )
        entropy, pad_frac = grad.entropy, grad.padding_fraction
        if not grad.finite:
            warnings.warn(f"step {step}: non-finite loss; update skipped", stacklevel=1)
            optimizer.zero_grad(set_to_none=True)
            skipped += 1
            continue
        stats = grad.stats
        norm = torch.nn.utils.clip_grad_norm_(trainable_parameters(model), g.max_grad_norm)
        if not torch.isfinite(norm):
            warnings.warn(f"step {step}: non-finite gradient; update skipped", stacklevel=1)
            optimizer.zero_grad(set_to_none=True)
            skipped += 1
            continue
        optimizer.step()
        losses.append(grad.loss)
        grad_norm = float(norm)
    model.eval()

    return {
        "step": step + 1,
        "reward": sum(rewards) / len(rewards),
        **episode_stats(episodes),
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


def metric_line(m: dict) -> str:
    """The step's headline numbers, for the progress bar and the log."""
    return (
        f"R {m['reward']:.2f} succ {m['success']:.2f} turns {m['turns']:.1f} "
        f"inval {m['invalid_rate']:.2f} kl {m['kl']:.3f} ent {m['entropy']:.2f} "
        f"{m['seconds']:.1f}s/step"
    )
