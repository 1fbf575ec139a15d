"""Matching post-error states to fresh ones, by hand, its one impossibility on gridnav, and
the instance hardness that breaks its ties."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from minirl.eval.recovery import (
    DISTANCE_CAP,
    OPTIMAL_CAP,
    TURN_CAP,
    hardness,
    match,
    match_key,
    turn_flags,
)
from minirl.study import simulate


def test_match_key_caps_where_states_grow_rare() -> None:
    assert match_key(2, 3.0, 1) == (2, 3, 1)
    assert match_key(2, 2.6, 1) == (2, 3, 1)  # house's expected distances are rounded
    assert match_key(TURN_CAP + 4, 99.0, 7) == (TURN_CAP, DISTANCE_CAP, OPTIMAL_CAP)
    assert match_key(1, math.inf, 1)[1] == DISTANCE_CAP


def test_match_prefers_the_same_instance_then_keeps_the_pools_order() -> None:
    a, b = (2, 3, 1), (3, 2, 1)
    fresh = [(7, a), (5, a), (5, b), (9, a), (5, a)]
    post = [(5, a), (9, a), (8, b), (5, (6, 6, 3))]
    assert match(post, fresh, per_state=2) == [
        [1, 4],  # instance 5's own fresh states with key a, in the pool's order
        [3, 0],  # instance 9's one, then the first other (instance 7's)
        [2],  # only one fresh state has key b
        [],  # no fresh state has this key: unmatched
    ]
    assert match(post, fresh, per_state=1)[0] == [1]


def test_on_gridnav_no_fresh_state_shares_a_post_error_states_instance_turn_and_distance() -> None:
    """Why matches come from other instances: an error costs distance that no fresh state of the
    same instance has at the same turn (the module docstring's argument, checked by play)."""
    base = simulate.SimPolicy(0.6, 0.6)
    seeds = list(range(1_000_000, 1_000_030))
    played = simulate.episodes("gridnav", seeds, base, 10, 6, stream=3)
    fresh, post = set(), set()
    for s, row in zip(seeds, played, strict=True):
        for e in row:
            clean = e.first_error - 1 if e.first_error else len(e.actions)
            for j in range(min(clean + 1, len(e.actions))):
                c = simulate._covariates("gridnav", s, e.actions[:j])
                fresh.add((s, c["turn"], c["distance"]))
            if e.first_error and e.first_error < len(e.actions):
                c = simulate._covariates("gridnav", s, e.actions[: e.first_error])
                post.add((s, c["turn"], c["distance"]))
    assert len(post) > 50 and len(fresh) > 50
    assert not post & fresh


def test_hardness_is_each_instances_share_of_non_optimal_turns() -> None:
    turn = SimpleNamespace  # what hardness reads of an episode: its seed and its turns' flags
    episodes = [
        turn(seed=5, turns=[turn(optimal=True), turn(optimal=False)]),
        turn(seed=5, turns=[turn(optimal=True), turn(optimal=True)]),
        turn(seed=9, turns=[turn(optimal=False)]),
    ]
    flags = turn_flags(episodes)  # type: ignore[arg-type]
    assert flags == {5: [True, False, True, True], 9: [False]}
    assert hardness(flags) == {5: 0.25, 9: 1.0}


@pytest.mark.parametrize("task", ["gridnav", "fog"])
def test_per_turn_hardness_finds_the_hard_instances_that_few_episode_outcomes_miss(
    task: str,
) -> None:
    """The matching's tie-breaker must rank instances by how hard they really are: a simulated
    base whose log-odds carry each instance's difficulty draw z (spread 0.6, as the validation's
    deficit world), 60 instances x 8 episodes as the study draws its states. Ranked by the share
    of non-optimal turns, the instances follow -z closely (rank correlation 0.87 to 0.93 here);
    ranked by the share of failed episodes (the old tie-breaker), loosely (0.48 to 0.64), and
    the 60 instances share 9 values."""
    seeds = list(range(1_000_000, 1_000_060))
    played = simulate.episodes(task, seeds, simulate.SimPolicy(0.6, 0.35, spread=0.6), 12, 8, 1)
    rows = dict(zip(seeds, played, strict=True))
    per_turn = hardness({s: [ok for e in r for ok in e.optimal] for s, r in rows.items()})
    failed = {s: sum(e.success_turn is None for e in r) / len(r) for s, r in rows.items()}
    minus_z = [-simulate.difficulty(s) for s in seeds]

    def spearman(h: dict[int, float]) -> float:
        ranks = [np.argsort(np.argsort(x)) for x in ([h[s] for s in seeds], minus_z)]
        return float(np.corrcoef(*ranks)[0, 1])

    assert spearman(per_turn) > 0.8
    assert spearman(per_turn) > spearman(failed) + 0.2
