"""Grader for assignment 1 (group advantages): hand-computed examples and GRPO's properties."""

from __future__ import annotations

import math
import random

import pytest
from grading import implementation

group_advantages = implementation("a1_advantages", "group_advantages")


def test_one_success_in_four() -> None:
    # mean 0.25, sample std sqrt((0.75^2 + 3 * 0.25^2) / 3) = 0.5
    adv = group_advantages([1.0, 0.0, 0.0, 0.0], 4)
    expected = [0.75 / 0.5001, -0.25 / 0.5001, -0.25 / 0.5001, -0.25 / 0.5001]
    assert adv == pytest.approx(expected, abs=1e-5)


def test_groups_are_normalised_separately() -> None:
    adv = group_advantages([1.0, 0.0, 0.0, 0.0], 2)
    s = math.sqrt(0.5)  # std of [1, 0] with n - 1
    assert adv == pytest.approx([0.5 / (s + 1e-4), -0.5 / (s + 1e-4), 0.0, 0.0], abs=1e-5)


def test_tied_groups_get_zero_advantage() -> None:
    assert group_advantages([1.0, 1.0, 0.0, 0.0, 0.0, 0.0], 2) == pytest.approx([0.0] * 6)


def test_scale_none_only_centres() -> None:
    adv = group_advantages([1.0, 0.0, 0.0, 0.0], 4, scale_rewards="none")
    assert adv == pytest.approx([0.75, -0.25, -0.25, -0.25], abs=1e-6)


def test_scale_batch_uses_the_batch_std() -> None:
    rewards = [1.0, 0.0, 1.0, 1.0]
    mean = sum(rewards) / 4
    batch_std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / 3)
    adv = group_advantages(rewards, 2, scale_rewards="batch")
    assert adv == pytest.approx(
        [0.5 / (batch_std + 1e-4), -0.5 / (batch_std + 1e-4), 0, 0], abs=1e-5
    )


def test_properties_on_random_rewards() -> None:
    rng = random.Random(0)
    for _ in range(50):
        g = rng.randint(2, 6)
        rewards = [rng.random() for _ in range(g * rng.randint(1, 4))]
        adv = group_advantages(rewards, g)
        shifted = group_advantages([r + 3.0 for r in rewards], g)
        assert shifted == pytest.approx(adv, abs=1e-4)  # a constant reward shift changes nothing
        for i in range(0, len(rewards), g):
            group = adv[i : i + g]
            assert sum(group) == pytest.approx(0.0, abs=1e-4)  # zero mean in every group
            std = math.sqrt(sum(a**2 for a in group) / (g - 1))
            r = rewards[i : i + g]
            r_std = math.sqrt(sum((x - sum(r) / g) ** 2 for x in r) / (g - 1))
            assert std == pytest.approx(r_std / (r_std + 1e-4), abs=1e-3)  # unit std, up to eps
            order = sorted(range(g), key=lambda j: rewards[i + j])
            assert [group[j] for j in order] == sorted(group)  # better reward, larger advantage


@pytest.mark.parametrize(
    ("rewards", "g", "scale"),
    [([1.0, 0.0], 1, "group"), ([1.0, 0.0, 1.0], 2, "group"), ([1.0, 0.0], 2, "softmax")],
)
def test_bad_input_raises(rewards: list[float], g: int, scale: str) -> None:
    with pytest.raises(ValueError):
        group_advantages(rewards, g, scale_rewards=scale)
