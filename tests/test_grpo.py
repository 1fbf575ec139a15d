"""GRPO math checked against brute force and hand-computed numbers."""

from __future__ import annotations

import math
import statistics

import pytest
import torch

from minirl import grpo
from minirl.episode import EpisodeSpec
from minirl.grpo import (
    LOSS_TYPES,
    group_advantages,
    policy_loss,
    step_advantages,
    token_advantages,
    trajectory_token_advantages,
    turn_advantages,
    turn_token_advantages,
)
from minirl.logprobs import to_batch
from minirl.rewards import outcome_rewards, progress_rewards
from minirl.rollout import rollout

EPS = 1e-4


# ----------------------------------------------------------------------------- advantages


def brute_force_advantages(rewards: list[float], g: int, scale: str) -> list[float]:
    batch_std = statistics.stdev(rewards)  # unbiased, like torch.std and TRL's nanstd
    out = []
    for start in range(0, len(rewards), g):
        group = rewards[start : start + g]
        mean, std = statistics.mean(group), statistics.stdev(group)
        for r in group:
            if scale == "group":
                out.append((r - mean) / (std + EPS))
            elif scale == "batch":
                out.append((r - mean) / (batch_std + EPS))
            else:
                out.append(r - mean)
    return out


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_group_advantages_match_brute_force(scale: str) -> None:
    gen = torch.Generator().manual_seed(0)
    rewards = torch.rand(24, generator=gen, dtype=torch.float64).round(decimals=2)
    rewards[:4] = 1.0  # one tied group
    adv, frac = group_advantages(rewards, 4, scale)
    expected = brute_force_advantages(rewards.tolist(), 4, scale)
    assert adv.tolist() == pytest.approx(expected, rel=1e-5, abs=1e-6)
    assert frac == pytest.approx(1 / 6)


def test_group_advantages_ties_and_values() -> None:
    # Group (1, 0): mean 0.5, unbiased std sqrt(0.5) = 0.70711 -> +-0.5 / 0.70721 = +-0.70701.
    adv, frac = group_advantages(torch.tensor([1.0, 1.0, 1.0, 0.0, 0.0, 0.0]), 2)
    assert adv.tolist() == pytest.approx([0.0, 0.0, 0.70701, -0.70701, 0.0, 0.0], abs=1e-5)
    assert frac == pytest.approx(2 / 3)


def test_group_advantages_errors() -> None:
    with pytest.raises(ValueError, match="divisible"):
        group_advantages(torch.zeros(5), 2)
    with pytest.raises(ValueError, match=">= 2"):
        group_advantages(torch.zeros(4), 1)
    with pytest.raises(ValueError, match="group"):
        group_advantages(torch.zeros(4), 2, "episode")


def test_turn_advantages_by_hand() -> None:
    turn_rewards = [[0.5, 0.5], [0.5, -0.5, 0.0], [], [1.0]]
    outcome = [1.0, 0.0, 1.0, 0.0]
    # Reward-to-go plus outcome: ep0 [1+1.0, 1+0.5] = [2.0, 1.5]; ep1 [0.0, -0.5, 0.0];
    # ep2 has no turns; ep3 [0+1.0] = [1.0].
    # Group 1 pools [2.0, 1.5, 0.0, -0.5, 0.0]: mean 0.6, deviations 1.4, 0.9, -0.6, -1.1, -0.6,
    # squares sum 4.70, unbiased std sqrt(4.70 / 4) = 1.083974.
    # Group 2 pools [1.0]: a single turn, deviation 0.
    dev = [[1.4, 0.9], [-0.6, -1.1, -0.6], [], [0.0]]
    for scale, std in [("group", math.sqrt(4.70 / 4)), ("none", None)]:
        out = turn_advantages(turn_rewards, outcome, 2, scale)
        want = [[d if std is None else d / (std + EPS) for d in ep] for ep in dev]
        assert len(out) == 4 and out[2] == []
        for got, exp in zip(out, want, strict=True):
            assert got == pytest.approx(exp, abs=1e-9)
    # Batch std over all six returns [2, 1.5, 0, -0.5, 0, 1]: mean 2/3, squared deviations sum
    # 1.7778 + 0.6944 + 0.4444 + 1.3611 + 0.4444 + 0.1111 = 4.8333, std sqrt(4.8333 / 5) = 0.98319.
    # Group means stay per group (0.6 and 1.0).
    out = turn_advantages(turn_rewards, outcome, 2, "batch")
    batch_std = math.sqrt((29 / 6) / 5)
    assert out[0] == pytest.approx([1.4 / (batch_std + EPS), 0.9 / (batch_std + EPS)])
    assert out[1][1] == pytest.approx(-1.1 / (batch_std + EPS))
    assert out[3] == [0.0]


def test_turn_advantages_errors() -> None:
    with pytest.raises(ValueError, match="divisible"):
        turn_advantages([[1.0]] * 3, [0.0] * 3, 2, "group")
    with pytest.raises(ValueError, match="outcome"):
        turn_advantages([[1.0]] * 2, [0.0] * 4, 2, "group")
    with pytest.raises(ValueError, match="batch"):
        turn_advantages([[1.0]] * 2, [0.0] * 2, 2, "turn")


def test_step_advantages_by_hand() -> None:
    # One group of three, outcome rewards only, gamma 0.5. Discounted returns: ep0 (8, 9; lost)
    # [0, 0]; ep1 (8, 4; won) [0.5, 1]; ep2 (5; won) [1]. Anchor states: the start holds every
    # turn 0 (returns 0, 0.5, 1: mean 0.5, unbiased std 0.5); after "8" holds ep0's and ep1's
    # turn 1 (0 and 1: mean 0.5, std sqrt(0.5)). ep2 alone has nothing after "5".
    actions = [["8", "9"], ["8", "4"], ["5"]]
    out = step_advantages(actions, None, [0.0, 1.0, 1.0], 3, gamma=0.5)
    half, root = 0.5 + EPS, math.sqrt(0.5) + EPS
    want = [[-0.5 / half, -0.5 / root], [0.0, 0.5 / root], [0.5 / half]]
    for got, exp in zip(out, want, strict=True):
        assert got == pytest.approx(exp, abs=1e-12)


def test_step_advantages_with_process_rewards_and_separate_groups() -> None:
    # Two groups of two. Group 1: the same first action, then 7 (process reward 0.5, won) against
    # an invalid reply (None, -0.25, lost); gamma 1 so returns are plain sums: ep0 [1.5, 1.5], ep1
    # [-0.25, -0.25]. Both turns 0 and both turns 1 share a state: deviations +-0.875 with std
    # 1.2374 (sqrt(2) * 0.875). Group 2 plays the very same actions, but another instance: its
    # states are its own, and its returns tie, so its advantages are 0.
    actions = [["8", "7"], ["8", None], ["8", "7"], ["8", None]]
    turns = [[0.0, 0.5], [0.0, -0.25], [0.0, 0.0], [0.0, 0.0]]
    out = step_advantages(actions, turns, [1.0, 0.0, 0.0, 0.0], 2, gamma=1.0)
    a = 0.875 / (math.sqrt(2) * 0.875 + EPS)
    assert out[0] == pytest.approx([a, a]) and out[1] == pytest.approx([-a, -a])
    assert out[2] == out[3] == [0.0, 0.0]
    # Divergent histories are different states, even at the same turn: no comparison at all.
    assert step_advantages([["1", "2"], ["3", "2"]], None, [1.0, 0.0], 2)[0][1] == 0.0
    with pytest.raises(ValueError, match="turn rewards"):
        step_advantages([["1"], ["2"]], [[0.0, 0.0], [0.0]], [0.0, 0.0], 2)
    with pytest.raises(ValueError, match="divisible"):
        step_advantages([["1"]] * 3, None, [0.0] * 3, 2)


def test_token_advantages_add_the_weighted_step_term() -> None:
    # Two episodes of one group, two turns each; turn_index puts turn k on tokens of that turn.
    turn_index = torch.tensor([[-1, 0, 0, -1, 1], [-1, 0, -1, 1, 1]])
    mask = (turn_index >= 0).long()
    actions, rewards = [["8", "9"], ["8", "4"]], [0.0, 1.0]
    plain, _ = token_advantages(rewards, mask, 2, turn_index=turn_index, actions=actions)
    # Weight 0 is the outcome advantage on every token, exactly as without the option.
    assert torch.equal(plain, token_advantages(rewards, mask, 2)[0])
    both, _ = token_advantages(
        rewards, mask, 2, turn_index=turn_index, actions=actions, step_advantage_w=0.5, gamma=0.9
    )
    steps = step_advantages(actions, None, rewards, 2, gamma=0.9)
    for b in range(2):
        for k in range(2):
            on = turn_index[b] == k
            assert torch.allclose(both[b][on], plain[b][on] + 0.5 * steps[b][k])
    assert (both[mask == 0] == 0).all()
    with pytest.raises(ValueError, match="actions"):
        token_advantages(rewards, mask, 2, turn_index=turn_index, step_advantage_w=1.0)


def test_token_broadcast_helpers() -> None:
    mask = torch.tensor([[0, 1, 1, 0, 1], [0, 0, 1, 1, 0]])
    got = trajectory_token_advantages(torch.tensor([2.0, -1.0]), mask)
    assert got.tolist() == [[0, 2, 2, 0, 2], [0, 0, -1, -1, 0]]

    turn_index = torch.tensor([[-1, 0, 0, -1, 1], [-1, -1, 0, 0, -1]])
    got = turn_token_advantages([[0.5, -0.25], [3.0]], turn_index)
    assert got.tolist() == [[0, 0.5, 0.5, 0, -0.25], [0, 0, 3.0, 3.0, 0]]
    assert turn_token_advantages([[], []], torch.full((2, 3), -1)).tolist() == [[0.0] * 3] * 2
    with pytest.raises(ValueError, match="turn"):
        turn_token_advantages([[0.5], [3.0]], turn_index)


# ----------------------------------------------------------------------------- logprobs


# ----------------------------------------------------------------------------- the loss

# Two groups of unequal lengths: episodes 0, 1 (group 1) and 2, 3 (group 2) with masked lengths
# 1, 3, 2, 4. Position 0 is the prompt; episode 3 has an observation at position 3 (masked).
MASK = torch.tensor(
    [
        [0, 0, 1, 0, 0, 0],
        [0, 1, 1, 1, 0, 0],
        [0, 1, 1, 0, 0, 0],
        [0, 1, 1, 0, 1, 1],
    ],
    dtype=torch.float32,
)
ADV = [1.0, -1.0, 2.0, -2.0]
RATIOS = [  # rho on each masked token, in order
    [1.5],
    [0.5, 1.0, 1.3],
    [1.1, 0.5],
    [0.9, 0.7, 1.0, 2.0],
]


def make_batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(3)
    old = -torch.rand(4, 6, generator=gen, dtype=torch.float64) * 3
    logps = old.clone()
    for b in range(4):
        positions = MASK[b].nonzero().flatten().tolist()
        for p, r in zip(positions, RATIOS[b], strict=True):
            logps[b, p] = old[b, p] + math.log(r)
    adv = trajectory_token_advantages(torch.tensor(ADV), MASK).double()
    return logps, old, adv


# Per-token loss -min(rho A, clip(rho, 0.8, 1.2) A):
#   ep0 (A=+1): rho 1.5 -> -min(1.5, 1.2) = -1.2 (clipped high)                     sum -1.2
#   ep1 (A=-1): 0.5 -> -min(-0.5, -0.8) = 0.8 (clipped low); 1.0 -> 1.0;
#               1.3 -> -min(-1.3, -1.2) = 1.3 (not clipped: A < 0)                  sum  3.1
#   ep2 (A=+2): 1.1 -> -2.2; 0.5 -> -min(1.0, 1.6) = -1.0 (not clipped: A > 0)      sum -3.2
#   ep3 (A=-2): 0.9 -> 1.8; 0.7 -> -min(-1.4, -1.6) = 1.6 (clipped low); 1.0 -> 2.0;
#               2.0 -> -min(-4.0, -2.4) = 4.0                                       sum  9.4
# Total 8.1 over 10 tokens.
#   grpo:    mean(-1.2/1, 3.1/3, -3.2/2, 9.4/4) = (-1.2 + 1.03333 - 1.6 + 2.35) / 4 = 7/48
#   dapo:    8.1 / 10 = 0.81 (bnpo: the same on one batch)
#   dr_grpo: 8.1 / (4 * 6) = 0.3375
EXPECTED = {"grpo": 7 / 48, "bnpo": 0.81, "dapo": 0.81, "dr_grpo": 0.3375}


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_policy_loss_by_hand(loss_type: str) -> None:
    logps, old, adv = make_batch()
    loss, stats = policy_loss(
        logps, old, adv, MASK, epsilon=0.2, loss_type=loss_type, max_completion_length=6
    )
    assert loss.item() == pytest.approx(EXPECTED[loss_type], abs=1e-9)
    # Clipped: ep0's 1.5 (high), ep1's 0.5 and ep3's 0.7 (low) -> 3 of 10 tokens.
    assert stats["clip_ratio"] == pytest.approx(0.3)
    assert stats["clip_ratio_high"] == pytest.approx(0.1)
    assert stats["clip_ratio_low"] == pytest.approx(0.2)
    # Ratios sum to 1.5 + 2.8 + 1.6 + 4.6 = 10.5 over 10 tokens.
    assert stats["ratio_mean"] == pytest.approx(1.05)
    assert stats["kl"] == 0.0


def test_dapo_uses_the_whole_batch_token_count() -> None:
    logps, old, adv = make_batch()
    loss, _ = policy_loss(logps[:2], old[:2], adv[:2], MASK[:2], num_items_in_batch=10)
    assert loss.item() == pytest.approx((-1.2 + 3.1) / 10)


# The same four episodes as two micro-batches, {0, 1} and {2, 3}, given the step's counts
# (10 tokens, 4 episodes). Per-episode sums -1.2, 3.1 | -3.2, 9.4 (see above):
#   grpo:    (-1.2/1 + 3.1/3) / 4 + (-3.2/2 + 9.4/4) / 4 = -0.041667 + 0.1875 = 7/48
#   dapo, bnpo: (-1.2 + 3.1) / 10 + (-3.2 + 9.4) / 10 = 0.19 + 0.62 = 0.81
#   dr_grpo: 1.9 / (4 * 6) + 6.2 / (4 * 6) = 0.3375
PARTS = {
    "grpo": ((-1.2 + 3.1 / 3) / 4, (-3.2 / 2 + 9.4 / 4) / 4),
    "bnpo": (0.19, 0.62),
    "dapo": (0.19, 0.62),
    "dr_grpo": (1.9 / 24, 6.2 / 24),
}


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_micro_batch_losses_with_the_step_counts_sum_to_the_step_loss(loss_type: str) -> None:
    logps, old, adv = make_batch()
    parts = []
    for rows in (slice(0, 2), slice(2, 4)):
        loss, stats = policy_loss(
            logps[rows],
            old[rows],
            adv[rows],
            MASK[rows],
            loss_type=loss_type,
            max_completion_length=6,
            num_items_in_batch=10,
            num_episodes_in_batch=4,
        )
        parts.append(loss.item())
        assert stats["tokens"] == float(MASK[rows].sum())
    assert parts == pytest.approx(PARTS[loss_type], abs=1e-9)
    assert sum(parts) == pytest.approx(EXPECTED[loss_type], abs=1e-9)
    # Without the step's counts each micro-batch normalises by its own (not the step's loss).
    alone = [
        policy_loss(
            logps[r], old[r], adv[r], MASK[r], loss_type=loss_type, max_completion_length=6
        )[0].item()
        for r in (slice(0, 2), slice(2, 4))
    ]
    assert sum(alone) != pytest.approx(EXPECTED[loss_type], abs=1e-3)


def per_token_grad(loss_type: str) -> tuple[torch.Tensor, torch.Tensor]:
    _, old, adv = make_batch()
    logps = old.clone().requires_grad_(True)  # rho = 1 everywhere: no clipping
    loss, _ = policy_loss(logps, old, adv, MASK, loss_type=loss_type, max_completion_length=6)
    loss.backward()
    assert logps.grad is not None
    return logps.grad, adv


def test_gradient_weights_show_grpo_length_bias() -> None:
    lengths = MASK.sum(-1, keepdim=True).double()  # 1, 3, 2, 4
    weights = {
        "grpo": MASK / (4 * lengths),  # each episode weighs 1/B, split over its tokens
        "bnpo": MASK / 10,
        "dapo": MASK / 10,  # every token of the batch weighs the same
        "dr_grpo": MASK / (4 * 6),  # a constant
    }
    for loss_type, w in weights.items():
        grad, adv = per_token_grad(loss_type)
        assert torch.allclose(grad, -adv * w), loss_type
    # grpo: a token of the 1-token episode weighs 3x a token of the 3-token episode.
    grad, _ = per_token_grad("grpo")
    assert (grad[0, 2] / -grad[1, 1]).item() == pytest.approx(3.0)
    grad, _ = per_token_grad("dapo")
    assert (grad[0, 2] / -grad[1, 1]).item() == pytest.approx(1.0)


def test_kl_term_by_hand() -> None:
    mask = torch.tensor([[0.0, 1.0, 1.0, 0.0]])
    logps = torch.tensor([[0.0, -1.0, -2.0, -3.0]], requires_grad=True)
    ref = torch.tensor([[0.0, -0.5, -2.5, 5.0]])  # ref - logp: 0.5, -0.5 (and 8 where masked)
    zero_adv = torch.zeros(1, 4)
    # k3: exp(0.5) - 0.5 - 1 = 0.148721; exp(-0.5) + 0.5 - 1 = 0.106531; mean 0.127626.
    kl = [math.exp(0.5) - 1.5, math.exp(-0.5) - 0.5]
    loss, stats = policy_loss(
        logps, logps.detach(), zero_adv, mask, beta=0.1, ref_logps=ref, loss_type="dapo"
    )
    assert stats["kl"] == pytest.approx(sum(kl) / 2)
    assert loss.item() == pytest.approx(0.1 * sum(kl) / 2)
    loss.backward()
    assert logps.grad is not None
    # d/dlogp k3 = 1 - exp(ref - logp); dapo weight 1/2, beta 0.1; masked positions get 0.
    want = [0.0, 0.1 * (1 - math.exp(0.5)) / 2, 0.1 * (1 - math.exp(-0.5)) / 2, 0.0]
    assert logps.grad[0].tolist() == pytest.approx(want)

    loss, stats = policy_loss(
        logps, logps.detach(), zero_adv, mask, beta=0.1, ref_logps=logps.detach()
    )
    assert loss.item() == 0.0 and stats["kl"] == 0.0


def one_token_grad(rho: float, adv: float, **kwargs: float) -> tuple[float, float]:
    old = torch.tensor([[0.0, -1.0]])
    logps = torch.tensor([[0.0, -1.0 + math.log(rho)]], requires_grad=True)
    mask = torch.tensor([[0.0, 1.0]])
    loss, _ = policy_loss(logps, old, torch.tensor([[0.0, adv]]), mask, **kwargs)
    loss.backward()
    assert logps.grad is not None
    return loss.item(), logps.grad[0, 1].item()


def test_clipping_stops_the_gradient() -> None:
    assert one_token_grad(1.5, 1.0)[1] == 0.0  # A > 0, rho > 1 + eps: clipped
    assert one_token_grad(0.5, -1.0)[1] == 0.0  # A < 0, rho < 1 - eps: clipped
    # On the other side the unclipped branch wins: d(-rho A)/dlogp = -rho A.
    assert one_token_grad(0.5, 1.0)[1] == pytest.approx(-0.5)
    assert one_token_grad(1.5, -1.0)[1] == pytest.approx(1.5)


def test_epsilon_high_is_asymmetric() -> None:
    # eps 0.2, eps_high 0.28: rho 1.25 is inside [0.8, 1.28] so -1.25 with gradient -1.25;
    # rho 1.3 is clipped to 1.28; the low side still clips at 0.8.
    assert one_token_grad(1.25, 1.0, epsilon_high=0.28) == pytest.approx((-1.25, -1.25))
    assert one_token_grad(1.3, 1.0, epsilon_high=0.28) == pytest.approx((-1.28, 0.0))
    assert one_token_grad(0.7, -1.0, epsilon_high=0.28) == pytest.approx((0.8, 0.0))
    # Without it, 1.25 is clipped at 1.2.
    assert one_token_grad(1.25, 1.0) == pytest.approx((-1.2, 0.0))


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_masked_positions_contribute_nothing(loss_type: str) -> None:
    logps, old, adv = make_batch()
    ref = old - 0.3
    kwargs = {"loss_type": loss_type, "max_completion_length": 6, "beta": 0.05, "ref_logps": ref}

    def run(lp: torch.Tensor, a: torch.Tensor) -> tuple[float, torch.Tensor]:
        lp = lp.clone().requires_grad_(True)
        loss, _ = policy_loss(lp, old, a, MASK, **kwargs)  # type: ignore[arg-type]
        loss.backward()
        assert lp.grad is not None
        return loss.item(), lp.grad

    base_loss, base_grad = run(logps, adv)
    off = MASK == 0
    garbage = logps.clone()
    garbage[off] = torch.linspace(-1e4, 1e4, int(off.sum()), dtype=garbage.dtype)
    noisy_adv = torch.where(off, torch.full_like(adv, 7.0), adv)
    loss, grad = run(garbage, noisy_adv)
    assert loss == base_loss
    assert torch.equal(grad, base_grad)
    assert torch.all(grad[off] == 0)


def test_policy_loss_errors() -> None:
    logps, old, adv = make_batch()
    with pytest.raises(ValueError, match="dapo"):
        policy_loss(logps, old, adv, MASK, loss_type="gspo")
    with pytest.raises(ValueError, match="max_completion_length"):
        policy_loss(logps, old, adv, MASK, loss_type="dr_grpo")
    with pytest.raises(ValueError, match="ref_logps"):
        policy_loss(logps, old, adv, MASK, beta=0.1)


# ----------------------------------------------------------------------------- on real episodes


def episodes_for(quick_policy, n_groups: int = 2, g: int = 4, budget: int = 4):
    model, tok = quick_policy
    torch.manual_seed(0)
    specs = [
        EpisodeSpec("gridnav", s, budget, i)
        for i, s in enumerate(range(n_groups))
        for _ in range(g)
    ]
    return rollout(model, tok, specs, max_new_tokens=3)


def test_outcome_advantage_is_broadcast_to_assistant_tokens_only(quick_policy) -> None:
    _, tok = quick_policy
    episodes = episodes_for(quick_policy)
    for i, e in enumerate(episodes):
        e.success = i % 4 == 0  # one success per group of four
    batch = to_batch(episodes, tok.pad_token_id, torch.device("cpu"))
    adv, zero_std = token_advantages(outcome_rewards(episodes, 0.0), batch.loss_mask, 4)
    expected, _ = grpo.group_advantages(torch.tensor([float(e.success) for e in episodes]), 4)
    assert zero_std == 0.0
    for i in range(len(episodes)):
        on = batch.loss_mask[i].bool()
        assert torch.allclose(adv[i][on], expected[i].expand(int(on.sum())))
        assert (adv[i][~on] == 0).all()
    assert expected[0] > 0 > expected[1]


def test_process_advantage_credits_each_turn(quick_policy) -> None:
    _, tok = quick_policy
    episodes = episodes_for(quick_policy)
    batch = to_batch(episodes, tok.pad_token_id, torch.device("cpu"))
    adv, _ = token_advantages(
        outcome_rewards(episodes, 0.0),
        batch.loss_mask,
        4,
        turn_rewards=[progress_rewards(e) for e in episodes],
        turn_index=batch.turn_index,
    )
    per_turn = grpo.turn_advantages(
        [progress_rewards(e) for e in episodes], [float(e.success) for e in episodes], 4
    )
    for i, e in enumerate(episodes):
        for k in range(e.turns_used):
            tokens = batch.turn_index[i] == k
            assert tokens.any()
            assert torch.allclose(adv[i][tokens], torch.tensor(per_turn[i][k]))
