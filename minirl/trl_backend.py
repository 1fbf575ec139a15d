"""`--backend trl`: the same tasks, budgets and rewards, trained by `trl.GRPOTrainer`.

minirl's own loop (minirl.trainer) is for reading and for one GPU. TRL's trainer runs on
accelerate, so `accelerate launch train.py --backend trl` spreads a step over several GPUs (and
DeepSpeed, through an accelerate config). Three pieces plug minirl into it:

1. `episode_dataset`: one row per task instance, whose "prompt" is the episode spec
   {task, seed, budget}, drawn by minirl.budgets.draw_groups as minirl.trainer draws them (so
   both backends play the same instances and budgets from the same seed). TRL's sampler repeats
   each row `num_generations` times in a row, so the G episodes of a group share their instance
   and their T: BudgetMix draws one T per group here too.
2. `make_rollout_func`: TRL hands it the prompt rows of this process *as the sampler laid them
   out* (each spec already G times; TRL adds no copies) and expects one completion per row. It
   plays them with minirl.rollout and returns `prompt_ids` (system + first observation),
   `completion_ids` (every later token: replies and observations alike), `logprobs`, `env_mask`
   (1 on sampled reply tokens, 0 on observations and template) and per-episode `reward`,
   `success`, `turns`, `budget` and `invalid`, which TRL forwards to `episode_reward`.
3. `grpo_config`: minirl's Config mapped onto `GRPOConfig`; `MAPPING` documents every field
   whose mapping is not 1:1.

Outputs match minirl's runs where they can: OUTPUT/checkpoint-N (TRL's own checkpoints: adapter,
optimizer, RNG), the final adapter in OUTPUT itself, OUTPUT/metrics.jsonl (TRL's log lines),
OUTPUT/summary.json (held-out success before and after), OUTPUT/trainer_state.json with the
minirl config, which evaluate.py reads to check the task and base model, and the pictures of
minirl.rundir.outputs (curves.png, episodes.html); `--report_to` goes to GRPOConfig (see MAPPING).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path
from unittest import mock

import torch
from accelerate import PartialState
from datasets import Dataset
from transformers import PreTrainedTokenizerBase, TrainerCallback
from transformers.trainer_callback import PrinterCallback, ProgressCallback
from trl import GRPOConfig, GRPOTrainer
from trl.models import unwrap_model_for_generation

from minirl.budgets import draw_groups
from minirl.chat import resolve_task_text
from minirl.config import Config, validate
from minirl.episode import Episode, EpisodeSpec
from minirl.infra.errors import ConfigError, DataError
from minirl.infra.readback import read_json
from minirl.models import base_identity, load_policy
from minirl.rewards import invalid_penalty_for, outcome_rewards
from minirl.rollout import rollout_in_chunks
from minirl.rundir.checkpoint import (
    TrainResult,
    check_init_adapter,
    check_not_diverged,
    check_output_dir,
    metrics_up_to,
    resume_point,
    sole_writer,
)
from minirl.rundir.outputs import evaluate_policy, finish_run, open_loop
from minirl.rundir.trackers import PROJECT, Trackers, check_trackers, environment, tracking

# Fields of GRPOConfig that minirl sets from something other than the field of the same name.
# Every other field minirl passes (num_generations, learning_rate, beta, epsilon, epsilon_high,
# num_iterations, loss_type, scale_rewards, temperature, max_grad_norm, seed, output_dir) means
# the same in both and is copied as is.
MAPPING: dict[str, str] = {
    "per_device_train_batch_size": "the same name and meaning (episodes per forward pass), "
    "capped at tasks_per_step * num_generations / number of processes; TRL does not sort the "
    "micro-batches by length as minirl.logprobs.micro_batches does.",
    "gradient_accumulation_steps": "the micro-batches that make up one process's share of a "
    "rollout batch, so one optimizer step sees the whole batch, as in minirl.",
    "steps_per_generation": "= gradient_accumulation_steps: a new rollout batch for every "
    "optimizer step.",
    "max_steps": "max_steps * num_iterations: TRL counts optimizer steps, minirl counts rollout "
    "batches (each followed by num_iterations epochs).",
    "save_steps": "save_steps * num_iterations, for the same reason.",
    "max_completion_length": "max_new_tokens * the largest T: the most *assistant* tokens an "
    "episode can have. minirl's rollout ignores it (its own limits are per turn); it is only "
    "dr_grpo's constant denominator, the same one minirl uses.",
    "mask_truncated_completions": "False: a reply cut by max_new_tokens ends its turn, not the "
    "episode (minirl closes it with an eos that env_mask leaves out), so TRL never sees a "
    "truncated episode.",
    "shuffle_dataset": "False: the dataset is already a seeded random draw in step order.",
    "lr_scheduler_type, warmup_steps": "minirl's, with warmup_steps * num_iterations: TRL "
    "steps the schedule once per optimizer step, minirl once per rollout batch (the same "
    "rates when num_iterations is 1; with more, TRL's rate also moves between the epochs over "
    "one batch). minirl's default is constant, not TRL's linear.",
    "weight_decay": "0: minirl's plain AdamW.",
    "gradient_checkpointing": "minirl's --gradient_checkpointing, non-reentrant as in "
    "minirl.models. Unset, minirl turns it on for a pretrained chat model when it loads the "
    "model and passes False here, so TRL leaves the model as loaded (GRPOConfig defaults to "
    "True).",
    "generation_batch_size": "not passed: GRPOConfig's default (one generation for the step's "
    "episodes) stays, and minirl's rollout_func plays what TRL hands it in chunks of "
    "minirl's --generation_batch_size episodes, as minirl's trainer does.",
    "bf16": "True only on a CUDA device with bf16 support (GRPOConfig defaults to True, which on "
    "a CPU would run the training forward in bf16 autocast).",
    "save_total_limit": "2, as minirl.rundir.checkpoint keeps the two newest checkpoints.",
    "report_to": "the same name and meaning; TRL's callbacks log TRL's metrics to each tracker, "
    "pointed at minirl's places (OUTPUT/tensorboard, trackio project 'minirl', offline W&B in "
    "OUTPUT/wandb; minirl.rundir.trackers.environment), and run_name is the output directory's "
    "name. "
    "The before/after evaluation and the sample episodes are logged there after training. "
    "OUTPUT/metrics.jsonl is written whatever report_to says.",
    "run_name, project": "the output directory's name, and 'minirl': trackio's and W&B's run "
    "and project, as minirl.rundir.trackers names them.",
    "logging_steps": "1: TRL averages what it logs over the steps since its last log, and after "
    "a resume that window starts at the resume, so a line would differ from the uninterrupted "
    "run's. Logged every step, each metrics.jsonl line is one step's numbers, as in minirl; "
    "the console shows every --logging_steps-th (PrintEvery). TRL's closing line (train_loss, "
    "train_runtime) covers only the steps this process ran and stays out of metrics.jsonl.",
    "use_bias_correction_kl": "False: minirl's k3 KL term is not multiplied by the ratio rho. "
    "TRL 1.16 defaults to True (DeepSeek-V3.2's unbiased KL gradient); it changes the loss only "
    "when beta > 0.",
    "(adapter dtype)": "fp32, as minirl.models makes them: GRPOTrainer casts a quantized "
    "model's LoRA weights to bf16, and build_trainer puts the exact fp32 values back (a cast "
    "back would keep bf16's rounding, which would move an --init_adapter).",
}


def episode_dataset(cfg: Config) -> Dataset:
    """max_steps * tasks_per_step episode specs, drawn as minirl.trainer.train_step draws them."""
    rng = random.Random(cfg.grpo.seed)
    rows = [
        {"prompt": {"task": cfg.task.task, "seed": seed, "budget": budget}}
        for _ in range(cfg.grpo.max_steps)
        for seed, budget in draw_groups(cfg, rng)
    ]
    return Dataset.from_list(rows)


def to_trl(
    episodes: list[Episode], invalid_penalty: float, mistake_penalty: float = 0.0
) -> dict[str, list]:
    """Split each episode into TRL's prompt and completion, with the mask and the extra fields."""
    out: dict[str, list] = {
        key: []
        for key in ("prompt_ids", "completion_ids", "logprobs", "env_mask")
        + ("reward", "success", "turns", "budget", "invalid")
    }
    # TRL's advantage is per episode (outcome mode only), so the mistake penalty is in R_i.
    rewards = outcome_rewards(episodes, invalid_penalty, mistake_penalty)
    for episode, reward in zip(episodes, rewards, strict=True):
        # The prompt is everything before the first sampled token; every reply has at least one.
        start = episode.loss_mask.index(1)
        out["prompt_ids"].append(episode.input_ids[:start])
        out["completion_ids"].append(episode.input_ids[start:])
        out["logprobs"].append(episode.logprobs[start:])
        out["env_mask"].append(episode.loss_mask[start:])
        out["reward"].append(reward)
        out["success"].append(float(episode.success))
        out["turns"].append(episode.turns_used)
        out["budget"].append(episode.budget)
        out["invalid"].append(sum(not turn.valid for turn in episode.turns))
    return out


def check_rollout_output(output: dict[str, list], num_prompts: int) -> None:
    """The two contract errors TRL would only report as a shape error deep inside a step."""
    for key, rows in output.items():
        if len(rows) != num_prompts:
            raise ValueError(
                f"rollout_func returned {len(rows)} {key} for {num_prompts} prompts: TRL's prompts "
                "already hold each instance num_generations times, so return one episode per prompt"
            )
    for i, (ids, mask) in enumerate(zip(output["completion_ids"], output["env_mask"], strict=True)):
        if len(ids) != len(mask):
            raise ValueError(
                f"episode {i}: env_mask has {len(mask)} entries for {len(ids)} completion tokens"
            )


def make_rollout_func(
    cfg: Config, tokenizer: PreTrainedTokenizerBase
) -> Callable[[list[dict], GRPOTrainer], dict[str, list]]:
    """The `rollout_func` for GRPOTrainer: one minirl episode per prompt row it is given."""
    text = resolve_task_text(cfg.task.task_text, tokenizer)

    def rollout_func(prompts: list[dict], trainer: GRPOTrainer) -> dict[str, list]:
        specs = [EpisodeSpec(p["task"], p["seed"], p["budget"]) for p in prompts]
        # Under DDP or DeepSpeed the trainer holds a wrapped model; generate needs the module
        # itself (with ZeRO-3 parameters gathered), as TRL's own generation does.
        with unwrap_model_for_generation(
            trainer.model_wrapped,
            trainer.accelerator,
            gather_deepspeed3_params=trainer.args.ds3_gather_for_generation,
        ) as model:
            episodes = rollout_in_chunks(
                model,
                tokenizer,
                specs,
                cfg.grpo.generation_batch_size,
                engine=cfg.grpo.rollout_engine,
                max_new_tokens=cfg.task.max_new_tokens,
                temperature=cfg.grpo.temperature,
                budget_visible=cfg.budget.budget_visible,
                task_text=text,
                reuse_cache=cfg.grpo.reuse_kv_cache,
            )
        output = to_trl(
            episodes,
            invalid_penalty_for(cfg.task.invalid_penalty, text),
            cfg.task.mistake_penalty,
        )
        check_rollout_output(output, len(prompts))
        return output

    return rollout_func


def episode_reward(
    completions: list,
    reward: list[float],
    success: list[float],
    turns: list[int],
    budget: list[int],
    invalid: list[int],
    log_metric: Callable[[str, float], None] | None = None,
    **kwargs: object,
) -> list[float]:
    """TRL's reward function: the reward rollout_func computed (success - invalid penalty).

    It also logs the rollout statistics minirl's trainer logs, under the same names.
    """
    if log_metric is not None:
        n = len(reward)
        log_metric("success", sum(success) / n)
        log_metric("turns", sum(turns) / n)
        log_metric("budget", sum(budget) / n)
        log_metric("invalid_rate", sum(invalid) / max(1, sum(turns)))
    return [float(r) for r in reward]


def grpo_config(
    cfg: Config, output_dir: str, num_processes: int = 1, progress: bool = True
) -> GRPOConfig:
    """minirl's Config as a GRPOConfig; see MAPPING for the fields that are not copied as is."""
    g, b, task = cfg.grpo, cfg.budget, cfg.task
    episodes = task.tasks_per_step * g.num_generations
    if episodes % num_processes:
        raise ConfigError(
            f"--tasks_per_step * --num_generations = {episodes} episodes per step must split "
            f"evenly over {num_processes} processes"
        )
    per_process = episodes // num_processes
    micro = min(g.per_device_train_batch_size, per_process)
    if per_process % micro:
        raise ConfigError(
            f"--per_device_train_batch_size {micro} must divide the {per_process} episodes each "
            "process trains on per step (--backend trl has no ragged last micro-batch)"
        )
    accumulation = per_process // micro
    cuda = torch.cuda.is_available()
    return GRPOConfig(
        output_dir=output_dir,
        num_generations=g.num_generations,
        learning_rate=g.learning_rate,
        beta=g.beta,
        epsilon=g.epsilon,
        epsilon_high=g.epsilon_high,
        num_iterations=g.num_iterations,
        loss_type=g.loss_type,
        scale_rewards=g.scale_rewards,
        temperature=g.temperature,
        max_grad_norm=g.max_grad_norm,
        seed=g.seed,
        logging_steps=1,
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=accumulation,
        steps_per_generation=accumulation,
        max_steps=g.max_steps * g.num_iterations,
        save_steps=g.save_steps * g.num_iterations,
        max_completion_length=task.max_new_tokens
        * (b.budget if b.mode == "fixed" else b.budget_max),
        mask_truncated_completions=False,
        use_bias_correction_kl=False,
        shuffle_dataset=False,
        lr_scheduler_type=g.lr_scheduler_type,
        warmup_steps=g.warmup_steps * g.num_iterations,
        weight_decay=0.0,
        optim="adamw_torch",
        # Unset (None) leaves it to load_policy, which turns it on for a chat model before TRL
        # sees the model; True asks TRL too, which is the same switch.
        gradient_checkpointing=bool(g.gradient_checkpointing),
        gradient_checkpointing_kwargs={"use_reentrant": False},
        bf16=cuda and torch.cuda.is_bf16_supported(),
        fp16=False,
        save_total_limit=2,
        report_to=cfg.grpo.report_to,
        run_name=Path(output_dir).name,
        project=PROJECT,
        disable_tqdm=not progress,
    )


def process_state() -> PartialState:
    """This process's place in the launch: one process, or one of `accelerate launch`'s.

    Without a GPU, accelerate forms a process group only when told it runs on the CPU.
    """
    return PartialState(cpu=not torch.cuda.is_available())


class MetricsFile(TrainerCallback):
    """Append each step's log line to OUTPUT/metrics.jsonl (the file minirl's runs write)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def on_log(self, args, state, control, logs=None, **kwargs) -> None:  # noqa: ANN001
        # The closing line covers only this process's steps: after a resume it would differ.
        closing = logs is not None and "train_runtime" in logs
        if logs is not None and not closing and state.is_world_process_zero:
            with self.path.open("a") as f:
                f.write(json.dumps({"step": state.global_step, **logs}) + "\n")


class PrintEvery(ProgressCallback):
    """TRL's progress bar, printing the log of every `every`-th step (TRL now logs every step)."""

    def __init__(self, every: int) -> None:
        super().__init__()
        self.every = every

    def on_log(self, args, state, control, logs=None, **kwargs) -> None:  # noqa: ANN001
        if state.global_step % self.every == 0 or (logs and "train_runtime" in logs):
            super().on_log(args, state, control, logs=logs, **kwargs)


class StopIfDiverged(TrainerCallback):
    """minirl.rundir.checkpoint.check_not_diverged after every optimizer step, before TRL saves
    it."""

    def __init__(self, model: torch.nn.Module, cfg: Config) -> None:
        self.model, self.cfg = model, cfg

    def on_step_end(self, args, state, control, **kwargs) -> None:  # noqa: ANN001
        step = state.global_step // self.cfg.grpo.num_iterations
        check_not_diverged(self.model, step, self.cfg.grpo.learning_rate)


def build_trainer(
    cfg: Config,
    model,
    tokenizer,
    output_dir: str,
    progress: bool = True,  # noqa: ANN001
) -> GRPOTrainer:
    """A GRPOTrainer wired to minirl's rollout, reward and config; `model` is a peft model."""
    args = grpo_config(cfg, output_dir, process_state().num_processes, progress)
    # The adapters' exact fp32 values, to put back below: casting TRL's bf16 copies back to fp32
    # would keep bf16's rounding (up to 1/256 of each weight), which moves an --init_adapter.
    exact = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    with warnings.catch_warnings():  # TRL warns that rollout_func is experimental; we know
        warnings.filterwarnings("ignore", message=".*rollout_func.*experimental")
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=episode_reward,
            args=args,
            train_dataset=episode_dataset(cfg),
            processing_class=tokenizer,
            rollout_func=make_rollout_func(cfg, tokenizer),
        )
    # TRL casts the adapters of a quantized model to bf16 (QLoRA's advice); minirl keeps peft's
    # fp32 adapters. Put them back, before train() builds the optimizer, so both backends train the
    # same parameters: bf16 weights would also round away AdamW steps below 1/256 of a weight.
    for name, param in model.named_parameters():
        if param.requires_grad:
            param.data = exact[name] if name in exact else param.data.float()
    return trainer


def train_trl(cfg: Config, progress: bool = True) -> TrainResult:
    """Train with GRPOTrainer; the same run directory rules and outputs as minirl.trainer.train."""
    validate(cfg)
    state = process_state()
    # One run writes a directory at a time; the processes of one launch are one run.
    writer = sole_writer(cfg.output_dir, "--output_dir")
    with writer if state.is_main_process else contextlib.nullcontext():
        return _train_trl(cfg, state, progress)


def _train_trl(cfg: Config, state: PartialState, progress: bool) -> TrainResult:
    out = Path(cfg.output_dir)
    existing = check_output_dir(out, cfg)
    check_trackers(cfg.grpo.report_to, out)  # before the model loads, not after the run
    resume_from = resume_point(existing, cfg) if cfg.grpo.resume else None
    if cfg.model.init_adapter:  # checked before the base model loads, not after
        check_init_adapter(cfg.model.init_adapter, cfg.model.lora_r, cfg.model.lora_alpha)
    torch.manual_seed(cfg.grpo.seed)
    model, tokenizer = load_policy(
        cfg.model.model,
        cfg.model.quant,
        cfg.model.lora_r,
        cfg.model.lora_alpha,
        cfg.model.lora_dropout,
        # Each process puts its copy on its own GPU (accelerate sets LOCAL_RANK).
        device=state.device,
        adapter=cfg.model.init_adapter or None,
        task=cfg.task.task,
        gradient_checkpointing=cfg.grpo.gradient_checkpointing,
        dtype=cfg.model.dtype,
    )
    metrics_path, summary_path = out / "metrics.jsonl", out / "summary.json"
    summary: dict = {
        "config": cfg.to_dict(),
        "backend": "trl",
        "task_text": resolve_task_text(cfg.task.task_text, tokenizer),
    }
    if state.is_main_process:
        if resume_from is not None:
            # Lines logged after the checkpoint will be logged again; the base evaluation of the
            # interrupted run is kept.
            step = int(resume_from.name.split("-")[1])
            metrics_path.write_text("".join(x + "\n" for x in metrics_up_to(metrics_path, step)))
            if summary_path.exists():
                summary = read_json(summary_path)
                if not isinstance(summary, dict):
                    raise DataError(f"{summary_path} is not a run's summary: delete it to resume")
        else:
            out.mkdir(parents=True, exist_ok=True)
            for old in existing:  # --overwrite_output_dir
                shutil.rmtree(old)
            for name in ("adapter_model.safetensors", "adapter_config.json", "trainer_state.json"):
                (out / name).unlink(missing_ok=True)
            metrics_path.write_text("")
            (out / "episodes.json").unlink(missing_ok=True)
            if cfg.grpo.eval_seeds:  # no tracker is open yet: it is logged after training
                summary["open_loop"] = open_loop(cfg)  # what ignoring every observation wins
                summary["base"] = evaluate_policy(model, tokenizer, cfg, out, "base", Trackers(), 0)
            summary["base_model"] = base_identity(cfg.model.model, cfg.task.task)
            summary_path.write_text(json.dumps(summary, indent=1))
    state.wait_for_everyone()

    # TRL's tracker callbacks read where to write from the environment; set it for this run only.
    with mock.patch.dict(os.environ, environment(cfg.grpo.report_to, out)):
        trainer = build_trainer(cfg, model, tokenizer, str(out), progress)
        trainer.add_callback(MetricsFile(metrics_path))
        trainer.add_callback(StopIfDiverged(model, cfg))
        if trainer.pop_callback(ProgressCallback) is not None:
            trainer.add_callback(PrintEvery(cfg.grpo.logging_steps))
        trainer.pop_callback(PrinterCallback)  # progress=False: quiet
        trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
        trainer.save_model(str(out))  # the final adapter, so OUTPUT itself is an adapter directory

        if state.is_main_process:
            # Into the runs TRL's callbacks logged to (continued, for trackio), at TRL's steps.
            last = trainer.state.global_step
            with tracking(cfg.grpo.report_to, out, cfg.to_dict(), resume=True) as trackers:
                if "base" in summary:
                    trackers.log_eval(summary["base"], 0)
                if cfg.grpo.eval_seeds:
                    summary["trained"] = evaluate_policy(
                        trainer.accelerator.unwrap_model(model),
                        tokenizer,
                        cfg,
                        out,
                        "trained",
                        trackers,
                        last,
                    )
                summary["steps"] = cfg.grpo.max_steps
                summary_path.write_text(json.dumps(summary, indent=1))
                # The file evaluate.py reads to refuse a checkpoint trained on another task/base.
                meta = {"step": cfg.grpo.max_steps, "config": cfg.to_dict(), "summary": summary}
                (out / "trainer_state.json").write_text(json.dumps(meta, indent=1))
                finish_run(out, trackers, last)  # curves.png, episodes.html
    history = [json.loads(line) for line in metrics_path.read_text().splitlines() if line]
    return TrainResult(out, cfg.grpo.max_steps, history, summary)
