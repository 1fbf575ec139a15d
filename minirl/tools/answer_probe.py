"""`python -m minirl.tools.answer_probe`: does the model's next guess follow the answer it got?

guess and hilo answer every guess with "higher" or "lower". A policy that reads the answer puts
its next guess on the side the answer names; one that does not read it guesses alike after
either answer. RL can only reinforce the first kind of reply if the policy sometimes makes it,
so this tool asks, before any training, how often a model already does: the measure that chose
hilo's natural text (tutorials/measured.md, "hilo's third text").

**What is scored.** One state per guess g and answer: the conversation after the first reply
" g" and the answer to it, with `--turns` turns left, built from the same segments a rollout
builds (minirl.chat: prompt, sampled reply ids, turn suffix). Every well-formed next guess
c = 1..n is scored exactly, with no sampling noise, by the model's own log-probabilities of
its reply tokens (the reply's ids as `minirl.chat.reply_ids` writes them, eos included):

    P(c | state) = exp(log p(reply_c | state)) / sum over c' of exp(log p(reply_c' | state))

renormalized over the n guesses; `mass`, the sum before renormalizing, is the share of the
model's probability that a well-formed guess gets at all (the rest goes to other replies, and to
other tokenizations of the same text, which a sampler may also draw).

**The statistic.** For each g, the difference between the chance of guessing above g after
"higher" and after "lower", averaged over the guesses probed:

    follow = mean over g of [ P(c > g | "higher", g) - P(c > g | "lower", g) ]

1 for a policy that always moves the way it is told, 0 for one whose next guess does not
depend on the answer (whatever it guesses), negative for one that moves against it. Each
state's instance is the first seed whose target lies on the answer's side of g, so the
answer is one the task really gives.

    python -m minirl.tools.answer_probe --model smollm2 --task hilo
    python -m minirl.tools.answer_probe --model smollm2 --task hilo --adapter DIR/checkpoint-20

The scores are one batched forward pass per state; on this 2-core CPU smollm2 takes about a
minute for the default 10 states.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from typing import Annotated, Literal

from transformers import PreTrainedModel, PreTrainedTokenizerBase
from transformers.hf_argparser import HfArg

import tasks
from minirl.chat import (
    action_replies,
    budget_text,
    encode_texts,
    prompt_text,
    reply_ids,
    reply_text,
    resolve_task_text,
    turn_suffix_text,
)
from minirl.config import MAX_TURNS
from minirl.infra.cli import ArgParser, run_cli
from minirl.infra.errors import ConfigError
from minirl.infra.validation import Range, check_fields, parse_ints
from minirl.logprobs import reply_logps

ANSWERS = ("higher", "lower")
SEED_SEARCH = 1000  # instances tried to find one whose target is on the answer's side
BUDGET = Range(
    ge=2,
    le=MAX_TURNS,
    why=f"the probed reply is the second, so T >= 2; the tiny model reads counts up to {MAX_TURNS}",
)


@dataclass
class ProbeArgs:
    """The model, task and states the probe scores."""

    model: str = HfArg(
        default="smollm2", help="Base model: 'tiny', 'smollm2', a model directory or a hub id."
    )
    task: str = HfArg(default="hilo", help="A task that answers higher or lower: hilo or guess.")
    adapter: str = HfArg(
        default="",
        help="A trained adapter to probe on the base: a run directory (its newest checkpoint) "
        "or a checkpoint-N / adapter directory, as evaluate.py's --checkpoints reads them.",
    )
    guesses: str = HfArg(
        default="4,6,8,10,12", help="The first guesses g whose answers are probed."
    )
    turns: Annotated[int, BUDGET] = HfArg(
        default=6, help="The episode's budget T; the probed reply is shown T - 1 turns left."
    )
    quant: Literal["nf4", "none"] = HfArg(
        default="none", help="Base weights: 'none' (exact scores) or 'nf4'."
    )
    dtype: Literal["auto", "bfloat16", "float32"] = HfArg(
        default="float32", help="The matmuls' dtype, as train.py's --dtype (minirl.models)."
    )
    task_text: Literal["auto", "compact", "natural"] = HfArg(
        default="auto", help="compact, natural, or auto (by the tokenizer, as train.py picks)."
    )


@dataclass
class StateScore:
    """The next guess's distribution in one state: after first guess `guess` and `answer`."""

    guess: int
    answer: str  # "higher" or "lower"
    probs: list[float]  # P(c) for c = 1..n, renormalized over the n guesses
    mass: float  # the n guesses' total probability before renormalizing

    @property
    def above(self) -> float:
        return sum(self.probs[self.guess :])

    @property
    def below(self) -> float:
        return sum(self.probs[: self.guess - 1])

    @property
    def repeat(self) -> float:
        return self.probs[self.guess - 1]


def follow(scores: list[StateScore]) -> float:
    """The mean over g of P(above g | "higher") - P(above g | "lower") (module docstring)."""
    by_state = {(s.guess, s.answer): s.above for s in scores}
    guesses = sorted({s.guess for s in scores})
    missing = [g for g in guesses if any((g, a) not in by_state for a in ANSWERS)]
    if not guesses or missing:
        raise ValueError(f"follow needs both answers for every guess; missing for {missing}")
    return sum(by_state[g, "higher"] - by_state[g, "lower"] for g in guesses) / len(guesses)


def state_ids(
    tokenizer: PreTrainedTokenizerBase, env: tasks.Env, seed: int, guess: int, turns: int
) -> list[int]:
    """The conversation's ids up to the second reply: prompt, " guess", the answer, next prompt.

    Built from the segments a rollout concatenates (minirl.rollout: the first prompt and each
    turn suffix encoded as text, the reply as its own ids), so the state is the one the policy
    meets when it plays, not a re-tokenization of the whole text.
    """
    first = env.reset(seed)
    said = reply_text(env, str(guess))
    observation = env.step(env.reply_prefix + said).observation
    prompt, suffix = encode_texts(
        tokenizer,
        [
            prompt_text(tokenizer, env.system_prompt, budget_text(first, turns, env.natural))
            + env.reply_prefix,
            turn_suffix_text(
                tokenizer, budget_text(observation, turns - 1, env.natural), env.reply_prefix
            ),
        ],
    )
    return prompt + reply_ids(tokenizer, said) + suffix


def instance_with_answer(env: tasks.Env, guess: int, answer: str) -> int:
    """The first seed whose target makes `guess` get `answer`."""
    for seed in range(SEED_SEARCH):
        env.reset(seed)
        if env.target > guess if answer == "higher" else env.target < guess:
            return seed
    raise ConfigError(f"no instance in {SEED_SEARCH} seeds answers {guess} with {answer!r}")


def probe(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    task: str,
    guesses: list[int],
    turns: int,
    task_text: str,
) -> list[StateScore]:
    """Score every next guess 1..n in the state after each first guess and each answer."""
    env = tasks.make(task, text=task_text)
    candidates = action_replies(tokenizer, env)
    scores = []
    for guess in guesses:
        for answer in ANSWERS:
            seed = instance_with_answer(env, guess, answer)
            logps = reply_logps(model, state_ids(tokenizer, env, seed, guess, turns), candidates)
            top = max(logps)
            weights = [math.exp(lp - top) for lp in logps]  # shifted so none underflows
            total = sum(weights)
            scores.append(
                StateScore(guess, answer, [w / total for w in weights], total * math.exp(top))
            )
    return scores


def check_args(args: ProbeArgs) -> list[int]:
    """The guesses as ints, after checking the arguments; one-line errors."""
    if args.task not in ("guess", "hilo"):
        raise ConfigError(f"--task {args.task!r}: the probe needs guess or hilo (higher/lower)")
    check_fields(args)  # every field's type and range (minirl.infra.validation)
    n = len(tasks.make(args.task).action_words)
    # 1 and n can only be answered one way, so follow() could not compare the two answers there.
    guesses = parse_ints(args.guesses, "guesses", n - 1, "a guess of n is never answered higher")
    if 1 in guesses:
        raise ConfigError(f"--guesses {args.guesses!r}: a guess of 1 is never answered lower")
    return guesses


def report(scores: list[StateScore]) -> str:
    lines = []
    for s in scores:
        top = sorted(enumerate(s.probs, start=1), key=lambda cp: -cp[1])[:3]
        likeliest = ", ".join(f"{c}: {p:.2f}" for c, p in top)
        lines.append(
            f"after {s.guess:>2} {s.answer:<6}  P(above) {s.above:.2f}  P(below) {s.below:.2f}  "
            f"P(repeat) {s.repeat:.2f}  mass {s.mass:.2f}  likeliest {likeliest}"
        )
    lines.append(f"follow = mean P(above | higher) - P(above | lower) = {follow(scores):.3f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = ArgParser(
        ProbeArgs,
        prog="minirl.tools.answer_probe",
        description=__doc__.split("\n")[0],
        allow_abbrev=False,
    )
    (args,) = parser.parse_args_into_dataclasses(args=list(sys.argv[1:] if argv is None else argv))

    def work() -> int:
        from minirl.compare import load_probed

        guesses = check_args(args)
        model, tokenizer, _ = load_probed(
            args.model, args.adapter, args.task, args.quant, args.dtype
        )
        text = resolve_task_text(args.task_text, tokenizer)
        scores = probe(model, tokenizer, args.task, guesses, args.turns, text)
        print(report(scores))
        print(json.dumps({"follow": round(follow(scores), 4), "task_text": text}))
        return 0

    return run_cli("minirl.tools.answer_probe", work, lambda: "nothing is kept")


if __name__ == "__main__":
    sys.exit(main())
