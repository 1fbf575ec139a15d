"""The error probe (minirl.tools.error_probe): its pairs, its statistic, its scores, its verdict.

- The pairs are checked against a brute force over the episodes: every episode whose first error
  left the agent where it stood (by the task's picture, not by the probe's own test) gives one
  pair, and the pair's two states are the conversation just before and just after that error.
- The statistic is checked by hand on a small example, and its standard error against a brute-
  force bootstrap over instances.
- The scores are checked against the real sampler, on tiny's compact text and on smollm2's
  natural text: a reply drawn in a state carries the log-probability the probe gives its action.
The verdict on the full-size bases (the sticky base acts worse in the same position after a
failed move, the uniform-noise control does not) is asserted where it is taught: lesson 7's code.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable

import pytest

import tasks
from minirl.chat import reply_ids, reply_text
from minirl.episode import EpisodeSpec
from minirl.eval.analysis import first_error, replay, state_at
from minirl.eval.position import PairScore, action_probs, logit, same_position_pairs
from minirl.eval.sampler import held_out_episodes, seeded
from minirl.logprobs import reply_logps
from minirl.models import load_policy
from minirl.rollout import rollout
from minirl.tools import error_probe
from minirl.tools.error_probe import summarize


def test_the_pairs_are_the_failed_first_errors_the_episode_played_on_from(
    quick_base: Callable[[str], str],
) -> None:
    model, tokenizer = load_policy(quick_base("gridnav"), quant="none", task="gridnav")
    episodes = held_out_episodes(
        model, tokenizer, "gridnav", [6, 12], 40, max_new_tokens=4, temperature=1.0,
        budget_visible=True,
    )  # fmt: skip
    played = [e for budget in (6, 12) for e in episodes[budget]]
    pairs = same_position_pairs(played)
    # Brute force: replay each episode to its first error and ask the task's picture whether the
    # agent moved; a state where every action is optimal says nothing and is left out.
    expected = []
    for e in played:
        j = first_error(e)
        if j is None or j >= e.turns_used:
            continue
        env = tasks.make("gridnav")
        env.reset(e.seed)
        for turn in e.turns[: j - 1]:
            env.step(turn.reply)
        where, choices = env.picture()["agent"], len(env.optimal_actions())
        env.step(e.turns[j - 1].reply)
        if env.picture()["agent"] == where and choices < len(env.action_words):
            expected.append((e.seed, e.budget, tuple(t.reply for t in e.turns[:j])))
    found = [(p.pre.seed, p.pre.budget, p.post.replies) for p in pairs]
    assert found == expected and len(found) >= 10, (len(found), len(expected))
    for pair in pairs:
        assert pair.post.replies[:-1] == pair.pre.replies  # one reply on: the failed one
        assert replay(pair.pre).parse(pair.post.replies[-1]) == pair.error  # None if invalid
        assert pair.error not in pair.optimal  # the error was an error
        assert pair.optimal == set(replay(pair.pre).optimal_actions())
        assert pair.optimal == set(replay(pair.post).optimal_actions())  # and changed nothing
        # The post state's ids extend the pre state's: the same conversation, one turn on.
        assert pair.post.prompt_ids[: len(pair.pre.prompt_ids)] == pair.pre.prompt_ids


def scores(rows: list[tuple[int, float, float]]) -> list[PairScore]:
    return [PairScore(seed, pre, post, math.nan, math.nan) for seed, pre, post in rows]


def test_the_deficit_is_the_change_in_log_odds_of_the_mean_rates() -> None:
    found = summarize(scores([(1, 0.5, 0.25), (2, 0.7, 0.45), (3, 0.3, 0.2)]))
    assert found.optimal_pre == pytest.approx(0.5) and found.optimal_post == pytest.approx(0.3)
    assert found.deficit == pytest.approx(math.log(0.3 / 0.7) - 0.0)
    # One pair per instance: the delta method's s / sqrt(n) of the influences u_i.
    u = [(q - 0.3) / 0.21 - (p - 0.5) / 0.25 for p, q in ((0.5, 0.25), (0.7, 0.45), (0.3, 0.2))]
    mean = sum(u) / 3
    assert found.se == pytest.approx(math.sqrt(sum((x - mean) ** 2 for x in u) / 2 / 3))
    assert (found.pairs, found.instances) == (3, 3)
    # No change anywhere: no deficit, whatever the rates.
    assert summarize(scores([(1, 0.2, 0.2), (2, 0.9, 0.9)])).deficit == pytest.approx(0.0)
    with pytest.raises(ValueError, match="no pairs"):
        summarize([])


def test_the_standard_error_matches_a_bootstrap_over_instances() -> None:
    rng = random.Random(0)
    rows = []
    for seed in range(80):  # one or two pairs per instance; an instance's pairs are alike
        hard = rng.uniform(0.1, 0.8)
        for _ in range(rng.choice((1, 2))):
            pre = min(max(hard + rng.gauss(0, 0.05), 0.01), 0.99)
            rows.append((seed, pre, min(max(pre - 0.1 + rng.gauss(0, 0.1), 0.01), 0.99)))
    found = summarize(scores(rows))
    by_seed: dict[int, list] = {}
    for row in rows:
        by_seed.setdefault(row[0], []).append(row)
    seeds = list(by_seed)
    draws = []
    for _ in range(3000):  # resample instances, with all their pairs
        picked = [r for s in rng.choices(seeds, k=len(seeds)) for r in by_seed[s]]
        pre = sum(r[1] for r in picked) / len(picked)
        post = sum(r[2] for r in picked) / len(picked)
        draws.append(logit(post) - logit(pre))
    mean = sum(draws) / len(draws)
    boot = math.sqrt(sum((d - mean) ** 2 for d in draws) / (len(draws) - 1))
    assert found.se == pytest.approx(boot, rel=0.1)
    assert found.instances == 80 and found.deficit < -0.3


def candidates(tokenizer, env: tasks.Env) -> dict[tuple[int, ...], str]:
    """Each action's reply ids, as the probe scores them."""
    return {tuple(reply_ids(tokenizer, reply_text(env, w))): w for w in env.action_words}


def mass(model, tokenizer, spec: EpisodeSpec, env: tasks.Env) -> float:
    """The probability that the next reply is one of the actions, tokenized as the probe's."""
    logps = reply_logps(model, list(spec.prompt_ids), [list(c) for c in candidates(tokenizer, env)])
    return sum(math.exp(lp) for lp in logps)


@pytest.mark.slow
def test_the_scores_are_what_the_sampler_draws_tiny_and_smollm2() -> None:
    """In a state of the model's own second turn, draw next replies: each drawn reply that is an
    action's candidate carries log(P(action) * mass) as its sampling log-prob, and the share of
    draws that are candidates is the mass, within four standard errors."""
    # smollm2 draws fewer: each is a 135M-parameter prefill of the whole conversation on a CPU.
    for name, text, draws in (("tiny", "compact", 96), ("smollm2", "natural", 32)):
        # float32: bf16 (smollm2's default on a CPU with bf16 matmuls) would move the sampler's
        # cached decode and the probe's padded forward apart by its rounding, not by a bug.
        model, tokenizer = load_policy(name, quant="none", task="gridnav", dtype="float32")
        model.eval()
        env = tasks.make("gridnav", text=text)
        specs = [EpisodeSpec("gridnav", seed, 8) for seed in tasks.EVAL_SEEDS[:4]]
        with seeded(0):
            played = rollout(model, tokenizer, specs, max_turns=2, task_text=text)
        states = [state_at(e, 1) for e in played if e.turns_used >= 2]
        state = max(states, key=lambda s: mass(model, tokenizer, s, env))  # the most draws
        share, probs = (
            mass(model, tokenizer, state, env),
            action_probs(model, tokenizer, state, env),
        )
        with seeded(1):
            drawn = rollout(model, tokenizer, [state] * draws, max_turns=1, task_text=text)
        agreed = 0
        for episode in drawn:
            assert episode.input_ids[: len(state.prompt_ids)] == list(state.prompt_ids)
            kept = list(zip(episode.input_ids, episode.logprobs, episode.loss_mask, strict=True))
            word = candidates(tokenizer, env).get(tuple(i for i, _, m in kept if m))
            if word is not None:
                logp = sum(lp for _, lp, m in kept if m)
                assert logp == pytest.approx(math.log(probs[word] * share), abs=2e-3), name
                agreed += 1
        assert agreed >= draws / 4, (name, agreed, share)
        assert abs(agreed / draws - share) < 4 * math.sqrt(share * (1 - share) / draws) + 1e-9


def test_bad_arguments_are_one_line(capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    for argv, said in (
        (["--task", "maze"], "--task 'maze': one of"),
        (["--budgets", "1,8"], "T >= 2"),
        (["--budgets", "8,200"], "budgets"),
        (["--instances", "0"], "--instances"),
        (["--adapter", str(tmp_path / "missing")], "--adapter: "),
    ):
        assert error_probe.main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert said in err and "\n" not in err, err


def test_the_gain_over_the_base_is_paired_on_the_same_pairs() -> None:
    base = scores([(1, 0.5, 0.25), (2, 0.7, 0.45), (3, 0.3, 0.2), (3, 0.4, 0.3)])
    assert summarize(base, base).gain == 0.0 and summarize(base, base).gain_se == 0.0
    # An arm that recovers: the same before the error, better after it.
    arm = scores([(1, 0.5, 0.45), (2, 0.7, 0.65), (3, 0.3, 0.3), (3, 0.4, 0.4)])
    found = summarize(arm, base)
    assert found.gain == pytest.approx((logit(0.45) - logit(0.475)) - (logit(0.3) - logit(0.475)))

    # By hand: the influences subtract pair by pair, instance 3's two pairs are one cluster.
    def u(rows: list[PairScore]) -> list[float]:
        a = sum(r.optimal_post for r in rows) / len(rows)
        b = sum(r.optimal_pre for r in rows) / len(rows)
        return [
            (r.optimal_post - a) / (a * (1 - a)) - (r.optimal_pre - b) / (b * (1 - b)) for r in rows
        ]

    d = [x - y for x, y in zip(u(arm), u(base), strict=True)]
    clusters = [d[0], d[1], d[2] + d[3]]
    assert found.gain_se == pytest.approx(math.sqrt(3 / 2 * sum(c * c for c in clusters)) / 4)
    assert math.isnan(summarize(arm).gain)
    with pytest.raises(ValueError, match="same pairs"):
        summarize(arm, base[:3])
