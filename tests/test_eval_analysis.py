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


def test_post_error_states_end_just_after_the_first_error_and_name_its_kind(quick_policy) -> None:
    from minirl.eval.analysis import error_free
    from minirl.eval.recovery import KINDS, post_error_states, recover

    model, tok = quick_policy
    episodes = sweep(model, tok, "fog", [6], SEEDS, 3, budget_visible=True)[6]
    states, kinds = post_error_states(episodes, 12, seed=1)
    assert (states, kinds) == post_error_states(episodes, 12, seed=1)  # deterministic
    assert states and len(states) == len(kinds) and set(kinds) <= set(KINDS)
    by_key = {(e.seed, tuple(t.reply for t in e.turns)): e for e in episodes}
    for state, kind in zip(states, kinds, strict=True):
        j = len(state.replies)  # the error was reply j (1-based): the state ends just after it
        e = next(e for (s, r), e in by_key.items() if s == state.seed and r[:j] == state.replies)
        assert error_free(e, j - 1) and not e.turns[j - 1].optimal and j < e.turns_used
        # Its kind is what the env said of that action, replayed from the start.
        env = tasks.make("fog")
        env.reset(state.seed)
        for reply in state.replies[:-1]:
            env.step(reply)
        info = env.step(state.replies[-1]).info
        turn = e.turns[j - 1]
        expected = (
            "invalid"
            if not turn.valid
            else info.get("error") or ("avoidable" if turn.mistake else "detour")
        )
        assert kind == expected
        # The conversation is the episode's, exactly, up to the next assistant reply.
        assert list(state.prompt_ids) == e.input_ids[: len(state.prompt_ids)]
    # Recovery plays `samples` continuations from each state; its counts add up to its rates.
    r = recover(model, tok, states, kinds, samples=2)
    assert len(r.optimal_counts) == len(states) and max(r.success_counts) <= 2
    assert r.optimal.rate == pytest.approx(sum(r.optimal_counts) / (2 * len(states)))
    assert r.success.rate == pytest.approx(sum(r.success_counts) / (2 * len(states)))
    total = sum(rate.count for rate in r.by_kind.values())
    assert total == 2 * len(states)
