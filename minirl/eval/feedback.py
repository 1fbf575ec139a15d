"""Feedback use: how much a policy's replies depend on what it was told, from its own episodes.

Success alone cannot tell a policy that plays the turns from one that plays a script: a guess
policy that answers "9, 10, 11, 12, ..." whatever it hears wins T/15 of the time (the open-loop
yardstick, minirl.eval.openloop). This measure asks the question directly, on the evaluation's
own episodes, with no extra rollout.

**What is compared.** At turn t, take the episodes that reached turn t after the same earlier
actions a_1 .. a_{t-1} of the policy (a *group*). Within a group the policy did the same things;
the episodes differ only in what the environment told them, so whatever varies with the
observations is feedback. Each episode is labelled with its *situation* at turn t: the oracle's
set of optimal actions there (`Env.optimal_actions()`, over the belief state for hilo, fog and
house), which is what everything observed so far calls for. It is a function of the observation
history, and it has few values even where the observation text is new on every instance (a grid
position), so it can be counted.

**The measure.** Feedback use is the conditional mutual information, in bits per turn,

    FU = I(A_t ; S_t | t, A_1 .. A_{t-1})
       = sum over groups g of (n_g / N) * I_g(A_t ; S_t)

between the action A_t and the situation S_t, with I_g counted in group g (n_g episodes; N turns
in all; an invalid reply is one more action value). A policy that never reads an observation
draws its reply from the same distribution in every episode of a group, whatever the situation,
so its FU is 0: exactly 0 for a fixed sequence (A_t is constant in each group), and 0 in
expectation for a random one. The groups are by the whole prefix of earlier actions, not by the
turn alone, because a blind policy may follow its own earlier replies, which also moved it: one
that repeats its first random move reads 0.49 bits per turn on gridnav grouped by turn alone,
0.00 grouped by prefix (200 instances, T = 8). The
oracle, whose reply is a function of its situation, scores I_g = H(A_t) in each group. FU is at
most the entropy of the replies, so a policy that has collapsed onto one reply cannot score high.

**The bias, corrected.** A mutual information counted from few samples is biased upwards (two
episodes with different labels always look dependent). So from each group's count, the mean
count after shuffling the situations among the group's episodes (`SHUFFLES` seeded shuffles) is
subtracted. For a policy that ignores the observations the shuffled counts have exactly the
distribution of the real one (its replies are exchangeable within a group), so the corrected FU
is 0 on average, and a small negative value is noise. Groups of one episode carry no evidence
and count as 0. The standard deviation of the shuffled totals, `null_sd`, is how far FU strays
from 0 on the same data for a policy that ignores what it is told: a value several `null_sd`
above 0 is clearly feedback use. Measured on 200 held-out gridnav instances, the tiny base
scores 0.06 to 0.08 bits (null_sd 0.01 to 0.02) at T = 4, 8, 12, and the tiny hilo and guess
bases 0.00 (they answer below the open-loop yardstick too).

Limits. One episode per instance and a stochastic policy make the groups small after a few
turns, where little can be seen, so FU understates a stochastic policy's dependence. It sees
dependence on the observations only through the situation: a policy that reacts to feedback in
ways the oracle's choice does not reflect (replying "up" after every bump) is not counted.
"""

from __future__ import annotations

import math
import random
import statistics
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import tasks
from minirl.episode import Episode, Turn

SHUFFLES = 20  # shuffles per group for the bias correction (and the null's spread)
INVALID = "(invalid)"  # the action value of an invalid reply


@dataclass
class FeedbackUse:
    """FU in bits per turn, with the plug-in value before correction and what it counted."""

    bits: float  # corrected: the number reported
    null_sd: float  # its spread for a policy that ignores the observations (over the shuffles)
    plug_in: float  # before the shuffle correction (biased upwards)
    turns: int  # turns counted (N)
    groups: int  # groups of two or more episodes (the ones that carry evidence)


def situations(episode: Episode) -> list[tuple[str, ...]]:
    """The oracle's optimal actions before each of the episode's replies, by replaying it.

    The tasks are deterministic given the seed and the replies (icy's slips included), so a fresh
    environment stepped with the recorded replies passes through the same states. A replay whose
    marks differ from the recorded ones means the task has changed since: an error.
    """
    if episode.start_turn:
        raise ValueError("feedback use needs whole episodes, not ones started mid-way")
    env = tasks.make(episode.task, text=episode.task_text)
    env.reset(episode.seed)
    out = []
    for i, turn in enumerate(episode.turns, start=1):
        out.append(tuple(sorted(env.optimal_actions())))
        info = env.step(turn.reply).info
        if (info["valid"], info["optimal"]) != (turn.valid, turn.optimal):
            raise ValueError(
                f"{episode.task} seed {episode.seed} turn {i}: the replay differs from the "
                "recorded episode: the task has changed since it was played"
            )
    return out


def _bits(pairs: Sequence[tuple[object, object]]) -> float:
    """Plug-in mutual information, in bits, between the two members of `pairs`."""
    n = len(pairs)
    joint = Counter(pairs)
    left = Counter(a for a, _ in pairs)
    right = Counter(s for _, s in pairs)
    return sum(c / n * math.log2(c * n / (left[a] * right[s])) for (a, s), c in joint.items())


def feedback_use(episodes: Sequence[Episode], shuffles: int = SHUFFLES) -> FeedbackUse:
    """FU over `episodes`, one budget's (see the module docstring)."""
    groups: dict[tuple, list[tuple[str, tuple[str, ...]]]] = {}
    for episode in episodes:
        actions = [turn.action or INVALID for turn in episode.turns]
        for t, situation in enumerate(situations(episode)):
            key = (t, tuple(actions[:t]))
            groups.setdefault(key, []).append((actions[t], situation))
    rng = random.Random(0)  # the shuffles are part of the estimator: the same every time
    turns = sum(len(g) for g in groups.values())
    plug_in, nulls, evidence = 0.0, [0.0] * shuffles, 0
    for _, members in sorted(groups.items()):
        if len(members) < 2:
            continue
        evidence += 1
        weight = len(members) / turns
        plug_in += weight * _bits(members)
        replies = [a for a, _ in members]
        labels = [s for _, s in members]
        for r in range(shuffles):  # shuffle r of every group makes one blind replica of FU
            rng.shuffle(labels)
            nulls[r] += weight * _bits(list(zip(replies, labels, strict=True)))
    corrected = plug_in - statistics.fmean(nulls)
    return FeedbackUse(
        round(corrected, 4), round(statistics.stdev(nulls), 4), round(plug_in, 4), turns, evidence
    )


# ---- simulated policies, played through the real tasks ----------------------------------------

Choose = Callable[[tasks.Env, int], str]  # (the environment, turn index from 0) -> the reply


def simulate(task: str, seeds: Sequence[int], budget: int, choose: Choose) -> list[Episode]:
    """One episode per instance of a simulated policy, as the same records a model's rollout makes.

    `choose` may read the environment (the oracle does: `env.optimal_actions()`) or ignore it (a
    fixed sequence: `lambda env, t: replies[t]`). The episodes carry no tokens: they are for
    measures, like feedback use, that read only the turns.
    """
    out = []
    for i, seed in enumerate(seeds):
        env = tasks.make(task)
        env.reset(seed)
        episode = Episode(task, seed, i, budget, True, env.optimal_length)
        for t in range(budget):
            reply = choose(env, t)
            before = env.distance()
            step = env.step(reply)
            info = step.info
            episode.turns.append(
                Turn(
                    reply,
                    info["action"],
                    info["valid"],
                    info["mistake"],
                    info["optimal"],
                    before,
                    info["distance"],
                    step.reward,
                )
            )
            if step.done:
                episode.success = bool(info["success"])
                break
        out.append(episode)
    return out


def oracle(env: tasks.Env, turn: int) -> str:
    """The oracle as a policy: the first of its optimal actions (a fixed tie-break)."""
    return sorted(env.optimal_actions())[0]
