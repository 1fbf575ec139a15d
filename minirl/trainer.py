"""The training loop: sample task instances and budgets, roll out groups, update the LoRA adapter.

One step of multi-turn GRPO, each part in its own module:

1. draw `tasks_per_step` training instances and one turn budget T per instance
   (minirl.budgets: `fixed` or `budgetmix`);
2. play G = `num_generations` episodes of each instance at its T, all in one batched rollout
   (minirl.rollout);
3. score them: R_i = success - invalid_penalty * #invalid (outcome; the penalty is the format
   reward), plus per-turn oracle progress in `process` mode, less an optional penalty per
   mistake (minirl.rewards); turn the scores into group-normalised advantages on every assistant
   token (minirl.grpo), plus, with `step_advantage_w`, GiGPO's comparison of the turns that
   were taken in the same state;
4. recompute the log-probs of the sampled tokens with gradients (minirl.logprobs) and minimise the
   clipped surrogate (minirl.grpo) for `num_iterations` epochs, one optimizer step each, its
   gradient accumulated micro-batch by micro-batch (minirl.update), so memory is bounded by
   `per_device_train_batch_size`, not by the episodes per step; only the LoRA parameters move.
   The learning rate is `learning_rate` throughout unless `--lr_scheduler_type` warms it up or
   decays it (transformers' schedules, one move per step).

Before the first step and after the last, the policy is evaluated on held-out instances at a
tight, a middle and a generous budget (minirl.eval.sampler), so every run reports base vs trained.
Every step appends one line to OUTPUT/metrics.jsonl (and sends it to the trackers of
`--report_to`, minirl.rundir.trackers); the run ends by drawing OUTPUT/curves.png and the episode
viewer OUTPUT/episodes.html (minirl.rundir.outputs). Checkpoints (minirl.rundir.checkpoint) make
`--resume` continue a killed run with the same numbers it would have produced uninterrupted.
"""

from __future__ import annotations

import json
import random
import time
import warnings
from pathlib import Path

import torch
from peft import PeftModel
from transformers import PreTrainedTokenizerBase, get_scheduler

from minirl import grpo
from minirl.budgets import tally_budgets
from minirl.chat import resolve_task_text
from minirl.config import Config, validate
from minirl.episode import episode_stats
from minirl.groups import play_groups
from minirl.infra.progress import progress_bar
from minirl.logprobs import bucketed_logps, to_batch
from minirl.models import base_identity, load_policy, reference_policy, trainable_parameters
from minirl.rundir.checkpoint import (
    TrainResult,
    check_init_adapter,
    check_not_diverged,
    check_output_dir,
    open_run_dir,
    resume_point,
    save_checkpoint,
    sole_writer,
    trainer_state,
)
from minirl.rundir.outputs import evaluate_policy, finish_run, open_loop
from minirl.rundir.trackers import check_trackers, tracking
from minirl.update import Update, update


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
    if cfg.model.init_adapter:  # checked before the base model loads, not after
        check_init_adapter(cfg.model.init_adapter, cfg.model.lora_r, cfg.model.lora_alpha)
    torch.manual_seed(cfg.grpo.seed)
    rng = random.Random(cfg.grpo.seed)
    model, tokenizer = load_policy(
        cfg.model.model,
        cfg.model.quant,
        cfg.model.lora_r,
        cfg.model.lora_alpha,
        cfg.model.lora_dropout,
        adapter=cfg.model.init_adapter or None,
        task=cfg.task.task,
        gradient_checkpointing=cfg.grpo.gradient_checkpointing,
        dtype=cfg.model.dtype,
    )
    optimizer = torch.optim.AdamW(
        trainable_parameters(model), lr=cfg.grpo.learning_rate, weight_decay=0.0
    )
    # transformers' schedules, as TrainingArguments names them; stepped once per training step,
    # so with num_iterations > 1 the epochs over one batch share its rate.
    scheduler = get_scheduler(
        cfg.grpo.lr_scheduler_type,
        optimizer,
        num_warmup_steps=cfg.grpo.warmup_steps,
        num_training_steps=cfg.grpo.max_steps,
    )
    # A fresh run directory, or the checkpoint's step, weights, optimizer and RNG states.
    start_step, summary = open_run_dir(out, existing, resume_from, model, optimizer, rng, cfg)
    # The loaded optimizer state holds the rate the schedule had reached; the schedule's
    # position is its step, which needs no state of its own.
    scheduler.last_epoch = start_step
    metrics_path = out / "metrics.jsonl"
    # The text the tasks were played in: --task_text auto resolves by the tokenizer.
    summary["task_text"] = resolve_task_text(cfg.task.task_text, tokenizer)
    # Which base the flags loaded: the study reuses a run only on the same one (minirl.study.run).
    summary["base_model"] = base_identity(cfg.model.model, cfg.task.task)

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
            summary["open_loop"] = open_loop(cfg)  # what ignoring every observation wins
            summary["base"] = evaluate_policy(model, tokenizer, cfg, out, "base", trackers, 0)
        job = bar.add_task("train", total=cfg.grpo.max_steps, completed=start_step, metrics="")
        for step in range(start_step, cfg.grpo.max_steps):
            m = train_step(model, tokenizer, optimizer, cfg, rng, step)
            m["learning_rate"] = optimizer.param_groups[0]["lr"]  # the rate this step trained at
            scheduler.step()
            # The per-group budget lists go to summary.json's tally, not to metrics.jsonl: a
            # metrics line holds scalars only, which every tracker can store as they are.
            drawn, trained = m.pop("budgets_drawn"), m.pop("budgets_trained")
            summary["budgets"] = tally_budgets(summary.get("budgets"), drawn, trained)
            history.append(m)
            with metrics_path.open("a") as f:
                f.write(json.dumps(m) + "\n")
            trackers.log_metrics(m)
            check_not_diverged(model, step + 1, cfg.grpo.learning_rate)  # before it is saved
            bar.update(job, advance=1, metrics=metric_line(m))
            if progress and (step + 1) % cfg.grpo.logging_steps == 0:
                # A plain line too: it survives in logs and CI, where no live bar is drawn.
                bar.console.print(f"step {step + 1}/{cfg.grpo.max_steps} " + metric_line(m))
            if (step + 1) % cfg.grpo.save_steps == 0 or step + 1 == cfg.grpo.max_steps:
                save_checkpoint(out, model, trainer_state(step + 1, optimizer, rng, cfg, summary))
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
    """One GRPO step: play, score, update, report. Returns its metrics."""
    g, b, task = cfg.grpo, cfg.budget, cfg.task
    start = time.perf_counter()
    # 1. Play this step's groups: G episodes of each drawn instance at its budget T, all in one
    #    batched rollout on a sampling copy of the policy; with dynamic_sampling, groups whose
    #    rewards tie are replaced by new draws (minirl.groups).
    played = play_groups(model, tokenizer, cfg, rng)
    rollout_seconds = time.perf_counter() - start

    updates: list[Update] = []
    if played.trained:  # empty only when dynamic sampling found no group with a signal
        # 2. Score: advantages on every assistant token (0 on observations and padding).
        batch = to_batch(played.episodes, tokenizer.pad_token_id, next(model.parameters()).device)
        advantages, _ = grpo.token_advantages(
            played.rewards,
            batch.loss_mask,
            g.num_generations,
            g.scale_rewards,
            turn_rewards=played.turn_rewards,
            turn_index=batch.turn_index,
            actions=[[t.action for t in e.turns] for e in played.episodes],
            step_advantage_w=g.step_advantage_w,
            gamma=g.gamma,
        )
        ref_logps = None
        if g.beta > 0:  # the KL reference: the same model with its adapters switched off
            with reference_policy(model):
                ref_logps = bucketed_logps(
                    model, batch, g.temperature, g.per_device_train_batch_size
                )

        # 3. Update: num_iterations epochs of the clipped surrogate over the same episodes, each
        #    one optimizer step on gradients accumulated micro-batch by micro-batch.
        model.train()
        longest = task.max_new_tokens * (b.budget if b.mode == "fixed" else b.budget_max)
        for _ in range(g.num_iterations):
            updates.append(
                update(
                    model,
                    optimizer,
                    batch,
                    advantages,
                    g,
                    max_completion_length=longest,  # dr_grpo's constant
                    ref_logps=ref_logps,
                )
            )
        model.eval()

    # 4. Report: the policy's play over every drawn group, and what the updates did.
    skipped = [u.skipped for u in updates if u.skipped] or ([] if updates else ["every group tied"])
    for why in skipped:
        warnings.warn(f"step {step}: {why}; update skipped", stacklevel=1)
    taken = [u for u in updates if not u.skipped]
    drawn = [e for group in played.drawn for e in group.episodes]
    rewards = [r for group in played.drawn for r in group.rewards]
    return {
        "step": step + 1,
        "reward": sum(rewards) / len(rewards),
        **episode_stats(drawn),
        **played.metrics(),
        "loss": sum(u.gradient.loss for u in taken) / len(taken) if taken else float("nan"),
        "kl": taken[-1].gradient.stats.get("kl", 0.0) if taken else 0.0,
        "clip_ratio": taken[-1].gradient.stats.get("clip_ratio", 0.0) if taken else 0.0,
        "entropy": updates[-1].gradient.entropy if updates else float("nan"),
        "grad_norm": taken[-1].grad_norm if taken else 0.0,
        "skipped_updates": len(skipped),
        "padding_fraction": updates[-1].gradient.padding_fraction if updates else 0.0,
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
