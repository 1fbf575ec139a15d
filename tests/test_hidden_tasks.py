"""The hidden-information tasks (hilo, fog, house): belief-state oracles, error classes, history.

What is checked, per task: the oracle solves every instance within optimal_length and never makes
an avoidable error; its choices follow from the history alone (two instances that agree on
everything observed so far get the same optimal set); a history-blind lookup table falls behind it
by a measured margin; any string is a harmless input; both texts state the same facts.
"""

from __future__ import annotations

import random
import re

import pytest

import tasks
from tasks.fog import optimistic_distances
from tasks.history import blind_table, oracle_success, table_success
from tasks.house import prior, value

HIDDEN = list(tasks.HIDDEN)
KEYS = {"action", "valid", "mistake", "optimal", "success", "distance", "error"}
WORD = re.compile(r"[a-z]+|\d+|[.,:]")
EVAL = range(tasks.EVAL_SEEDS.start, tasks.EVAL_SEEDS.start + 300)


def test_registered_and_hidden() -> None:
    assert set(HIDDEN) == {"hilo", "fog", "house"} and set(HIDDEN) <= set(tasks.NAMES)


@pytest.mark.parametrize("name", HIDDEN)
def test_oracle_solves_within_optimal_length_without_avoidable_errors(name: str) -> None:
    env = tasks.make(name)
    lengths, errors = set(), {None: 0, "unavoidable": 0}
    for seed in range(300):
        env.reset(seed)
        rng, turns = random.Random(seed), 0
        lengths.add(env.optimal_length)
        while not env.done:
            step = env.step(rng.choice(sorted(env.optimal_actions())))
            turns += 1
            assert step.info["valid"] and step.info["optimal"] and not step.info["mistake"]
            assert step.info["error"] in (None, "unavoidable"), (name, seed)
            errors[step.info["error"]] += 1
            assert turns <= env.optimal_length, (name, seed)
        assert step.info["success"] and step.reward == 1.0 and env.distance() == 0
    assert len(lengths) >= 3, "optimal_length varies with the hidden truth"
    assert errors["unavoidable"] > 100, "the oracle must pay to learn what is hidden"


@pytest.mark.parametrize("name", HIDDEN)
def test_info_keys_are_fixed_and_garbage_is_harmless(name: str) -> None:
    env = tasks.make(name)
    for seed in range(30):
        obs = env.reset(seed)
        best, distance = env.optimal_actions(), env.distance()
        for text in ["", "🙂", "lorem " * 900, "go go", "open drawer 9", "\x00", "up up"]:
            step = env.step(text)
            assert set(step.info) == KEYS and step.info["error"] is None
            assert step.observation == "invalid action . " + obs and not step.done
            assert env.optimal_actions() == best and env.distance() == distance
        rng = random.Random(seed)
        for _ in range(20):
            step = env.step(rng.choice(env.action_words))
            assert set(step.info) == KEYS
            assert step.info["mistake"] == (step.info["error"] == "avoidable")
            if step.done:
                break


# ---- the oracle answers for what the agent knows --------------------------------------------


def observed_prefix(env: tasks.Env, seed: int, actions: list[str]) -> list[str]:
    out = [env.reset(seed)]
    for action in actions:
        if env.done:
            break
        out.append(env.step(action).observation)
    return out


@pytest.mark.parametrize("name", HIDDEN)
def test_oracle_depends_only_on_the_history(name: str) -> None:
    """Instances that look the same so far (same actions, same observations) share the oracle."""
    env, other = tasks.make(name), tasks.make(name)
    pairs = 0
    for seed in range(150):
        rng = random.Random(seed)
        env.reset(seed)
        actions: list[str] = []
        for _ in range(4):
            if env.done:
                break
            actions.append(rng.choice(env.action_words))
            env.step(actions[-1])
        if env.done:
            continue
        mine = observed_prefix(env, seed, actions)
        best = env.optimal_actions()
        for twin in range(seed + 1, seed + 200):
            if other.reset(twin) != mine[0]:
                continue
            if observed_prefix(other, twin, actions) == mine and not other.done:
                assert other.optimal_actions() == best, (name, seed, twin, actions)
                pairs += 1
    assert pairs >= 10


def test_hilo_belief_is_the_interval() -> None:
    env = tasks.make("hilo")
    seed = next(s for s in range(1000) if env.reset(s) == "start" and env.target == 11)
    env.reset(seed)
    assert env.optimal_actions() == {"8"}
    step = env.step("8")
    assert step.observation == "higher" and step.info["error"] == "unavoidable"
    assert env.optimal_actions() == {"12"}  # 9..15, which "higher" alone does not say
    step = env.step("3")  # ruled out by "higher"
    assert step.info["error"] == "avoidable" and step.info["mistake"]
    step = env.step("8")  # a repeat
    assert step.info["error"] == "avoidable"
    # 9..12: any guess keeps the worst case at two more (minimax ties).
    assert env.step("13").observation == "lower"
    assert env.optimal_actions() == {"9", "10", "11", "12"}
    step = env.step("11")
    assert step.observation == "correct" and step.done and step.info["error"] is None


def test_hilo_ceiling_is_met_by_the_oracle() -> None:
    env = tasks.make("hilo")
    for budget in range(1, 6):
        p, _ = oracle_success("hilo", budget, range(3000))
        assert p == pytest.approx(env.ceiling(budget), abs=0.03), budget  # (2^T - 1) / 15


def test_fog_learns_walls_by_bumping() -> None:
    env = tasks.make("fog")
    seen = {"unavoidable": 0, "avoidable": 0}
    for seed in range(100):
        env.reset(seed)
        for action in env.action_words:
            nxt = (
                env.pos[0] + {"up": -1, "down": 1}.get(action, 0),
                env.pos[1] + {"left": -1, "right": 1}.get(action, 0),
            )
            if nxt in env.grid.walls:
                first = env.step(action)
                assert first.info["error"] == "unavoidable" and not first.info["mistake"]
                assert first.observation.startswith("wall . pos ")
                assert "blocked" not in first.observation
                assert action not in env.optimal_actions()  # a met wall is avoided
                again = env.step(action)
                assert again.info["error"] == "avoidable" and again.info["mistake"]
                seen["unavoidable"] += 1
                seen["avoidable"] += 1
                break
    assert seen["unavoidable"] >= 20
    # The oracle's distance is BFS over the cells not known to be walls.
    env.reset(0)
    assert env.distance() == optimistic_distances(env.size, frozenset(), env.goal)[env.start]
    assert env.distance() <= env.optimal_length


def test_house_rules_and_errors() -> None:
    env = tasks.make("house")
    seed = next(s for s in range(500) if env.reset(s) and env.layout.count("hall") == 0)
    obs = env.reset(seed)
    assert obs == "hall . no drawers . door"
    assert env.optimal_actions() == {"go kitchen", "go bedroom"}  # symmetric rooms
    assert env.step("go hall").info["error"] == "avoidable"
    assert env.step("unlock door").info["error"] == "avoidable"
    assert env.step("take key").info["error"] == "avoidable"
    kitchen = env.step("go kitchen")
    assert kitchen.info["error"] is None and kitchen.observation.startswith("kitchen . ")
    for d in range(4):
        if env.layout[d] == "kitchen" and d != env.key:
            first = env.step(f"open drawer {d + 1}")
            assert first.observation == f"drawer {d + 1} empty"
            assert first.info["error"] == "unavoidable"
            assert env.step(f"open drawer {d + 1}").info["error"] == "avoidable"
        if env.layout[d] != "kitchen":
            assert env.step(f"open drawer {d + 1}").observation == "nothing happens"
    # Play the oracle to the end: it fetches the key and walks back to the door.
    while not env.done:
        step = env.step(sorted(env.optimal_actions())[0])
    assert step.observation == "door open" and step.info["success"]


def test_house_values_are_expected_turns() -> None:
    # All drawers in the hall (known at once), key uniform over 4: open in order, so the key is
    # found after k openings with probability 1/4 each; then take (1) and unlock (1).
    belief = frozenset(h for h in prior(4) if h[0] == ("hall",) * 4)
    assert value("hall", belief) == pytest.approx(sum(k + 2 for k in range(1, 5)) / 4)


# ---- history matters -------------------------------------------------------------------------

# Measured on EVAL (300 held-out seeds), table from 5000 training seeds: oracle / blind success.
# hilo T=8: 1.000 / 0.237; fog T=16: 0.993 / 0.753; house T=12: 1.000 / 0.000.
GAPS = [("hilo", 8, 0.6), ("fog", 16, 0.15), ("house", 12, 0.8)]


@pytest.mark.parametrize(("name", "budget", "margin"), GAPS)
def test_history_blind_policy_falls_behind(name: str, budget: int, margin: float) -> None:
    table = blind_table(name, range(5000))
    oracle, _ = oracle_success(name, budget, EVAL)
    blind, _ = table_success(name, table, budget, EVAL)
    assert oracle >= 0.97
    assert oracle - blind >= margin, (name, oracle, blind)
    if name != "fog":
        return  # hilo's table holds every observation; house's lacks only "nothing happens"
    # fog's gap is the history's, not holes in the table: the blind policy almost never meets an
    # observation the table lacks (measured: 2.5% of lookups; gridnav, whose observations also
    # list the blocked directions, 29%, which is why gridnav is not compared this way).
    env, lookups, missing = tasks.make(name), 0, 0
    for seed in EVAL:
        observation = env.reset(seed)
        for _ in range(budget):
            lookups, missing = lookups + 1, missing + (observation not in table)
            step = env.step(table.get(observation, env.action_words[0]))
            if step.done:
                break
            observation = step.observation
    assert missing / lookups < 0.05


def test_fully_observed_guess_loses_nothing_without_history() -> None:
    table = blind_table("guess", range(500))
    assert table_success("guess", table, 4, EVAL)[0] == 1.0


# ---- texts -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", HIDDEN)
def test_compact_text_is_tiny_model_readable(name: str) -> None:
    env = tasks.make(name)
    vocabulary = env.vocabulary()
    prompt = env.system_prompt.split()
    assert len(prompt) <= 25 and set(prompt) <= vocabulary
    for seed in range(100):
        rng = random.Random(seed)
        texts = [env.reset(seed)]
        for _ in range(30):
            step = env.step(rng.choice(env.action_words))
            texts.append(step.observation)
            if step.done:
                break
        for text in texts:
            words = text.split()
            assert len(words) <= 20 and set(words) <= vocabulary, text
            assert all(WORD.fullmatch(w) for w in words), text


# Each compact word that carries a fact, and how the natural text says the same fact.
FACTS = {
    "higher": "higher",
    "lower": "lower",
    "correct": "correct",
    "start": "first guess",
    "wall": "walked into a wall",
    "empty": "it is empty",
    "has": "the key is inside",
    "nothing": "nothing happens",
    "door": "door",
    "have": "you take the key",
}


@pytest.mark.parametrize("name", HIDDEN)
def test_natural_text_states_every_compact_fact(name: str) -> None:
    compact, natural = tasks.make(name), tasks.make(name, text="natural")
    assert natural.system_prompt.endswith(natural.format_rule())
    for seed in range(60):
        pair = [(compact.reset(seed), natural.reset(seed))]
        rng = random.Random(seed)
        for _ in range(15):
            action = rng.choice(compact.action_words)
            a, b = compact.step(action), natural.step(f"I will say: {action}")
            assert a.info == b.info
            pair.append((a.observation, b.observation))
            if a.done:
                break
        for short, long in pair:
            said = long.lower()
            for word, phrase in FACTS.items():
                if word in short.split():
                    assert phrase in said, (short, long)
            for number in re.findall(r"\d+", short):  # positions, offsets, drawer numbers
                assert number in said, (short, long)
            if short.split()[0] in ("hall", "kitchen", "bedroom"):  # entering a room
                assert f"you are in the {short.split()[0]}" in said, (short, long)


@pytest.mark.parametrize("name", HIDDEN)
def test_episode_viewer_replays_and_marks_error_classes(name: str) -> None:
    from minirl.rundir.viewer import replay

    env = tasks.make(name)
    env.reset(4)
    optimal_length = env.optimal_length  # the instance's, as the rollout records it at reset
    rng, turns = random.Random(4), []
    keys = ("valid", "mistake", "optimal", "action")
    for _ in range(12):
        step = env.step(reply := rng.choice(env.action_words))
        turns.append({"reply": reply, **{k: step.info[k] for k in keys}})
        if step.done:
            break
    record = {"seed": 4, "turns": turns, "optimal_length": optimal_length}
    frames = replay(name, {**record, "success": step.info["success"]})
    assert len(frames) == len(turns) + 1
    marks = {m for f in frames for m in f.marks}
    assert marks & {"avoidable error", "unavoidable error"}
    if name == "fog":
        assert {"walls", "hidden_walls", "fog", "agent", "goal"} <= set(frames[-1].picture)


@pytest.mark.slow
def test_house_base_plays_imperfectly_but_not_hopelessly() -> None:
    """The tiny house base (built once, ~2 min) wins held-out episodes at T = 12 several times
    as often as a uniformly random policy, and well short of the oracle's 1.0."""
    import torch

    from minirl.episode import EpisodeSpec
    from minirl.models import load_policy
    from minirl.rollout import rollout

    torch.manual_seed(0)
    model, tokenizer = load_policy("tiny", "nf4", task="house")
    seeds = tasks.EVAL_SEEDS[:200]
    episodes = rollout(
        model, tokenizer, [EpisodeSpec("house", s, 12, i) for i, s in enumerate(seeds)]
    )
    success = sum(e.success for e in episodes) / len(episodes)
    env, wins = tasks.make("house"), 0
    for i, seed in enumerate(list(seeds) * 3):
        env.reset(seed)
        rng = random.Random(i)
        for _ in range(12):
            step = env.step(rng.choice(env.action_words))
            if step.done:
                wins += step.reward > 0
                break
    random_success = wins / (3 * len(seeds))
    # Measured: random 0.018. The base: 0.23 on the machine that first built it, 0.145 on CI's
    # and this one (its 200 warm-start steps amplify the last float bits of the CPU's kernels),
    # so the band is wide: at least 4x random, at most 0.60.
    assert random_success < 0.04
    assert 4 * random_success <= success <= 0.60, (success, random_success)
