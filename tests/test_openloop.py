"""The open-loop yardstick (minirl.eval.openloop) against brute force, and its cache.

Brute force here means: every sequence of action words of length T, each played from a fresh
copy of every instance through the real environment (copy.deepcopy of a reset env, not the
search's pickles), and the best count taken. For guess and hilo the instances are one seed per
target, so the average over them is the expectation over a uniform target, exactly.
"""

from __future__ import annotations

import copy
import itertools
import json
import math

import pytest

import tasks
from minirl.eval import openloop
from minirl.eval.openloop import Search, exact_success, search, yardsticks


def brute_force(envs: list[tasks.Env], actions: tuple[str, ...], budget: int) -> int:
    """The most instances any sequence of `budget` actions solves, trying every sequence."""
    best = 0
    for sequence in itertools.product(actions, repeat=budget):
        solved = 0
        for fresh in envs:
            env = copy.deepcopy(fresh)
            for reply in sequence:
                step = env.step(reply)
                if step.done:
                    solved += bool(step.info["success"])
                    break
        best = max(best, solved)
    return best


def reset_envs(task: str, seeds: list[int], **options: object) -> list[tasks.Env]:
    envs = []
    for seed in seeds:
        env = tasks.make(task, **options)
        env.reset(seed)
        envs.append(env)
    return envs


def one_seed_per_target(task: str, n: int) -> list[int]:
    """A training seed for each target 1..n: a uniform target, exactly, over these instances."""
    found: dict[int, int] = {}
    for seed in tasks.TRAIN_SEEDS:
        env = tasks.make(task, n=n)
        env.reset(seed)
        found.setdefault(env.target, seed)  # type: ignore[attr-defined]
        if len(found) == n:
            return [found[t] for t in range(1, n + 1)]
    raise AssertionError("unreachable: the seeds cover every target")


@pytest.mark.parametrize("task", ["guess", "hilo"])
@pytest.mark.parametrize("n", [3, 4, 5])
def test_guess_and_hilo_are_min_t_n_over_n_by_brute_force(task: str, n: int) -> None:
    envs = reset_envs(task, one_seed_per_target(task, n), n=n)
    actions = envs[0].action_words
    for budget in range(1, 5):
        best = brute_force(envs, actions, budget) / n
        assert best == pytest.approx(exact_success(n, budget)) == min(budget, n) / n
        found = yardsticks(task, [budget], options={"n": n}, cache=False)[budget]
        assert found.method == "exact" and found.success == pytest.approx(best)
        assert found.stderr == 0.0 and len(set(found.sequence)) == min(budget, n)


def test_guess_is_t_over_n_and_its_sequence_wins_that_on_held_out_instances() -> None:
    found = yardsticks("guess", [4, 6, 8, 15, 20], cache=False)
    assert [round(found[t].success, 6) for t in (4, 6, 8)] == [
        round(4 / 15, 6),
        round(6 / 15, 6),
        round(8 / 15, 6),
    ]
    assert found[15].success == found[20].success == 1.0
    # The seeds' targets are uniform: the sequence wins T/n on held-out instances too.
    seeds = tasks.EVAL_SEEDS[:3000]
    for t in (4, 8):
        wins = openloop.play("guess", found[t].sequence, seeds, {})
        p = sum(wins) / len(wins)
        assert abs(p - t / 15) < 3 * math.sqrt(p * (1 - p) / len(wins)), (t, p)
    # The trained smollm2 policy of issue 25 replied "9, 10, 11, ...": the same, blind.
    scan = [str(g) for g in range(9, 17)]
    assert sum(openloop.play("guess", scan[:6], seeds, {})) / len(seeds) == pytest.approx(
        6 / 15, abs=0.03
    )


# (task, T, search seeds, options): a grid task, the stochastic one, one with deadlocks (small
# rooms and short solutions, so that depth 3 solves some), two that hide information.
SMALL = [
    ("gridnav", 3, 30, {}),
    ("icy", 3, 30, {}),
    ("sokoban", 3, 30, {"size": 5, "min_length": 1}),
    ("fog", 3, 30, {}),
    ("house", 3, 20, {}),
]


@pytest.mark.parametrize(("task", "budget", "n_seeds", "options"), SMALL)
def test_search_with_room_for_everything_equals_brute_force(
    task: str, budget: int, n_seeds: int, options: dict
) -> None:
    seeds = list(tasks.TRAIN_SEEDS[:n_seeds])
    envs = reset_envs(task, seeds, **options)
    actions = envs[0].action_words
    found = search(task, budget, seeds, width=len(actions) ** budget, options=options)
    best = [brute_force(envs, actions, depth) for depth in range(1, budget + 1)]
    assert best[-1] > 0  # something to find
    for depth, (sequence, solved, pruned) in enumerate(found, start=1):
        assert not pruned and len(sequence) == depth
        assert solved == best[depth - 1], (task, depth)
        assert sum(openloop.play(task, sequence, seeds, options)) == solved  # does what it says
    if task == "sokoban":  # the brute force met irreversible deadlocks, not only walls
        deadlocks = 0
        for fresh, sequence in itertools.product(envs, itertools.product(actions, repeat=2)):
            env = copy.deepcopy(fresh)
            deadlocks += any(env.step(r).info["deadlock"] for r in sequence if not env.done)
        assert deadlocks > 0


def test_a_narrow_beam_prunes_never_beats_brute_force_and_never_falls() -> None:
    seeds = list(tasks.TRAIN_SEEDS[:30])
    found = search("gridnav", 4, seeds, width=3)
    best = brute_force(reset_envs("gridnav", seeds), tasks.make("gridnav").action_words, 4)
    assert found[-1][2]  # pruned: a beam, and it says so
    assert found[-1][1] <= best
    solved = [s for _, s, _ in found]
    assert solved == sorted(solved)  # the incumbent is kept: one more turn never loses


def test_the_reported_success_is_the_sequence_played_on_held_out_instances() -> None:
    size = Search(seeds=30, width=8, held_out=200)
    found = yardsticks("gridnav", [3, 5], size, cache=False)
    for t, y in found.items():
        assert y.method == "beam" and len(y.sequence) == t and y.held_out == 200
        wins = openloop.play("gridnav", y.sequence, tasks.EVAL_SEEDS[:200], {})
        assert y.success == sum(wins) / 200
        assert y.stderr == pytest.approx(math.sqrt(y.success * (1 - y.success) / 200))
        assert y.train_success == sum(openloop.play("gridnav", y.sequence, range(30), {})) / 30


@pytest.mark.parametrize("task", tasks.NAMES)
def test_every_task_has_a_yardstick(task: str) -> None:
    found = yardsticks(task, [1, 2], Search(seeds=10, width=4, held_out=40), cache=False)
    actions = tasks.make(task).action_words
    for t, y in found.items():
        assert 0.0 <= y.success <= 1.0 and y.task == task and y.budget == t
        assert len(y.sequence) <= t and all(r in actions for r in y.sequence)
    assert found[1].train_success <= found[2].train_success  # one more turn never loses


def test_the_cache_is_read_back_checked_and_extended(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("MINIRL_CACHE", str(tmp_path))
    size = Search(seeds=20, width=4, held_out=50)
    first = yardsticks("gridnav", [2, 4], size)
    (path,) = (tmp_path / "openloop").iterdir()
    stored = json.loads(path.read_text())
    assert len(stored["search"]) == 4 and set(stored["budgets"]) == {"2", "4"}

    def no_search(*args: object, **kwargs: object) -> None:
        raise AssertionError("searched again")

    monkeypatch.setattr(openloop, "search", no_search)
    assert yardsticks("gridnav", [2, 4], size) == first  # read back, not recomputed
    third = yardsticks("gridnav", [3], size)[3]  # within the stored depth: held-out play only
    assert third.sequence == stored["search"][2][0]
    monkeypatch.undo()
    monkeypatch.setenv("MINIRL_CACHE", str(tmp_path))
    fresh = yardsticks("gridnav", [3], size, cache=False)[3]
    assert (third.sequence, third.success, third.method) == (
        fresh.sequence,
        fresh.success,
        fresh.method,
    )
    # A mistyped record is not trusted: it is computed again, and the same numbers come back.
    stored = json.loads(path.read_text())
    stored["budgets"]["2"]["success"] = "lots"
    stored["search"][0][1] = "many"
    path.write_text(json.dumps(stored))
    again = yardsticks("gridnav", [2, 4], size)
    assert {t: y.success for t, y in again.items()} == {t: y.success for t, y in first.items()}
    path.write_text("not json {")
    assert yardsticks("gridnav", [2], size)[2].success == first[2].success


def test_cli_prints_the_yardstick_and_refuses_bad_budgets(capsys) -> None:
    assert openloop.main(["--task", "guess", "--budgets", "4,6,8"]) == 0
    out = capsys.readouterr().out
    assert "guess T=  4: 0.267" in out and "T=  6: 0.400" in out and "T=  8: 0.533" in out
    assert openloop.main(["--task", "guess", "--budgets", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--budgets" in err[0]
