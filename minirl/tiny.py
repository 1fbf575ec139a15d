"""The embedded default base, `--model tiny`: built here, cached, then loaded like a hub model.

No model hub is reachable in many classrooms, so minirl makes its own small base:

1. a word-level `PreTrainedTokenizerFast` over the tasks' words, with a ChatML chat template;
2. a ~0.9M-parameter Llama-architecture causal LM (hidden 128, 4 layers; widths are multiples of
   64 because bitsandbytes' CPU NF4 kernels quantize in blocks of 64). Llama rather than Qwen2:
   transformers 5 forces its own BPE tokenizer class on `qwen2` checkpoints, which would discard
   our word-level pipeline on reload;
3. a short supervised warm start on *noisy* oracle demonstrations: at each turn the demonstrator
   plays a uniformly random action with probability epsilon and an oracle-optimal one otherwise.
   The loss is next-token cross-entropy on the assistant tokens only, over whole multi-turn
   conversations laid out exactly as rollouts lay them out (minirl.chat), so every reply is a
   (history -> action) example. The result is imperfect but not hopeless, like an instruct model
   meeting a new task, which leaves RL something to improve. epsilon is set per task
   (TASK_RECIPES) so that each base starts well below the oracle and above the uniform plateau:
   sokoban's deadlocks keep a base at epsilon 0.5 on that plateau, so it uses 0.3 (the bases'
   measured success per task is in tutorials/measured.md).

The build is deterministic in its recipe. It is saved with `save_pretrained` under
`<cache>/minirl/tiny-<hash of the recipe>`, so every later run loads it with
`AutoModelForCausalLM.from_pretrained` exactly as it would load `Qwen/Qwen2.5-0.5B-Instruct`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

import tasks
from minirl.chat import budget_text, encode_conversation
from minirl.config import MAX_TURNS
from minirl.infra.model_cache import build_lock, cache_root, write_directory_atomically
from minirl.infra.progress import progress_bar, without_library_bars

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "[UNK]"]


@dataclass(frozen=True)
class TinyRecipe:
    """Everything that determines the tiny base; its hash is the cache key."""

    seed: int = 0
    """Seed for the demonstrations, the initial weights and the batch order."""
    hidden_size: int = 128
    """Model width (a multiple of 64 for the CPU NF4 kernels)."""
    num_hidden_layers: int = 4
    """Transformer blocks."""
    num_attention_heads: int = 4
    """Attention heads per block."""
    intermediate_size: int = 384
    """MLP width (a multiple of 64)."""
    epsilon: float = 0.5
    """Probability that a demonstrated turn is a uniformly random action, not the oracle's."""
    tasks: tuple[tuple[str, float], ...] = (("gridnav", 1.0),)
    """Task mixture of the demonstrations: (name, weight). `for_task` makes one per task."""
    budget_min: int = 2
    """Shortest demonstrated turn budget (the budget is shown as "turns left: k")."""
    budget_max: int = 12
    """Longest demonstrated turn budget."""
    max_steps: int = 200
    """Optimizer steps of the warm start."""
    batch_size: int = 32
    """Conversations per optimizer step."""
    learning_rate: float = 3e-3
    """Peak AdamW learning rate (linear warmup, then linear decay to zero)."""
    warmup_steps: int = 30
    """Linear warmup steps."""
    version: int = 1
    """Bumped when the build code changes in a way the fields above do not capture."""
    demonstrator: str = "uniform"
    """What the demonstrations do after an error (DEMONSTRATORS): "uniform" noise at every turn
    (no recovery deficit), "sticky" (repeats a failed action) or "truncated" (stop at it)."""
    stick: float = 0.6
    """For "sticky": the chance that the turn after a failed error repeats it."""

    @classmethod
    def for_task(cls, task: str, demonstrator: str = "uniform") -> TinyRecipe:
        """The default recipe, warm-started on one task (`tiny`; `tiny-<demonstrator>`).

        One base per task, not one for all: at this size a four-task mixture stayed at the
        uniform-action plateau for the whole build budget (loss 0.80 against an optimum of 0.57
        after 300 steps), while gridnav alone left it within 40 steps.
        """
        if demonstrator not in DEMONSTRATORS:
            raise ValueError(f"unknown demonstrator {demonstrator!r}; one of {DEMONSTRATORS}")
        recipe = cls(tasks=((task, 1.0),), **TASK_RECIPES.get(task, {}), demonstrator=demonstrator)
        if demonstrator == "sticky" and task in STICK:
            recipe = dataclasses.replace(recipe, stick=STICK[task])
        return recipe

    def key(self) -> str:
        fields = dataclasses.asdict(self)
        if self.demonstrator == "uniform":  # added later: today's bases keep their keys (caches)
            del fields["demonstrator"], fields["stick"]
        blob = json.dumps(fields, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


# The demonstrators of the warm start. A pretrained agent is not uniformly noisy: once off the
# path its training showed it, it loops and repeats what just failed. "uniform" has no such
# failure mode (a state after an error looks like any other to it: the study's control);
# "sticky" repeats a *failed* error (a non-optimal action the environment reported as failing:
# a bump, a refuted guess, "nothing happens") with probability `stick`, and a repeat that fails
# again may be repeated again: the loop. Only failures the conversation shows trigger it, so
# the base can learn when to loop (a detour looks like any move); "truncated" ends every
# demonstration at its first error, so the states after an error are off the training
# distribution, as they are for an agent cloned from successful demonstrations only.
DEMONSTRATORS: tuple[str, ...] = ("uniform", "sticky", "truncated")


# Per-task departures from the default recipe, each measured (see the module docstring). Keys
# not named here keep the defaults, so the other tasks' bases (and their cache keys) do not move.
TASK_RECIPES: dict[str, dict] = {
    # At the default epsilon the fog base already won 0.65 at T = 12: too little room for RL.
    "fog": {"epsilon": 0.7},
    # At the default epsilon the house base won 0.145 at T = 12: too little success to learn from.
    "house": {"epsilon": 0.3},
    # At 0.5 sokoban's base stayed at the uniform plateau (0.01 / 0.00 / 0.03 at T = 4 / 8 / 12):
    # half the demonstrated pushes were random, and a random push often deadlocks. At 0.3 it
    # learns (measured below); 300 steps added little (0.31 against 0.28 at T = 12) for 230 s.
    "sokoban": {"epsilon": 0.3},
}

# Per-task stickiness of the "sticky" demonstrator (default `stick`: 0.6). At 0.6 fog's base
# learned no loop at all: the same-position deficit of minirl.eval.position was +0.001 +- 0.000
# log-odds (gridnav's -0.314 +- 0.075, house's -0.401 +- 0.072); at 0.9 it is -1.126 +- 0.085,
# with P(repeat the failed action) 0.321 before the failure and 0.687 after it (measured.md).
STICK: dict[str, float] = {"fog": 0.9}


# --- demonstrations ------------------------------------------------------------------------------


@dataclass
class Demo:
    """One noisy-oracle conversation, as text."""

    task: str
    system: str
    observations: list[str]
    replies: list[str]
    success: bool
    expert_entropy: list[float]  # entropy (nats) of the demonstrator's action choice at each turn


def noisy_demo(
    task: str,
    seed: int,
    budget: int,
    epsilon: float,
    rng: random.Random,
    demonstrator: str = "uniform",
    stick: float = 0.6,
) -> Demo:
    """Play one episode with the epsilon-noisy oracle, with the budget visible as in rollouts.

    After an error (a non-optimal action) the demonstrator does what DEMONSTRATORS says; for
    "uniform" it draws exactly what it always drew, so today's bases are unchanged.
    """
    env = tasks.make(task)
    obs = env.reset(seed)
    observations, replies = [budget_text(obs, budget)], []
    success = False
    entropies: list[float] = []
    failed = False  # was the previous action an error that the environment reported failing?
    for turn in range(budget):
        optimal = sorted(env.optimal_actions())
        entropy = _mixture_entropy(len(env.action_words), len(optimal), epsilon)
        if demonstrator == "sticky" and failed:
            entropies.append(
                _sticky_entropy(env.action_words, optimal, replies[-1], epsilon, stick)
            )
            repeat = rng.random() < stick
        else:
            entropies.append(entropy)
            repeat = False
        if repeat:
            action = replies[-1]
        elif rng.random() < epsilon:
            action = rng.choice(env.action_words)
        else:
            action = rng.choice(optimal)
        step = env.step(action)
        replies.append(action)
        success = step.info["success"]
        erred = action not in optimal
        failed = erred and bool(step.info.get("mistake") or step.info.get("error"))
        if step.done or (demonstrator == "truncated" and erred):
            break
        observations.append(budget_text(step.observation, budget - turn - 1))
    return Demo(task, env.system_prompt, observations[: len(replies)], replies, success, entropies)


def _sticky_entropy(
    words: tuple[str, ...], optimal: list[str], last: str, epsilon: float, stick: float
) -> float:
    """Entropy of "repeat `last` w.p. stick, else the epsilon-noisy oracle's choice"."""
    probs = [
        stick * (a == last)
        + (1 - stick) * (epsilon / len(words) + (1 - epsilon) * (a in optimal) / len(optimal))
        for a in words
    ]
    return -sum(p * math.log(p) for p in probs if p > 0)


def _mixture_entropy(n_words: int, n_optimal: int, epsilon: float) -> float:
    """Entropy of "uniform over all n_words w.p. epsilon, else uniform over the n_optimal"."""
    p_opt = epsilon / n_words + (1 - epsilon) / n_optimal
    p_rest = epsilon / n_words
    ent = -n_optimal * p_opt * math.log(p_opt)
    if n_words > n_optimal and p_rest > 0:
        ent -= (n_words - n_optimal) * p_rest * math.log(p_rest)
    return ent


def demo_stream(recipe: TinyRecipe, rng: random.Random):
    """An endless, seeded stream of demonstrations from the recipe's task mixture."""
    names = [name for name, _ in recipe.tasks]
    weights = [w for _, w in recipe.tasks]
    while True:
        task = rng.choices(names, weights)[0]
        seed = rng.choice(tasks.TRAIN_SEEDS)
        budget = rng.randint(recipe.budget_min, recipe.budget_max)
        yield noisy_demo(task, seed, budget, recipe.epsilon, rng, recipe.demonstrator, recipe.stick)


# --- tokenizer and model -------------------------------------------------------------------------


def corpus_words(recipe: TinyRecipe, rng: random.Random, episodes: int = 400) -> list[str]:
    """Text that covers every word the tasks can show: prompts, actions, sampled observations."""
    # Every "turns left" count a run can show: config.MAX_TURNS caps the budgets for this reason.
    counts = " ".join(str(i) for i in range(MAX_TURNS + 1))
    lines = ["system user assistant turns left :", counts]
    for name, _ in recipe.tasks:
        env = tasks.make(name)
        lines.append(env.system_prompt)
        lines.append(" ".join(env.action_words))
    # The uniform demonstrator's words: a truncated one never shows what follows an error.
    stream = demo_stream(dataclasses.replace(recipe, epsilon=0.7, demonstrator="uniform"), rng)
    for _ in range(episodes):
        demo = next(stream)
        lines.extend(demo.observations)
    return lines


def build_tokenizer(lines: list[str]) -> PreTrainedTokenizerFast:
    """A word-level tokenizer: words, integers, punctuation and newlines are one token each.

    Hand-built with the `tokenizers` library (not a BPE) because the tasks' language is a closed
    set of ~100 words; a one-token-per-word vocabulary keeps the model tiny and its inputs legible.
    """
    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(r"[ \t]+"), "removed"),
            pre_tokenizers.Split(Regex(r"\n"), "isolated"),
            pre_tokenizers.Punctuation("isolated"),
        ]
    )
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with spaces
    tok.train_from_iterator(lines, trainers.WordLevelTrainer(special_tokens=SPECIAL_TOKENS))
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        pad_token="<|endoftext|>",
        eos_token="<|im_end|>",
        additional_special_tokens=["<|im_start|>"],
        model_max_length=2048,
    )
    fast.chat_template = CHATML_TEMPLATE
    return fast


def build_model(recipe: TinyRecipe, tokenizer: PreTrainedTokenizerFast) -> LlamaForCausalLM:
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=recipe.hidden_size,
        intermediate_size=recipe.intermediate_size,
        num_hidden_layers=recipe.num_hidden_layers,
        num_attention_heads=recipe.num_attention_heads,
        num_key_value_heads=recipe.num_attention_heads,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(recipe.seed)
    return LlamaForCausalLM(config)


# --- warm start ----------------------------------------------------------------------------------


def collate(batch: list[tuple[list[int], list[int]]], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pad (ids, mask) pairs; labels are -100 off the assistant tokens."""
    # Round the width up to a multiple of 32: a handful of distinct shapes keeps the CPU kernels
    # warm, where every new sequence length would cost a slow first call.
    width = -(-max(len(ids) for ids, _ in batch) // 32) * 32
    input_ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(batch), width), dtype=torch.long)
    labels = torch.full((len(batch), width), -100, dtype=torch.long)
    for i, (ids, mask) in enumerate(batch):
        n = len(ids)
        input_ids[i, :n] = torch.tensor(ids)
        attention[i, :n] = 1
        labels[i, :n] = torch.where(torch.tensor(mask) == 1, torch.tensor(ids), -100)
    return {"input_ids": input_ids, "attention_mask": attention, "labels": labels}


def length_bucketed_batches(
    recipe: TinyRecipe, tokenizer: PreTrainedTokenizerFast, rng: random.Random, pool: int = 8
) -> Iterator[list[tuple[list[int], list[int]]]]:
    """Batches of similar-length conversations, drawn `pool` batches at a time.

    Sorting a pool by length before cutting it into batches cuts padding roughly in half, and the
    CPU kernels run fastest when they keep seeing the same few shapes (see `collate`).
    """
    stream = demo_stream(recipe, rng)
    while True:
        encoded = []
        for _ in range(pool * recipe.batch_size):
            demo = next(stream)
            enc = encode_conversation(tokenizer, demo.system, demo.observations, demo.replies)
            encoded.append((enc.input_ids, enc.loss_mask))
        encoded.sort(key=lambda pair: len(pair[0]))
        chunks = [
            encoded[i : i + recipe.batch_size] for i in range(0, len(encoded), recipe.batch_size)
        ]
        rng.shuffle(chunks)
        yield from chunks


def warm_start(
    model: LlamaForCausalLM,
    tokenizer: PreTrainedTokenizerFast,
    recipe: TinyRecipe,
    rng: random.Random,
    progress: bool = True,
) -> list[float]:
    """Supervised fine-tuning on noisy demonstrations; returns the loss per step."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=recipe.learning_rate, weight_decay=0.0)

    def lr_at(step: int) -> float:
        if step < recipe.warmup_steps:
            return (step + 1) / recipe.warmup_steps
        return max(0.0, (recipe.max_steps - step) / max(1, recipe.max_steps - recipe.warmup_steps))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_at)
    batches = length_bucketed_batches(recipe, tokenizer, rng)
    losses: list[float] = []
    model.train()
    with progress_bar(disable=not progress) as bar:
        job = bar.add_task("warm start (tiny base)", total=recipe.max_steps, metrics="")
        for _ in range(recipe.max_steps):
            out = model(**collate(next(batches), tokenizer.pad_token_id))
            optimizer.zero_grad(set_to_none=True)
            out.loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            losses.append(out.loss.item())
            bar.update(job, advance=1, metrics=f"loss {losses[-1]:.3f}")
    model.eval()
    return losses


def noisy_expert_loss(recipe: TinyRecipe, samples: int = 400) -> float:
    """The warm-start loss a perfect imitation of the noisy demonstrator would reach.

    DESIGN.md section 4's lesson: compare the warm-start loss with this optimum before any RL. A
    loss near the uniform plateau means the model has not learned the expert yet. Per assistant
    token: the action carries the demonstrator's entropy and the eos after it costs nothing.
    """
    stream = demo_stream(recipe, random.Random(recipe.seed + 1))
    total, tokens = 0.0, 0
    for _ in range(samples):
        demo = next(stream)
        total += sum(demo.expert_entropy)
        tokens += 2 * len(demo.replies)
    return total / tokens


# --- build or load -------------------------------------------------------------------------------


@dataclass
class BuildReport:
    """What `ensure_tiny` did, for logs and tests."""

    path: Path
    built: bool
    seconds: float = 0.0
    losses: list[float] = field(default_factory=list)


def ensure_tiny(recipe: TinyRecipe | None = None, progress: bool = True) -> BuildReport:
    """Return the cached tiny base for this recipe, building it first if it is missing."""
    recipe = recipe or TinyRecipe()
    target = cache_root() / f"tiny-{recipe.key()}"
    if _built(target):
        return BuildReport(target, built=False)
    with build_lock(target):
        if _built(target):  # another process built it while this one waited
            return BuildReport(target, built=False)
        return _build(recipe, target, progress)


def _built(target: Path) -> bool:
    return (target / "config.json").exists() and (target / "recipe.json").exists()


def _build(recipe: TinyRecipe, target: Path, progress: bool) -> BuildReport:
    start = time.perf_counter()
    rng = random.Random(recipe.seed)
    # The build seeds torch's global generator; fork it, so that a run which builds its base
    # draws the same numbers afterwards as a run that finds the base in the cache.
    with torch.random.fork_rng(devices=[]):
        tokenizer = build_tokenizer(corpus_words(recipe, rng))
        model = build_model(recipe, tokenizer)
        losses = warm_start(model, tokenizer, recipe, rng, progress=progress)
    seconds = time.perf_counter() - start
    meta = {"recipe": dataclasses.asdict(recipe), "build_seconds": seconds, "losses": losses}

    def write(tmp: Path) -> None:
        with without_library_bars():
            model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / "recipe.json").write_text(json.dumps(meta, indent=1))

    write_directory_atomically(target, write)
    return BuildReport(target, built=True, seconds=seconds, losses=losses)
