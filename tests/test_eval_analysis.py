"""The behaviour analyses by hand, and the fixed decision states."""

from __future__ import annotations

import pytest

import tasks
from minirl.chat import budget_text
from minirl.episode import Episode, Turn
from minirl.eval.analysis import (
    error_recovery,
    first_error,
    horizon_bucket,
    replay,
    sample_states,
    success_by_horizon,
    turn_efficiency,
)
from minirl.eval.results import Rate
from minirl.eval.sampler import sweep

SEEDS = list(tasks.EVAL_SEEDS[:6])


def turn(optimal: bool, valid: bool = True) -> Turn:
    return Turn("x", "x", valid, False, optimal, 1.0, 1.0, 0.0)


def episode(optimal: list[bool], success: bool, optimal_length: int = 2) -> Episode:
    e = Episode("gridnav", 0, 0, 8, True, optimal_length, success=success)
    e.turns = [turn(o) for o in optimal]
    return e


def test_error_recovery_by_hand() -> None:
    episodes = [
        episode([True, True], True),  # no error, success
        episode([False, True, True], True),  # first error at 1, recovered
        episode([False, False], False),  # first error at 1, lost
        episode([True, False, True], True),  # first error at 2, recovered
        episode([True, True, True], False),  # no error, ran out of turns
    ]
    assert [first_error(e) for e in episodes] == [None, 1, 1, 2, None]
    r = error_recovery(episodes)
    assert r.no_error == Rate(0.5, 2)
    assert r.after_error == Rate(2 / 3, 3)
    assert r.by_first_error_turn == {1: Rate(0.5, 2), 2: Rate(1.0, 1)}


def test_horizon_and_efficiency_by_hand() -> None:
    assert [horizon_bucket(n) for n in (1, 2, 3, 4, 7)] == ["1-2", "1-2", "3-4", "3-4", "7-8"]
    episodes = [
        episode([True] * 2, True, optimal_length=2),
        episode([True] * 5, True, optimal_length=3),
        episode([True], False, optimal_length=4),
    ]
    assert success_by_horizon(episodes) == {"1-2": Rate(1.0, 1), "3-4": Rate(0.5, 2)}
    eff = turn_efficiency(episodes)
    assert eff.mean_turns == pytest.approx(3.5) and eff.mean_excess == pytest.approx(1.0)


def test_decision_states_are_exact_conversation_prefixes(quick_policy) -> None:
    model, tok = quick_policy
    episodes = sweep(model, tok, "gridnav", [4], SEEDS, 2, budget_visible=True)[4]
    states = sample_states(episodes, 10, seed=3)
    assert states == sample_states(episodes, 10, seed=3)  # deterministic
    for s in states:
        env = replay(s)
        turns_left = s.budget - len(s.replies)
        # The prompt ends with the replayed env's observation, then the assistant's header.
        expected_obs = tok(budget_text(env._observe(), turns_left), add_special_tokens=False)
        text = tok.decode(s.prompt_ids)
        assert tok.decode(expected_obs["input_ids"]) in text
        assert text.rstrip().endswith("assistant")


def simulated_episodes(task: str, budget: int, n: int) -> list[Episode]:
    """Base episodes of a simulated policy, as Episode records (one token per reply), so the
    fixed states can be drawn without a model that plays well enough to leave errors behind."""
    from minirl.study import simulate

    seeds = list(tasks.EVAL_SEEDS[:20])
    played = simulate.episodes(task, seeds, simulate.SimPolicy(0.6, 0.6), budget, n, 1)
    found = []
    for seed, row in zip(seeds, played, strict=True):
        for sim in row:
            env = tasks.make(task)
            env.reset(seed)
            e = Episode(task, seed, 0, budget, True, env.optimal_length)
            for j, action in enumerate(sim.actions):
                step = env.step(action)
                e.turns.append(
                    Turn(action, action, True, step.info["mistake"], sim.optimal[j], 0, 0, 0)
                )
                e.add_reply([100 + j], j, [0.0])
            found.append(e)
    return found


def test_post_error_states_follow_the_first_error_and_their_matches_share_their_key() -> None:
    from minirl.eval.analysis import error_free
    from minirl.eval.recovery import KINDS, covariates, match_key, recovery_states

    episodes = simulated_episodes("fog", 10, 4)
    fixed = recovery_states(episodes, 40, seed=1, horizon=2, per_state=3)
    again = recovery_states(episodes, 40, seed=1, horizon=2, per_state=3)
    assert (fixed.post, fixed.kinds, fixed.matches) == (again.post, again.kinds, again.matches)
    assert len(fixed.post) == 40 and set(fixed.kinds) <= set(KINDS) and set(fixed.after) == {1, 2}
    # Each instance's error rate per turn over every turn of its episodes (what the study splits
    # instances by), counted here from the episodes themselves.
    for seed in {e.seed for e in episodes}:
        turns = [t.optimal for e in episodes if e.seed == seed for t in e.turns]
        assert fixed.hardness[seed] == pytest.approx(turns.count(False) / len(turns))
    for state, kind, after, found in zip(
        fixed.post, fixed.kinds, fixed.after, fixed.matches, strict=True
    ):
        # The state ends `after` - 1 of the base's replies after its first error, reply j.
        j = len(state.replies) - after + 1
        e = next(
            e
            for e in episodes
            if e.seed == state.seed
            and tuple(t.reply for t in e.turns[: j + after - 1]) == state.replies
        )
        assert error_free(e, j - 1) and not e.turns[j - 1].optimal
        assert len(state.replies) < e.turns_used  # the base played on from it
        # Its kind is what the env said of the first error, replayed from the start.
        env = tasks.make("fog")
        env.reset(state.seed)
        for reply in state.replies[: j - 1]:
            env.step(reply)
        info = env.step(state.replies[j - 1]).info
        assert kind == info.get("error") or ("avoidable" if info["mistake"] else "detour")
        assert list(state.prompt_ids) == e.input_ids[: len(state.prompt_ids)]
        # Every match is a fresh state of the base's episodes with the same turn, distance and
        # number of optimal actions.
        assert 1 <= len(found) <= 3
        for i in found:
            fresh = fixed.matched[i]
            assert match_key(**covariates(fresh)) == match_key(**covariates(state))
            assert any(
                e.seed == fresh.seed
                and tuple(t.reply for t in e.turns[: len(fresh.replies)]) == fresh.replies
                and error_free(e, len(fresh.replies))
                for e in episodes
            )


def test_recovery_plays_on_from_the_states_and_counts_add_up(quick_policy) -> None:
    from minirl.eval.analysis import state_at
    from minirl.eval.recovery import recover

    model, tok = quick_policy
    episodes = sweep(model, tok, "fog", [6], SEEDS, 3, budget_visible=True)[6]
    picked = [e for e in episodes if e.turns_used > 1][:12]
    states = [state_at(e, 1) for e in picked]
    kinds = ["invalid" if not e.turns[0].valid else "detour" for e in picked]
    # Recovery plays `samples` continuations from each state; its counts add up to its rates.
    r = recover(model, tok, states, kinds, samples=2)
    assert len(r.optimal_counts) == len(states) and max(r.success_counts) <= 2
    assert r.optimal.rate == pytest.approx(sum(r.optimal_counts) / (2 * len(states)))
    assert r.success.rate == pytest.approx(sum(r.success_counts) / (2 * len(states)))
    total = sum(rate.count for rate in r.by_kind.values())
    assert total == 2 * len(states)
