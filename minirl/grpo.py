"""GRPO for multi-turn episodes: group advantages and the clipped policy loss, as TRL defines them.

"GRPO" has become a bundle of choices. minirl keeps a small, explicit subset of them:

1. Trajectory-level, group-normalised advantages. The G episodes of one task instance form a group
   and every assistant token of episode i gets ``A_i = (R_i - mean_group(R)) / (std + eps)``
   (``scale_rewards``: the group std, the batch std, or none). There is no value network: the group
   mean is the baseline. Groups whose rewards all tie get A = 0 and teach nothing; we log their
   fraction. An optional process-reward arm (``turn_advantages``) credits each turn with its
   reward-to-go instead. An optional step-level term (``step_advantages``, GiGPO's
   group-in-group) adds to each turn the comparison with the other turns of its group that were
   taken in the same state.
2. A token-level clipped surrogate against the logprobs stored at sampling time:
   ``rho_t = exp(logp_t - logp_old_t)`` and per-token objective
   ``min(rho_t A_t, clip(rho_t, 1 - eps, 1 + eps_high) A_t)``.
   With ``num_iterations = 1`` rho is 1 up to sampling-vs-training numerics, and this is plain
   REINFORCE with a group baseline; the clip bites on later PPO epochs over the same rollouts.
3. An optional k3 KL penalty ``beta * (exp(ref - logp) - (ref - logp) - 1)`` toward the reference,
   which in minirl is the same model with the LoRA adapter disabled (no second copy in memory).
   TRL's default is ``beta = 0``, and so is ours.
4. TRL's ``loss_type`` normalisations, copied exactly (trl 1.16.0, ``GRPOTrainer._compute_loss``):
   ``grpo`` averages each episode's tokens, then averages episodes; ``bnpo`` and ``dapo`` divide the
   batch's summed token loss by its number of tokens; ``dr_grpo`` divides by the constant
   ``B * max_completion_length``.
5. Gradient accumulation (minirl.update). Every normalisation is a sum over tokens with weights
   that depend on the whole step, so a step split into micro-batches gets the one-pass loss and
   gradient when each micro-batch is given the step's counts: ``num_items_in_batch`` (the step's
   loss tokens: dapo, bnpo) and ``num_episodes_in_batch`` (the step's episodes: grpo, dr_grpo);
   the micro-batch losses then add up to the step's. (TRL's bnpo divides each micro-batch by its
   own token count instead; at one micro-batch per step the two agree.)

Why the normalisation matters here. BudgetMix mixes budgets, so one batch holds episodes whose
turn counts (and token counts) differ 4..12x. Writing the loss as ``sum_i sum_t w_it * l_it``:

- ``grpo``: ``w_it = 1 / (B * |o_i|)``. Each episode weighs the same, so a token of a short episode
  weighs more than a token of a long one: short successes are pushed harder, long failures are
  punished more softly (the length bias of Dr. GRPO and verl RFC #7244).
- ``dapo``: ``w_it = 1 / sum_j |o_j|``. Every token of the batch weighs the same; long episodes
  contribute in proportion to their length, with no per-episode reweighting.
- ``dr_grpo``: ``w_it = 1 / (B * max_completion_length)``. Independent of the episode's length and
  of the batch's make-up, but in multi-turn play ``max_completion_length`` (budget_max turns times
  the per-turn cap) is loose, so short-budget batches get small gradients.

minirl's default is ``dapo``: it is token-level, so BudgetMix's mix of lengths does not tilt
per-token credit toward short episodes, it needs no loose length constant, and it is TRL's own
default (``GRPOConfig.loss_type = "dapo"`` in the installed trl 1.16.0), so runs stay comparable.
The price is that its scale follows the batch's total token count (``num_items_in_batch`` when
the step is split into micro-batches, so every one shares that denominator).

Tensor conventions: a batch of B whole conversations, right-padded to length L. ``logps[b, t]``
is ``log pi(token_t | tokens_<t)`` (position 0 has no context and is 0); ``mask[b, t]`` is 1 on
sampled assistant tokens only, so prompts, environment observations and padding carry no loss.
"""

from __future__ import annotations

import statistics

import torch
from torch import Tensor

SCALE_REWARDS: tuple[str, ...] = ("group", "batch", "none")
LOSS_TYPES: tuple[str, ...] = ("grpo", "bnpo", "dapo", "dr_grpo")


def _check_scale_rewards(scale_rewards: str) -> None:
    if scale_rewards not in SCALE_REWARDS:
        raise ValueError(f"unknown scale_rewards {scale_rewards!r}; choose one of {SCALE_REWARDS}")


def _unbiased_std(x: Tensor) -> Tensor:
    # TRL uses Bessel's correction (n - 1); one sample has no spread, so call it 0 rather than NaN.
    return x.std() if x.numel() > 1 else torch.zeros((), dtype=x.dtype, device=x.device)


def group_advantages(
    rewards: Tensor, num_generations: int, scale_rewards: str = "group", eps: float = 1e-4
) -> tuple[Tensor, float]:
    """Group-normalised trajectory advantages, exactly as TRL's GRPOTrainer computes them.

    ``rewards`` is [N], ordered so each run of ``num_generations`` consecutive entries is one group.
    Returns the advantages [N] and the fraction of groups whose rewards all tie (their advantage
    is 0). The tie fraction always uses the group std, whatever ``scale_rewards`` is.
    """
    _check_scale_rewards(scale_rewards)
    if num_generations < 2:
        raise ValueError(f"num_generations must be >= 2 to form a baseline, got {num_generations}")
    if rewards.ndim != 1 or rewards.numel() % num_generations != 0:
        raise ValueError(
            f"rewards must be 1-D with a length divisible by num_generations={num_generations}, "
            f"got shape {tuple(rewards.shape)}"
        )
    rewards = rewards.float()
    grouped = rewards.view(-1, num_generations)
    mean = grouped.mean(dim=1).repeat_interleave(num_generations)
    group_std = grouped.std(dim=1)
    if scale_rewards == "batch":
        std = _unbiased_std(rewards).expand_as(rewards)
    else:  # "none" keeps the group std only to spot ties, as TRL does
        std = group_std.repeat_interleave(num_generations)
    advantages = rewards - mean
    if scale_rewards != "none":
        advantages = advantages / (std + eps)
    frac_zero_std = torch.isclose(group_std, torch.zeros_like(group_std)).float().mean().item()
    return advantages, frac_zero_std


def turn_advantages(
    turn_rewards: list[list[float]],
    outcome: list[float],
    num_generations: int,
    scale_rewards: str = "group",
    eps: float = 1e-4,
) -> list[list[float]]:
    """Per-turn advantages for the process-supervision arm (``reward_mode=process``).

    Episode i has outcome reward ``R_i`` and per-turn process rewards ``r_i1 .. r_in_i`` (each
    turn's progress toward the goal by the oracle's distance). Each turn is credited with what
    follows it, its undiscounted reward-to-go plus the outcome:

        G_it = R_i + sum_{t' >= t} r_it'

    The baseline pools every turn of every episode in the group:
    ``A_it = (G_it - mean_g(G)) / (std + eps)``, with mean and (unbiased) std over the group's turns
    (``group``), the same mean but the std over all turns of the batch (``batch``), or centring only
    (``none``). Episodes with no turns are allowed and get an empty list.

    What it gives up against the outcome advantage. The outcome arm gives every token of an
    episode one sign and follows the gradient of success alone; here the objective is success plus
    the oracle's progress, so the policy learns whatever that progress measure rewards. The pooled
    baseline also ignores the turn's position: while progress is mostly positive, early turns hold
    more reward-to-go than late ones and so get larger advantages for the same action, and long
    episodes put more turns into the group's mean and std. In exchange the credit is finer: a
    failed episode that made progress still credits its good turns, and a late mistake in a
    success is not rewarded as much as the moves that came before it.
    """
    _check_scale_rewards(scale_rewards)
    if num_generations < 2:
        raise ValueError(f"num_generations must be >= 2 to form a baseline, got {num_generations}")
    if len(turn_rewards) != len(outcome):
        raise ValueError(
            f"turn_rewards has {len(turn_rewards)} episodes but outcome has {len(outcome)}"
        )
    if len(outcome) % num_generations != 0:
        raise ValueError(
            f"{len(outcome)} episodes is not divisible by num_generations={num_generations}"
        )
    returns: list[list[float]] = []
    for rewards, final in zip(turn_rewards, outcome, strict=True):
        to_go, acc = [], float(final)
        for r in reversed(rewards):
            acc += float(r)
            to_go.append(acc)
        returns.append(to_go[::-1])

    # Plain Python floats: a few hundred returns, read back as numbers (no tensor, no device).
    batch_std = _stdev([g for ep in returns for g in ep])
    advantages: list[list[float]] = []
    for start in range(0, len(returns), num_generations):
        group = returns[start : start + num_generations]
        flat = [g for ep in group for g in ep]
        if not flat:
            advantages.extend([] for _ in group)
            continue
        mean = statistics.fmean(flat)
        std = batch_std if scale_rewards == "batch" else _stdev(flat)
        scale = 1.0 if scale_rewards == "none" else 1.0 / (std + eps)
        advantages.extend([(g - mean) * scale for g in ep] for ep in group)
    return advantages


def step_advantages(
    actions: list[list[str | None]],
    turn_rewards: list[list[float]] | None,
    outcome: list[float],
    num_generations: int,
    gamma: float = 0.95,
    eps: float = 1e-4,
) -> list[list[float]]:
    """Step-level advantages (GiGPO, verl-agent): compare the turns taken in one state.

    The episode advantage tells a turn how its whole episode did against the group; it cannot say
    which of the episode's replies made the difference. But the G episodes of a group play the
    same instance, and a deterministic task brings two episodes to the same state whenever they
    have taken the same actions so far: at the start, and for as long as their actions agree.
    Those turns form an *anchor group* (the state's key: the group and the actions before the
    turn, ``None`` for an invalid reply). Within it each turn's discounted return

        G_it = sum_{t' >= t} gamma^(t' - t) r_it'  +  gamma^(n_i - 1 - t) R_i

    (r: the turn's process reward, 0 without one; R_i: the outcome reward, received at the last
    turn) differs only by what was done from that state on, so

        A^S_it = (G_it - mean_anchor(G)) / (std_anchor(G) + eps)

    credits the reply itself: after "lower than 8", the episodes that answered 9 against those
    that answered 4. A turn alone in its state (or in one whose returns tie) gets 0. gamma < 1
    prefers the shorter way to the same outcome. The trainer adds ``step_advantage_w * A^S`` to
    the episode (or process) advantage. Returns one list per episode, one value per turn.
    """
    if len(actions) != len(outcome):
        raise ValueError(f"actions has {len(actions)} episodes but outcome has {len(outcome)}")
    if len(outcome) % num_generations != 0:
        raise ValueError(
            f"{len(outcome)} episodes is not divisible by num_generations={num_generations}"
        )
    rewards = turn_rewards if turn_rewards is not None else [[0.0] * len(a) for a in actions]
    returns: list[list[float]] = []
    for acts, turns, final in zip(actions, rewards, outcome, strict=True):
        if len(turns) != len(acts):
            raise ValueError(f"an episode has {len(acts)} actions but {len(turns)} turn rewards")
        acc, to_go = float(final), []
        for r in reversed(turns):
            acc = float(r) + acc  # R_i arrives with the last turn, undiscounted there
            to_go.append(acc)
            acc *= gamma
        returns.append(to_go[::-1])

    anchors: dict[tuple, list[tuple[int, int]]] = {}
    for i, acts in enumerate(actions):
        for t in range(len(acts)):
            anchors.setdefault((i // num_generations, tuple(acts[:t])), []).append((i, t))
    advantages = [[0.0] * len(acts) for acts in actions]
    for members in anchors.values():
        values = [returns[i][t] for i, t in members]
        mean, std = statistics.fmean(values), _stdev(values)
        for (i, t), g in zip(members, values, strict=True):
            advantages[i][t] = (g - mean) / (std + eps) if std > 0 else 0.0
    return advantages


def _stdev(values: list[float]) -> float:
    # Bessel's correction, as _unbiased_std; one value has no spread.
    return statistics.stdev(values) if len(values) > 1 else 0.0


def trajectory_token_advantages(advantages: Tensor, mask: Tensor) -> Tensor:
    """Broadcast per-episode advantages [B] to every assistant token: [B, L], 0 off the mask."""
    return advantages.float().unsqueeze(1) * mask.float()


def turn_token_advantages(advantages: list[list[float]], turn_index: Tensor) -> Tensor:
    """Give each assistant token its turn's advantage.

    ``turn_index[b, t]`` is the turn number (0-based) of assistant token t of episode b, and -1
    on every other position; those positions get 0.
    """
    if len(advantages) != turn_index.shape[0]:
        raise ValueError(
            f"{len(advantages)} episodes of advantages for a batch of {turn_index.shape[0]}"
        )
    num_turns = torch.tensor([len(a) for a in advantages], device=turn_index.device)
    if bool((turn_index >= num_turns.unsqueeze(1)).any()):
        raise ValueError("turn_index names a turn that has no advantage")
    width = max([1, *(len(a) for a in advantages)])
    table = torch.zeros(len(advantages), width, device=turn_index.device)
    for b, adv in enumerate(advantages):
        table[b, : len(adv)] = torch.tensor(adv, dtype=table.dtype, device=table.device)
    gathered = table.gather(1, turn_index.clamp(min=0).long())
    return torch.where(turn_index >= 0, gathered, torch.zeros_like(gathered))


def token_advantages(
    rewards: list[float],
    loss_mask: Tensor,
    num_generations: int,
    scale_rewards: str = "group",
    *,
    turn_rewards: list[list[float]] | None = None,
    turn_index: Tensor | None = None,
    actions: list[list[str | None]] | None = None,
    step_advantage_w: float = 0.0,
    gamma: float = 0.95,
) -> tuple[Tensor, float]:
    """Advantages on every token [B, L] (0 off the mask), and the fraction of tied groups.

    Outcome mode (``turn_rewards`` is None): each episode's group-normalised advantage on all of
    its assistant tokens. Process mode: each turn's ``turn_advantages`` on that turn's tokens,
    located by ``turn_index``. With ``step_advantage_w`` > 0, each turn's tokens also get
    ``step_advantage_w * step_advantages`` (which needs every episode's ``actions``). Everything
    is created on ``loss_mask``'s device.
    """
    device = loss_mask.device
    reward_tensor = torch.tensor(rewards, dtype=torch.float32, device=device)
    adv, zero_std = group_advantages(reward_tensor, num_generations, scale_rewards)
    if turn_rewards is None and step_advantage_w == 0:
        return trajectory_token_advantages(adv, loss_mask), zero_std
    if turn_index is None:
        raise ValueError("per-turn advantages need turn_index to place each turn's credit")
    if step_advantage_w and actions is None:
        raise ValueError("step advantages need each episode's actions to find its states")
    if turn_rewards is None:  # the episode's advantage on each of its turns
        per_turn = [[a] * len(acts) for a, acts in zip(adv.tolist(), actions or [], strict=True)]
    else:
        per_turn = turn_advantages(turn_rewards, rewards, num_generations, scale_rewards)
    if step_advantage_w:
        steps = step_advantages(actions or [], turn_rewards, rewards, num_generations, gamma)
        per_turn = [
            [a + step_advantage_w * s for a, s in zip(ep, st, strict=True)]
            for ep, st in zip(per_turn, steps, strict=True)
        ]
    return turn_token_advantages(per_turn, turn_index), zero_std


def policy_loss(
    logps: Tensor,
    old_logps: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    epsilon: float = 0.2,
    epsilon_high: float | None = None,
    beta: float = 0.0,
    ref_logps: Tensor | None = None,
    loss_type: str = "dapo",
    max_completion_length: int | None = None,
    num_items_in_batch: float | None = None,
    num_episodes_in_batch: int | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """The clipped GRPO surrogate with TRL's normalisations. All tensors are [B, L].

    ``advantages`` is token-level (see ``trajectory_token_advantages``). When these B rows are
    one micro-batch of a larger step, pass the step's counts: ``num_items_in_batch``, its masked
    tokens (the denominator of ``dapo`` and ``bnpo``), and ``num_episodes_in_batch``, its episodes
    (the ``grpo`` mean's and ``dr_grpo``'s B); both default to this batch's own. The losses of a
    step's micro-batches then sum to the loss of one pass over the step.
    Returns the loss and stats over these rows: ``clip_ratio`` (fraction of masked tokens where
    the clip is active, with ``clip_ratio_low``/``clip_ratio_high``), ``kl`` (masked mean, 0 when
    ``beta == 0``), ``ratio_mean`` (masked mean of rho), and ``tokens`` (the masked-token count,
    the weight that turns micro-batch means into step means).
    """
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"unknown loss_type {loss_type!r}; choose one of {LOSS_TYPES}")
    if loss_type == "dr_grpo" and max_completion_length is None:
        raise ValueError(
            "loss_type='dr_grpo' needs max_completion_length (its constant denominator)"
        )
    if beta > 0 and ref_logps is None:
        raise ValueError("beta > 0 needs ref_logps (logprobs of the adapter-disabled reference)")
    eps_low = epsilon
    eps_high = epsilon if epsilon_high is None else epsilon_high
    if advantages.dim() == 1:  # per-episode advantages, as TRL also accepts
        advantages = advantages.unsqueeze(1)
    keep = mask.bool()
    mask = mask.float()

    # torch.where, not a multiply: a masked position's garbage logp could give exp() = inf, and
    # inf * 0 is NaN in both the loss and its gradient.
    log_ratio = torch.where(keep, logps - old_logps, torch.zeros_like(logps))
    ratio = torch.exp(log_ratio)
    clipped = torch.clamp(ratio, 1 - eps_low, 1 + eps_high)
    per_token_loss = -torch.min(ratio * advantages, clipped * advantages)

    kl = torch.zeros_like(logps)
    if beta > 0:
        assert ref_logps is not None
        delta = torch.where(keep, ref_logps - logps, torch.zeros_like(logps))
        kl = torch.exp(delta) - delta - 1
        per_token_loss = per_token_loss + beta * kl

    per_token_loss = torch.where(keep, per_token_loss, torch.zeros_like(per_token_loss))
    summed = per_token_loss.sum()
    # Python numbers, not tensors: a count divides a device tensor wherever it came from.
    tokens = float(mask.sum()) if num_items_in_batch is None else float(num_items_in_batch)
    episodes = logps.shape[0] if num_episodes_in_batch is None else num_episodes_in_batch
    if loss_type == "grpo":
        loss = (per_token_loss.sum(-1) / mask.sum(-1).clamp(min=1.0)).sum() / episodes
    elif loss_type in ("bnpo", "dapo"):
        loss = summed / max(tokens, 1.0)
    else:
        assert max_completion_length is not None
        loss = summed / (episodes * max_completion_length)

    with torch.no_grad():
        n = mask.sum().clamp(min=1.0)
        low = (ratio < 1 - eps_low) & (advantages < 0) & keep
        high = (ratio > 1 + eps_high) & (advantages > 0) & keep
        stats = {
            "clip_ratio": ((low | high).float().sum() / n).item(),
            "clip_ratio_low": (low.float().sum() / n).item(),
            "clip_ratio_high": (high.float().sum() / n).item(),
            "kl": ((kl * mask).sum() / n).item(),
            "ratio_mean": ((ratio * mask).sum() / n).item(),
            "tokens": float(mask.sum()),
        }
    return loss, stats
