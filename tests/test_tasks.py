"""Behavioural tests for tasks/: the oracles are exact, random play is clearly worse, seeds are
deterministic, garbage input is harmless and observations stay tiny-model readable."""

from __future__ import annotations

import copy
import math
import os
import random
import re
import subprocess
import sys

import pytest

import tasks
from tasks.grid import Grid, bfs_distances
from tasks.gridnav import GridNav
from tasks.guess import cost
from tasks.icy import expected_turns
from tasks.sokoban import distances_to_target, push_move

DETERMINISTIC = [("gridnav", {}), ("icy", {"slip": 0.0}), ("sokoban", {})]
ALL = [*DETERMINISTIC, ("icy", {}), ("guess", {})]
INFO_KEYS = {"action", "valid", "mistake", "optimal", "success", "distance"}
WORD = re.compile(r"[a-z]+|\d+|[.,:]")


def play(
    env: tasks.Env, seed: int, policy: str, budget: int, rng: random.Random
) -> list[tasks.Step]:
    """Steps of one episode under the oracle (random tie-breaks) or a uniform random policy."""
    env.reset(seed)
    steps = []
    for _ in range(budget):
        if policy == "oracle":
            action = rng.choice(sorted(env.optimal_actions()))
        else:
            action = rng.choice(env.action_words)
        steps.append(env.step(action))
        if steps[-1].done:
            break
    return steps


def success_rate(name: str, options: dict, policy: str, multiple: int, seeds: range) -> float:
    env = tasks.make(name, **options)
    wins = 0
    for seed in seeds:
        env.reset(seed)
        steps = play(env, seed, policy, multiple * env.optimal_length, random.Random(seed))
        wins += steps[-1].info["success"]
    return wins / len(seeds)


# ---- oracle exactness ---------------------------------------------------------------------


@pytest.mark.parametrize(("name", "options"), DETERMINISTIC)
def test_oracle_solves_in_exactly_optimal_length(name: str, options: dict) -> None:
    env = tasks.make(name, **options)
    for seed in range(250):
        env.reset(seed)
        length, rng = env.optimal_length, random.Random(seed)
        assert env.distance() == length
        steps = []
        while not env.done:
            before = env.distance()
            steps.append(env.step(rng.choice(sorted(env.optimal_actions()))))
            info = steps[-1].info
            assert info["valid"] and info["optimal"] and not info["mistake"]
            assert info["distance"] == before - 1 == env.distance()
            assert len(steps) <= length, f"{name} seed {seed} overran its optimal length"
        assert len(steps) == length
        assert [s.reward for s in steps] == [0.0] * (length - 1) + [1.0]
        assert steps[-1].info["success"] and env.distance() == 0
        assert env.optimal_actions() == set()


def test_length_ranges_are_respected_and_varied() -> None:
    for name, low, high in [("gridnav", 2, 8), ("sokoban", 3, 10)]:
        env = tasks.make(name)
        lengths = set()
        for seed in range(200):
            env.reset(seed)
            lengths.add(env.optimal_length)
        assert min(lengths) >= low and max(lengths) <= high
        assert len(lengths) >= high - low  # nearly every length in range occurs
    env = tasks.make("gridnav", min_length=5, max_length=5)
    for seed in range(20):
        env.reset(seed)
        assert env.optimal_length == 5


def test_guess_costs() -> None:
    assert [cost(m) for m in range(1, 17)] == [1, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 4, 4, 4, 4, 5]
    assert tasks.make("guess").optimal_length == 0  # set by reset
    for n, expected in [(15, 4), (10, 4), (16, 5), (20, 5), (2, 2)]:
        env = tasks.make("guess", n=n)
        env.reset(0)
        assert env.optimal_length == expected
    env = tasks.make("guess")
    env.reset(0)
    assert env.optimal_actions() == {"8"}  # the only guess that halves 1..15


@pytest.mark.parametrize("n", [15, 10, 16, 20])
def test_guess_oracle_is_worst_case_optimal(n: int) -> None:
    env = tasks.make("guess", n=n)
    seed_for: dict[int, int] = {}
    for seed in range(10_000):
        env.reset(seed)
        seed_for.setdefault(env.target, seed)
        if len(seed_for) == n:
            break
    assert sorted(seed_for) == list(range(1, n + 1))
    # Tie-breaking by observation makes one deterministic policy over all targets, and any
    # deterministic policy needs cost(n) guesses for its worst target: the max must be exact.
    used = {}
    for target, seed in seed_for.items():
        obs = env.reset(seed)
        count = 0
        while not env.done:
            options = env.optimal_actions()
            step = env.step(random.Random(obs).choice(sorted(options, key=int)))
            obs, count = step.observation, count + 1
            assert step.info["optimal"] and not step.info["mistake"]
        assert step.info["success"] and step.reward == 1.0 and env.distance() == 0
        used[target] = count
    assert max(used.values()) == env.optimal_length
    # Random tie-breaks per episode still never exceed the budget.
    for seed in range(200):
        steps = play(env, seed, "oracle", 10 * n, random.Random(seed))
        assert steps[-1].info["success"] and len(steps) <= env.optimal_length


def test_guess_feedback_and_mistakes() -> None:
    env = tasks.make("guess")
    seed = next(s for s in range(1000) if env.reset(s) == "range 1 15" and env.target == 11)
    env.reset(seed)
    assert env.step("8").observation == "higher . range 9 15"
    assert env.distance() == 3
    step = env.step("3")  # already ruled out by "higher"
    assert step.info["mistake"] and not step.info["optimal"]
    assert step.observation == "higher . range 9 15"
    assert env.optimal_actions() == {"12"}  # 9..15 has seven numbers: only 12 halves them
    assert env.step("13").observation == "lower . range 9 12"
    step = env.step("11.")
    assert step.observation == "correct" and step.done and step.reward == 1.0


def test_icy_value_iteration_matches_closed_form() -> None:
    # 2x2 open grid, goal top-left. With slip p, from a cell next to the goal V_a satisfies
    # V_a = 1 + (p/3) V_c + (2p/3) V_a, and from the far corner V_c = 1 + (1 - 2p/3) V_a
    # + (2p/3) V_c. For p = 0.3 that gives V_c = 20/7 and V_a = 45/28.
    grid = Grid(2, frozenset())
    values = expected_turns(grid, (0, 0), bfs_distances(grid, (0, 0)), 0.3)
    assert values[(0, 0)] == 0.0
    assert values[(0, 1)] == pytest.approx(45 / 28, abs=1e-9)
    assert values[(1, 0)] == pytest.approx(45 / 28, abs=1e-9)
    assert values[(1, 1)] == pytest.approx(20 / 7, abs=1e-9)


def test_icy_without_slip_equals_gridnav_oracle() -> None:
    env = tasks.make("icy", slip=0.0)
    for seed in range(100):
        env.reset(seed)
        for cell, dist in env._dist.items():
            env.pos = cell
            assert env.distance() == dist
            if cell != env.goal:
                assert env.optimal_actions() == GridNav._oracle_actions(env)


def test_cached_oracles_match_their_definition_and_hand_out_copies() -> None:
    """gridnav's per-instance table of oracle moves and fog's cache give, in every state, the
    moves that lower the (optimistic) BFS distance by one, computed here from scratch; and a
    caller that changes the set it was given does not change the next answer."""
    from tasks.fog import optimistic_distances

    def lowering(grid: Grid, dist: dict, cell: tuple[int, int]) -> set[str]:
        nxt = {a: grid.move(cell, a) for a in ("up", "down", "left", "right")}
        return {a for a, n in nxt.items() if n != cell and dist.get(n) == dist[cell] - 1}

    env = tasks.make("gridnav")
    for seed in range(40):
        env.reset(seed)
        dist = bfs_distances(env.grid, env.goal)
        for cell in dist:
            env.pos = cell
            assert env.optimal_actions() == lowering(env.grid, dist, cell)
        env.reset(seed)
        env.optimal_actions().clear()
        assert env.optimal_actions() == lowering(env.grid, dist, env.start)
    fog = tasks.make("fog")
    for seed in range(40):
        fog.reset(seed)
        rng = random.Random(seed)
        for _ in range(8):  # walk, bumping into walls, so the known walls change the answer
            optimistic = Grid(fog.size, fog.known)
            dist = optimistic_distances(fog.size, fog.known, fog.goal)
            expected = lowering(optimistic, dist, fog.pos) if fog.pos != fog.goal else set()
            assert fog.optimal_actions() == expected
            fog.optimal_actions().add("nowhere")
            assert fog.optimal_actions() == expected
            if fog.step(rng.choice(fog.action_words)).done:
                break


# ---- oracle versus random play --------------------------------------------------------------


def test_random_policy_is_clearly_worse() -> None:
    seeds = range(300)
    # Measured on seeds 0..399 (oracle 1.0 everywhere): random within 2x optimal length wins
    # gridnav 0.07, icy(slip 0) 0.06, sokoban 0.01; guess within 1x wins 0.28, within 2x 0.46.
    for name, options, multiple, ceiling in [
        ("gridnav", {}, 2, 0.15),
        ("icy", {"slip": 0.0}, 2, 0.15),
        ("sokoban", {}, 2, 0.05),
        ("guess", {}, 1, 0.4),
        ("guess", {}, 2, 0.6),
    ]:
        assert success_rate(name, options, "oracle", multiple, seeds) == 1.0
        assert success_rate(name, options, "random", multiple, seeds) < ceiling, name


def test_icy_with_slip_rewards_the_oracle_and_slips_at_the_rate() -> None:
    seeds = range(300)
    # Measured: within 2x the deterministic optimum the oracle wins 0.93, random 0.06.
    assert success_rate("icy", {}, "oracle", 2, seeds) > 0.85
    assert success_rate("icy", {}, "random", 2, seeds) < 0.15
    env = tasks.make("icy", slip=0.2)
    flags = []
    for seed in range(200):
        flags += [s.info["slipped"] for s in play(env, seed, "oracle", 30, random.Random(seed))]
    assert len(flags) > 800
    assert 0.15 < sum(flags) / len(flags) < 0.25  # about 4 standard errors either side of 0.2


def test_icy_slip_is_reported_and_reproducible() -> None:
    env = tasks.make("icy", slip=0.5)
    runs = [[s.observation for s in play(env, 7, "random", 40, random.Random(1))] for _ in range(2)]
    assert runs[0] == runs[1]
    slipped = [s for s in play(env, 7, "random", 40, random.Random(1)) if s.info["slipped"]]
    assert slipped and all(s.observation.startswith("slipped . ") for s in slipped)


def test_icy_slips_can_cost_the_optimum() -> None:
    env = tasks.make("icy", slip=0.2)
    env.reset(0)
    assert env.distance() > env.optimal_length  # expected turns exceed the deterministic optimum


# ---- seeds ----------------------------------------------------------------------------------


def test_seeds_are_deterministic_and_varied() -> None:
    assert not set(tasks.TRAIN_SEEDS) & set(tasks.EVAL_SEEDS)
    for name, options in ALL:
        a, b = tasks.make(name, **options), tasks.make(name, **options)
        firsts = set()
        for seed in [*range(40), *tasks.EVAL_SEEDS[:10]]:
            obs = a.reset(seed)
            assert b.reset(seed) == obs and a.optimal_length == b.optimal_length
            firsts.add(obs if name != "guess" else a.target)
        assert len(firsts) >= (12 if name == "guess" else 40), name


def test_the_same_actions_from_the_same_seed_reach_the_same_state() -> None:
    """What minirl.grpo.step_advantages assumes: (instance, actions so far) names one state, on
    every task, icy's slips and the hidden tasks' belief states included."""
    rng = random.Random(0)
    for name in tasks.NAMES:
        a, b = tasks.make(name), tasks.make(name)
        for seed in range(8):
            a.reset(seed)
            b.reset(seed)
            for _ in range(12):
                action = rng.choice(sorted(a.action_words))
                step_a, step_b = a.step(action), b.step(action)
                assert (step_a.observation, step_a.info) == (step_b.observation, step_b.info)
                if a.done:
                    break
                assert a.optimal_actions() == b.optimal_actions(), name


def test_instances_do_not_depend_on_hash_randomisation() -> None:
    code = (
        "import tasks\n"
        "for name in tasks.NAMES:\n"
        "    env = tasks.make(name)\n"
        "    print([(env.reset(s), env.optimal_length) for s in range(5)])\n"
    )
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    outputs = []
    for hash_seed in ("1", "2"):
        environ = {**os.environ, "PYTHONHASHSEED": hash_seed}
        result = subprocess.run(
            [sys.executable, "-c", code], cwd=here, env=environ, capture_output=True, text=True
        )
        assert result.returncode == 0, result.stderr
        outputs.append(result.stdout)
    local = "".join(
        f"{[(e.reset(s), e.optimal_length) for s in range(5)]}\n"
        for e in (tasks.make(n) for n in tasks.NAMES)
    )
    assert outputs[0] == outputs[1] == local


# ---- input handling and errors --------------------------------------------------------------


def test_parse_action() -> None:
    words = tasks.make("gridnav").action_words
    assert tasks.parse_action("UP.", words) == "up"
    assert tasks.parse_action("  left!\n", words) == "left"
    assert tasks.parse_action('"down"', words) == "down"
    for text in ["", " ", "🙂", "up up up", "upward", "x" * 10_000, "u p", "\x00"]:
        assert tasks.parse_action(text, words) is None
    assert tasks.parse_action(None, words) is None  # type: ignore[arg-type]
    numbers = tasks.make("guess").action_words
    assert tasks.parse_action("7.", numbers) == "7"
    assert tasks.parse_action("-7", numbers) is None
    assert tasks.parse_action("16", numbers) is None


@pytest.mark.parametrize(("name", "options"), ALL)
def test_garbage_input_is_an_invalid_turn(name: str, options: dict) -> None:
    env = tasks.make(name, **options)
    obs = env.reset(3)
    distance, best = env.distance(), env.optimal_actions()
    for text in ["", "🙂", "lorem ipsum " * 900, "up up up", "8 8", "\n\t"]:
        step = env.step(text)
        assert step.observation == "invalid action . " + obs
        assert step.reward == 0.0 and not step.done
        assert not step.info["valid"] and step.info["action"] is None
        assert not step.info["mistake"] and not step.info["optimal"]
        assert env.distance() == distance and env.optimal_actions() == best
        assert INFO_KEYS <= set(step.info)
    upper = sorted(best)[0].upper() + "."
    assert env.step(upper).info["action"] == sorted(best)[0]


def test_errors() -> None:
    with pytest.raises(ValueError, match="valid tasks: gridnav, icy, sokoban, guess"):
        tasks.make("nope")
    with pytest.raises(TypeError, match="no option 'bogus'"):
        tasks.make("gridnav", bogus=1)
    for name, options in [
        ("gridnav", {"size": 1}),
        ("gridnav", {"wall_prob": 1.0}),
        ("gridnav", {"min_length": 5, "max_length": 3}),
        ("icy", {"slip": 0.9}),
        ("sokoban", {"size": 7}),
        ("guess", {"n": 1}),
    ]:
        with pytest.raises(ValueError):
            tasks.make(name, **options)
    with pytest.raises(ValueError, match="widen"):
        tasks.make("gridnav", size=3, min_length=8, max_length=8).reset(0)
    for name in tasks.NAMES:
        env = tasks.make(name)
        with pytest.raises(RuntimeError):
            env.step(env.action_words[0])
        with pytest.raises(RuntimeError):
            env.optimal_actions()
        env.reset(0)
        while not env.done:
            env.step(sorted(env.optimal_actions())[0])
        with pytest.raises(RuntimeError, match="episode is done; call reset"):
            env.step(env.action_words[0])
        env.reset(1)  # reset makes it playable again
        env.step(env.action_words[0])


# ---- task mechanics -------------------------------------------------------------------------


def test_gridnav_walls_are_mistakes_and_blocked_is_accurate() -> None:
    env = tasks.make("gridnav")
    mistakes = 0
    for seed in range(100):
        obs = env.reset(seed)
        rng = random.Random(seed)
        for _ in range(20):
            blocked = obs.split("blocked ")[1].split()
            action = rng.choice(env.action_words)
            before = env.pos
            step = env.step(action)
            assert step.info["mistake"] == (action in blocked)
            assert step.observation.startswith("wall . ") == step.info["mistake"]
            assert (env.pos == before) == step.info["mistake"]
            mistakes += step.info["mistake"]
            obs = step.observation
            if step.done:
                break
    assert mistakes > 50


def test_icy_mistake_is_the_intended_move() -> None:
    env = tasks.make("icy", slip=0.5)
    seen = set()
    for seed in range(100):
        obs = env.reset(seed)
        for step_index in range(20):
            blocked = obs.split("blocked ")[1].split()
            action = env.action_words[(seed + step_index) % 4]
            step = env.step(action)
            assert step.info["mistake"] == (action in blocked)
            seen.add((step.info["mistake"], step.info["slipped"]))
            obs = step.observation
            if step.done:
                break
    assert seen == {(True, True), (True, False), (False, True), (False, False)}


def test_sokoban_push_rules_and_distances() -> None:
    n = 6
    border = frozenset((r, c) for r in range(n) for c in range(n) if r in (0, 5) or c in (0, 5))
    grid = Grid(n, border)
    assert push_move(grid, ((2, 2), (2, 3)), "right") == ((2, 3), (2, 4))
    assert push_move(grid, ((2, 3), (2, 4)), "right") == ((2, 3), (2, 4))  # box against wall
    assert push_move(grid, ((1, 2), (2, 3)), "up") == ((1, 2), (2, 3))  # player against wall
    dist = distances_to_target(grid, (2, 4))
    assert dist[((2, 2), (2, 3))] == 1
    assert dist[((3, 3), (2, 3))] == 3  # walk left, up, then push right
    assert ((1, 1), (1, 1)) not in dist
    assert all(box != (1, 1) for _, box in dist)  # a box in a corner is always dead


def test_sokoban_deadlock_ends_the_episode() -> None:
    env = tasks.make("sokoban")
    found = 0
    for seed in range(150):
        env.reset(seed)
        for action in env.action_words:
            trial = copy.deepcopy(env)
            step = trial.step(action)
            if not step.info["deadlock"]:
                continue
            found += 1
            assert step.done and step.info["mistake"] and not step.info["success"]
            assert step.reward == 0.0 and step.info["distance"] == math.inf
            assert step.observation.startswith("deadlock . pos ")
            assert trial.distance() == math.inf and not step.info["optimal"]
            with pytest.raises(RuntimeError):
                trial.step("up")
    assert found >= 5


def test_sokoban_bumps_are_mistakes() -> None:
    env = tasks.make("sokoban")
    bumps = 0
    for seed in range(50):
        obs = env.reset(seed)
        blocked = [w for w in obs.split("blocked ")[1].split() if w != "none"]
        for action in blocked:
            trial = copy.deepcopy(env)
            step = trial.step(action)
            assert step.info["mistake"] and not step.done and not step.info["deadlock"]
            assert step.observation == "wall . " + obs
            bumps += 1
    assert bumps > 20


# ---- readability ----------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "options"), ALL)
def test_text_is_tiny_model_readable(name: str, options: dict) -> None:
    env = tasks.make(name, **options)
    vocabulary = env.vocabulary()
    prompt = env.system_prompt.split()
    assert len(prompt) <= 25 and set(prompt) <= vocabulary
    seen: set[str] = set()
    for seed in range(100):
        texts = [env.reset(seed)]
        texts += [s.observation for s in play(env, seed, "random", 30, random.Random(seed))]
        texts.append(env.step("").observation if not env.done else "")
        for text in texts:
            words = text.split()
            assert len(words) <= 20, text
            assert all(WORD.fullmatch(w) for w in words), text
            seen |= set(words)
    assert seen <= vocabulary
    assert all(WORD.fullmatch(w) for w in vocabulary)
