"""Assignment 5: error recovery from fixed post-error states, against matched fresh ones (lesson 7).

"Success after an error" over each policy's own episodes rewards a policy that merely errs less
(lesson 7 shows it on simulated policies). The study instead asks every checkpoint in the *same*
states: the states just after an error of the base policy, and fresh states *matched* to them
(same turn, distance to the goal and number of optimal actions), because a post-error state is
later and farther from the goal than a random fresh one. Implement the three parts of that
measure, and a fourth: the base's deficit in the same position, just before and just after a
failed action, which no matching can give. Grade them with:

    python -m pytest tutorials/assignments/test_a5.py
"""

from __future__ import annotations


def post_error_states(episodes: list[list[bool]]) -> list[tuple[int, int]]:
    """Where the post-error states of these base episodes are.

    Each episode is the list of its turns, True where the action was oracle-optimal. An
    episode's post-error state is the state just after its *first* non-optimal action: return
    (episode index, j) with j the 1-based turn of that action, so the state holds j actions.
    An episode with no error gives none; neither does one whose first error was its last turn
    (nothing was played after it). Keep the episodes' order.
    """
    raise NotImplementedError("assignment 5: implement post_error_states")


def recovery_gain(
    base_fresh: list[int],
    arm_fresh: list[int],
    base_post: list[int],
    arm_post: list[int],
    samples: int,
) -> float:
    """The arm's gain in log-odds of an optimal action after an error, beyond its fresh gain.

    Every list holds, per fixed state, how many of `samples` sampled actions were optimal:
    `*_fresh` in the fresh states (no error behind them), `*_post` in the post-error states. The
    two policies were asked in the same states. With p a pooled rate (all optimal actions over
    all samples of its states) and L(p) = log(p / (1 - p)), return

        [L(arm_post) - L(base_post)] - [L(arm_fresh) - L(base_fresh)].

    Keep L finite: clip each p to [e, 1 - e] first, e = half a trial, 0.5 / (samples * states).
    A policy that only decides better everywhere scores about 0; one that learned to recover
    scores above 0.
    """
    raise NotImplementedError("assignment 5: implement recovery_gain")


Key = tuple[int, int, int]  # (turn, distance to the goal, number of optimal actions)


def match_states(
    post: list[tuple[int, Key]], fresh: list[tuple[int, Key]], per_state: int
) -> list[list[int]]:
    """For each post-error state, the fresh states it is compared with.

    Every state is (instance, key). For each post-error state return up to `per_state` indices
    into `fresh` of states with the *same key*: those of the same instance first, then those of
    other instances, each group in `fresh`'s order. A post-error state with no fresh state of
    its key gets []. A fresh state may be matched to several post-error states.
    """
    raise NotImplementedError("assignment 5: implement match_states")


def same_position_deficit(
    before: list[float], after: list[float], instances: list[int]
) -> tuple[float, float]:
    """The base's deficit in the same position, and its standard error (lesson 7's error probe).

    Pair i is one failed first error (a bump, "nothing happens"): before[i] is the base's exact
    P(optimal) in the state just before it, after[i] in the same position just after it, and
    instances[i] the instance it came from. With L(p) = log(p / (1 - p)) and a, b the means of
    `after` and `before`, return (d, se):

        d  = L(a) - L(b)
        se = sqrt(G / (G - 1) * sum over instances g of (sum of u_i over g's pairs)^2) / n
        u_i = (after[i] - a) / (a (1 - a)) - (before[i] - b) / (b (1 - b))

    n pairs from G distinct instances (the delta method, with an instance's pairs as one
    cluster). A policy that ignores its history has before[i] == after[i], so d = 0, however
    badly it plays in the positions where it erred.
    """
    raise NotImplementedError("assignment 5: implement same_position_deficit")
