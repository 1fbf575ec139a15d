"""The answer probe (minirl.tools.answer_probe): its statistic, and its scores against sampling.

The scores are checked against the real sampler. First the state: a rollout from the start
whose first reply is the probed guess reaches exactly the ids the probe scores. Then the
rollout, started from that state, samples many next replies: each sampled well-formed guess
must carry the log-prob the probe gives it, and the sampled frequencies must agree with the
probe's probabilities within their standard errors.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from pathlib import Path

import pytest

import tasks
from minirl.chat import reply_ids
from minirl.episode import EpisodeSpec
from minirl.models import load_policy
from minirl.rollout import rollout
from minirl.tiny import TinyRecipe, ensure_tiny
from minirl.tools import answer_probe
from minirl.tools.answer_probe import StateScore, follow, probe, reply_text, state_ids

N = 15


def point(c: int) -> list[float]:
    return [1.0 if k == c else 0.0 for k in range(1, N + 1)]


def made_up(after_higher: Callable[[int], list[float]], after_lower) -> list[StateScore]:
    return [
        s
        for g in (4, 8, 12)
        for s in (
            StateScore(g, "higher", after_higher(g), 1.0),
            StateScore(g, "lower", after_lower(g), 1.0),
        )
    ]


def test_follow_is_one_for_a_follower_zero_when_blind_and_minus_one_against() -> None:
    assert follow(made_up(lambda g: point(g + 1), lambda g: point(g - 1))) == 1.0
    assert follow(made_up(lambda g: point(g - 1), lambda g: point(g + 1))) == -1.0
    # Blind: the same distribution after either answer, whatever it is.
    spread = [1 / N] * N
    assert follow(made_up(lambda g: spread, lambda g: spread)) == pytest.approx(0.0, abs=1e-12)
    assert follow(made_up(lambda g: point(7), lambda g: point(7))) == 0.0
    # Half the time it follows, half the time it repeats the guess: 0.5.
    half = made_up(
        lambda g: [0.5 * (a + b) for a, b in zip(point(g + 1), point(g), strict=True)],
        lambda g: [0.5 * (a + b) for a, b in zip(point(g - 1), point(g), strict=True)],
    )
    assert follow(half) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="both answers"):
        follow([StateScore(8, "higher", point(9), 1.0)])


def hilo_policy(cache: Path):
    """A tiny hilo base warm-started for 30 steps (12 s here): 95% of its next replies are
    well-formed guesses, so the draws below test the scores on hundreds of guesses. (The suite's
    4-step quick base gives them 1%.)"""
    recipe = dataclasses.replace(TinyRecipe.for_task("hilo"), max_steps=30)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("MINIRL_CACHE", str(cache))
        path = ensure_tiny(recipe, progress=False).path
    return load_policy(str(path), quant="none", task="hilo")


def test_the_scores_are_what_the_sampler_draws_in_that_state(tmp_path: Path) -> None:
    model, tokenizer = hilo_policy(tmp_path)
    guess, turns, draws = 8, 6, 800
    env = tasks.make("hilo")
    candidates = {tuple(reply_ids(tokenizer, reply_text(env, w))): int(w) for w in env.action_words}
    for scored in probe(model, tokenizer, "hilo", [guess], turns, "compact"):
        assert sum(scored.probs) == pytest.approx(1.0) and 0.5 < scored.mass <= 1
        seed = answer_probe.instance_with_answer(env, guess, scored.answer)
        context = state_ids(tokenizer, env, seed, guess, turns)
        # The state is the one a rollout from the start reaches when its first reply is the guess,
        # written as the probe writes it: the ids before the second reply of every such episode.
        # (The same text can be sampled as other ids, e.g. "8", <|im_start|>, <|im_end|>: a reply
        # the probe does not score, in a conversation that holds those ids.)
        written = reply_ids(tokenizer, reply_text(env, str(guess)))
        fresh = rollout(
            model,
            tokenizer,
            [EpisodeSpec("hilo", seed, turns)] * 200,
            max_turns=2,
            task_text="compact",
        )
        reached = [
            e.input_ids[: e.turn_index.index(1)]
            for e in fresh
            if [i for i, t in zip(e.input_ids, e.turn_index, strict=True) if t == 0] == written
            and 1 in e.turn_index
        ]
        assert reached and all(ids == context for ids in reached)
        spec = EpisodeSpec(
            "hilo", seed, turns, replies=(reply_text(env, str(guess)),), prompt_ids=tuple(context)
        )
        played = rollout(model, tokenizer, [spec] * draws, max_turns=1, task_text="compact")
        drawn = []
        for episode in played:
            kept = list(zip(episode.input_ids, episode.logprobs, episode.loss_mask, strict=True))
            sampled = tuple(i for i, _, m in kept if m)
            c = candidates.get(sampled)
            if c is not None:
                # The state is the rollout's own: the same reply has the same log-prob in both.
                logp = sum(lp for _, lp, m in kept if m)
                assert logp == pytest.approx(math.log(scored.probs[c - 1] * scored.mass), abs=1e-3)
                drawn.append(c)
        assert len(drawn) > draws / 2
        # And the draws agree with the scores: the share that is a well-formed guess, and among
        # those the share above the guess, each within four standard errors.
        share = len(drawn) / draws
        assert abs(share - scored.mass) < 4 * math.sqrt(scored.mass * (1 - scored.mass) / draws)
        above = sum(c > guess for c in drawn) / len(drawn)
        se = math.sqrt(max(scored.above * (1 - scored.above), 1e-4) / len(drawn))
        assert abs(above - scored.above) < 4 * se


def test_bad_arguments_are_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    for argv, said in (
        (["--adapter", str(tmp_path / "missing")], "--adapter: "),
        (["--adapter", str(tmp_path)], "holds no adapter"),
        (["--task", "gridnav"], "needs guess or hilo"),
        (["--guesses", "1,8"], "never answered lower"),
        (["--guesses", "15"], "never answered higher"),
        (["--turns", "1"], "T >= 2"),
        (["--turns", "101"], "in [2, 100]"),
    ):
        assert answer_probe.main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert said in err and "\n" not in err, err
