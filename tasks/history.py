"""How much the history is worth: the oracle's success per budget, and a history-blind rival.

`oracle_success(task, T, seeds)` plays the belief-state oracle (ties broken at random, seeded by
the instance) for at most T turns on each seed and returns the success rate with its standard
error sqrt(p (1 - p) / n). For a fully observed deterministic task this is just the share of
instances with optimal_length <= T; with hidden information the oracle must spend turns learning
(a wrong guess, a bump, an empty drawer), so this is the ceiling per T that a study should compare
a trained policy against.

Why the oracles stay budget-blind. Every oracle in tasks/ minimises turns (worst case for guess
and hilo, expected for icy and house, best case for fog), not the chance of success within the
turns left. A budget-aware "optimal" would change with T, so the single-step quality of one action
in one state would differ between the T = 4 and T = 8 evaluations, and with the budget hidden
(--no_budget_visible) it would not be defined from what the agent sees. Where the two differ
(icy: in 182 of 10,401 (state, turns-left) pairs no expected-turn-optimal action maximises the
chance of arriving in time), compare against oracle_success per T, a lower bound on the
budget-aware optimum; for hilo with n = 2^k - 1 and for guess it is exact (Hilo.ceiling).

`blind_table(task, seeds)` builds the best *history-blind* imitation of the oracle: a lookup
table from the last observation alone to the action the oracle took most often after it (counted
over oracle episodes on `seeds`, which should be training seeds). `table_success` scores such a
table on other seeds. On a fully observed task whose observations the table covers (guess) it
loses nothing, since the observation says everything the oracle needs; on hilo, fog and house it
falls far behind, and by how much is the measure of how much the history matters. (A table only
knows observations it has met: check coverage before reading a gap, as tests/test_hidden_tasks.py
does. gridnav's observations, which list the blocked directions, are too many for 5000 episodes.)
"""

from __future__ import annotations

import math
import random
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable

import tasks

Policy = Callable[[tasks.Env, str], str]


def oracle_policy(rng: random.Random) -> Policy:
    """Play one of the oracle's optimal actions, chosen at random."""
    return lambda env, observation: rng.choice(sorted(env.optimal_actions()))


def play(env: tasks.Env, seed: int, policy: Policy, budget: int) -> bool:
    """Run one episode of at most `budget` turns; True when it ends in success."""
    observation = env.reset(seed)
    for _ in range(budget):
        step = env.step(policy(env, observation))
        if step.done:
            return bool(step.info["success"])
        observation = step.observation
    return False


def rate(wins: list[bool]) -> tuple[float, float]:
    """(mean, standard error) of a list of successes."""
    p = sum(wins) / len(wins)
    return p, math.sqrt(p * (1 - p) / len(wins))


def oracle_success(
    task: str, budget: int, seeds: Iterable[int], **options: object
) -> tuple[float, float]:
    """The belief-state oracle's success within `budget` turns, with its standard error."""
    env = tasks.make(task, **options)
    return rate([play(env, s, oracle_policy(random.Random(s)), budget) for s in seeds])


def blind_table(task: str, seeds: Iterable[int], budget: int = 30, **options: object) -> dict:
    """{last observation: the oracle's most frequent action after it}, from oracle episodes."""
    env = tasks.make(task, **options)
    counts: dict[str, Counter] = defaultdict(Counter)
    for seed in seeds:
        rng = random.Random(seed)
        observation = env.reset(seed)
        for _ in range(budget):
            action = rng.choice(sorted(env.optimal_actions()))
            counts[observation][action] += 1
            step = env.step(action)
            if step.done:
                break
            observation = step.observation
    # Ties go to the alphabetically first action, so the table is deterministic.
    return {obs: min(c, key=lambda a: (-c[a], a)) for obs, c in counts.items()}


def table_policy(table: dict, fallback: str) -> Policy:
    """The same action for the same last observation; `fallback` for one the table never saw."""
    return lambda env, observation: table.get(observation, fallback)


def table_success(
    task: str, table: dict, budget: int, seeds: Iterable[int], **options: object
) -> tuple[float, float]:
    """A history-blind table's success within `budget` turns, with its standard error."""
    env = tasks.make(task, **options)
    policy = table_policy(table, env.action_words[0])
    return rate([play(env, s, policy, budget) for s in seeds])
