"""`python -m minirl.tools.error_probe`: does the model act worse just after a failed action?

Recovery can only be learned where the base does worse after an error. The study measures that
deficit against *other* states matched on turn, distance and optimal actions
(minirl.eval.recovery); this probe measures it against the one state that differs from the
post-error state in nothing but the error: **the same position, one turn earlier**.

**Pairs and scores** (minirl.eval.position). In the base's own episodes on held-out instances,
take each episode's first error. When it was a *failed* action (a bump into a wall, "nothing
happens", a reply that names no action), the world is where it was, so the state just before it
(`pre`) and the state just after it (`post`) are the same position; the second adds only the
failed attempt and what the environment said about it (and one turn less left). Detours make no
pair. Every action is scored exactly in both states (log-probabilities of its reply tokens,
renormalized over the actions): no sampling noise.

**The statistic** is on the study's scale: the change in log-odds of the mean rates,

    deficit = logit(mean over pairs of P(optimal | post)) - logit(mean of P(optimal | pre))

negative when the model acts worse after the error. (Not the mean of per-pair log-odds: a chat
model's peaked distributions put some states' P(optimal) near 0, where a log-odds swings by
several units for a change nobody would see in play.) Its standard error is the delta method's,
with an instance's pairs (one per budget) as one cluster. Beside it, P(repeat): the chance of
playing the failed action again in `post`, against the chance it had in `pre`: the loop's
signature.

Why a second measure beside the study's: a post-error state is a position where the policy has
just erred, so it is one where this policy errs more than in a typical state with the same key. A
comparison with other matched states reads that as a deficit even for a policy that ignores its
history entirely; here both states share it. It needs no sampling and no matches, so 60 instances
give a standard error several times smaller than the matched one (tutorials/measured.md). What it
cannot see: errors that move the agent (detours), and any effect of the one turn less left. The
study's recovery test (minirl.study.claims, claim 2) reads the same pairs, scored for every
checkpoint by the evaluation, per pair and corrected for that one turn; this probe is the quick
look at one model.

    python -m minirl.tools.error_probe --model tiny-sticky --task gridnav
    python -m minirl.tools.error_probe --model tiny --task gridnav --adapter runs/fixed-T12

With `--adapter` the episodes are still the base's (the adapter is switched off to play them), so
a trained checkpoint is asked in the base's states, as the study asks it; the base is scored on
the same pairs too, and the report adds the checkpoint's **recovery gain** in the same position,

    gain = deficit of the checkpoint - deficit of the base

above 0 when training made it act relatively better after a failed action than before it (a
gain in single-step quality alone raises both states' log-odds alike and cancels).
"""

from __future__ import annotations

import json
import math
import sys
from collections import defaultdict
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Literal

from transformers import PreTrainedModel, PreTrainedTokenizerBase
from transformers.hf_argparser import HfArg

import tasks
from minirl.chat import resolve_task_text
from minirl.config import MAX_TURNS, HeldOut, ReplyTokens
from minirl.eval.position import CLIP, PairScore, logit, same_position_pairs, score
from minirl.eval.sampler import held_out_episodes
from minirl.infra.cli import ArgParser, run_cli
from minirl.infra.errors import ConfigError
from minirl.infra.validation import check_fields, parse_ints


@dataclass
class ProbeArgs:
    """The model, task and episodes the probe reads."""

    model: str = HfArg(
        default="tiny-sticky",
        help="Base model: 'tiny', 'tiny-sticky', 'tiny-truncated', 'smollm2', a model directory "
        "or a hub id.",
    )
    task: str = HfArg(default="gridnav", help="The task (tasks.NAMES).")
    adapter: str = HfArg(
        default="",
        help="A trained adapter to probe on the base, in the base's states: a run directory (its "
        "newest checkpoint) or a checkpoint-N / adapter directory, as evaluate.py reads them.",
    )
    instances: HeldOut = HfArg(
        default=60, help="Held-out instances; the base plays one episode on each at each budget."
    )
    budgets: str = HfArg(
        default="8,12", help="Turn budgets of the base's episodes, e.g. '8,12' or '4-12'."
    )
    quant: Literal["nf4", "none"] = HfArg(
        default="nf4", help="Base weights: 'nf4' (as training and the study load them) or 'none'."
    )
    dtype: Literal["auto", "bfloat16", "float32"] = HfArg(
        default="auto", help="The matmuls' dtype, as train.py's --dtype (minirl.models)."
    )
    task_text: Literal["auto", "compact", "natural"] = HfArg(
        default="auto", help="compact, natural, or auto (by the tokenizer, as train.py picks)."
    )
    max_new_tokens: ReplyTokens = HfArg(
        default=4, help="Token limit of one reply in the base's episodes, as evaluate.py's."
    )
    seed: int = HfArg(default=1234, help="Seed of the base's episodes.")


@dataclass
class PositionDeficit:
    """The statistic of the module docstring, with what it is made of."""

    deficit: float  # logit(mean P(optimal | post)) - logit(mean P(optimal | pre))
    se: float  # clustered by instance
    pairs: int
    instances: int
    optimal_pre: float  # mean P(optimal) before the error
    optimal_post: float  # and after it
    repeat_pre: float  # mean P(the failed action) before it failed
    repeat_post: float  # and after
    gain: float = math.nan  # a checkpoint's deficit minus the base's on the same pairs
    gain_se: float = math.nan  # paired, clustered by instance

    def text(self) -> str:
        said = (
            f"deficit in the same position {self.deficit:+.3f} ± {self.se:.3f} log-odds "
            f"({self.pairs} pairs, {self.instances} instances); P(optimal) {self.optimal_pre:.3f} "
            f"before the error, {self.optimal_post:.3f} after; P(repeat the failed action) "
            f"{self.repeat_pre:.3f} before, {self.repeat_post:.3f} after"
        )
        if not math.isnan(self.gain):
            said += f"; recovery gain over the base {self.gain:+.3f} ± {self.gain_se:.3f}"
        return said


def _influences(scores: list[PairScore]) -> tuple[float, list[float]]:
    """logit(a) - logit(b) and each pair's influence u_i on it (summarize's docstring)."""
    n = len(scores)
    after = sum(s.optimal_post for s in scores) / n
    before = sum(s.optimal_pre for s in scores) / n
    a, b = min(max(after, CLIP), 1 - CLIP), min(max(before, CLIP), 1 - CLIP)
    u = [
        (s.optimal_post - after) / (a * (1 - a)) - (s.optimal_pre - before) / (b * (1 - b))
        for s in scores
    ]
    return logit(after) - logit(before), u


def _clustered_se(seeds: list[int], u: list[float]) -> float:
    """sqrt(G / (G - 1) * sum over instances of (their u_i summed)^2) / n."""
    by_instance: dict[int, float] = defaultdict(float)
    for seed, x in zip(seeds, u, strict=True):
        by_instance[seed] += x
    g = len(by_instance)
    spread = sum(v * v for v in by_instance.values())
    return math.sqrt(g / (g - 1) * spread) / len(u) if g > 1 else math.nan


def summarize(scores: list[PairScore], base: list[PairScore] | None = None) -> PositionDeficit:
    """The deficit with its delta-method standard error, clustered by instance.

    With a and b the mean P(optimal) after and before, each pair's influence on
    logit(a) - logit(b) is u_i = (post_i - a) / (a (1 - a)) - (pre_i - b) / (b (1 - b)); over n
    pairs from G instances, var = G / (G - 1) * sum over instances of (their u_i summed)^2 / n^2
    (one pair per instance gives the usual s^2 / n). Written by hand: it is a few lines, and the
    study's own estimates (minirl.study.claims) use the bootstrap over instances instead.

    `base`: the base's scores of the same pairs, for a trained checkpoint's `gain`, its deficit
    minus the base's (influences subtract pair by pair, so the pairing is in the standard error).
    """
    if not scores:
        raise ValueError("no pairs: no episode's first error was a failed action it played on from")
    seeds = [s.seed for s in scores]
    deficit, u = _influences(scores)
    gain = gain_se = math.nan
    if base is not None:
        if [s.seed for s in base] != seeds:
            raise ValueError("the base's scores must be of the same pairs, in the same order")
        base_deficit, u_base = _influences(base)
        gain = deficit - base_deficit
        gain_se = _clustered_se(seeds, [x - y for x, y in zip(u, u_base, strict=True)])
    repeats = [s for s in scores if not math.isnan(s.repeat_pre)]

    def average(values: list[float]) -> float:
        return sum(values) / len(values) if values else math.nan

    return PositionDeficit(
        deficit=deficit,
        se=_clustered_se(seeds, u),
        pairs=len(scores),
        instances=len(set(seeds)),
        optimal_pre=average([s.optimal_pre for s in scores]),
        optimal_post=average([s.optimal_post for s in scores]),
        repeat_pre=average([s.repeat_pre for s in repeats]),
        repeat_post=average([s.repeat_post for s in repeats]),
        gain=gain,
        gain_se=gain_se,
    )


def probe(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    task: str,
    instances: int,
    budgets: list[int],
    task_text: str = "compact",
    seed: int = 1234,
    max_new_tokens: int = 4,
    against_base: bool = False,
) -> PositionDeficit:
    """Play the base's episodes, pair the failed first errors, score both states of each pair.

    The episodes are the base's: a peft model plays them with its adapter switched off, and is
    scored with it on. `against_base` scores the same pairs with the adapter off as well, for the
    checkpoint's recovery gain over the base in the same position.
    """
    switched_off = getattr(model, "disable_adapter", nullcontext)
    with switched_off():
        episodes = held_out_episodes(
            model,
            tokenizer,
            task,
            budgets,
            instances,
            max_new_tokens=max_new_tokens,
            temperature=1.0,
            budget_visible=True,
            task_text=task_text,
            seed=seed,
        )
    played = [e for budget in budgets for e in episodes[budget]]
    pairs = same_position_pairs(played, task_text)
    base = None
    if against_base:
        with switched_off():
            base = score(model, tokenizer, pairs, task_text)
    return summarize(score(model, tokenizer, pairs, task_text), base)


def check_args(args: ProbeArgs) -> list[int]:
    """The budgets as ints, after checking the arguments; one-line errors."""
    if args.task not in tasks.NAMES:
        raise ConfigError(f"--task {args.task!r}: one of {', '.join(tasks.NAMES)}")
    check_fields(args)  # every field's type and range (minirl.infra.validation)
    budgets = parse_ints(args.budgets, "budgets", MAX_TURNS, "the tiny model reads counts so far")
    if min(budgets) < 2:
        raise ConfigError(
            f"--budgets {args.budgets!r}: a pair needs a turn after the error, T >= 2"
        )
    return budgets


def main(argv: list[str] | None = None) -> int:
    parser = ArgParser(
        ProbeArgs,
        prog="minirl.tools.error_probe",
        description=__doc__.split("\n")[0],
        allow_abbrev=False,
    )
    (args,) = parser.parse_args_into_dataclasses(args=list(sys.argv[1:] if argv is None else argv))

    def work() -> int:
        from minirl.compare import load_probed

        budgets = check_args(args)
        model, tokenizer, adapter = load_probed(
            args.model, args.adapter, args.task, args.quant, args.dtype
        )
        text = resolve_task_text(args.task_text, tokenizer)
        found = probe(
            model,
            tokenizer,
            args.task,
            args.instances,
            budgets,
            text,
            args.seed,
            args.max_new_tokens,
            against_base=adapter is not None,
        )
        print(found.text())
        record = {k: round(v, 4) if isinstance(v, float) else v for k, v in vars(found).items()}
        print(json.dumps({**record, "task_text": text}))
        return 0

    return run_cli("minirl.tools.error_probe", work, lambda: "nothing is kept")


if __name__ == "__main__":
    sys.exit(main())
