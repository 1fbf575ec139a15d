"""The records that flow through minirl: what to play (`EpisodeSpec`), and what was played.

    EpisodeSpec --rollout--> Episode (its Turns, token ids, masks, log-probs)
                --rewards--> one reward per episode (or per turn)
                --grpo, batch--> advantages, loss, update
                --eval-->   Pass@(K,T) and the behaviour analyses

An `Episode` keeps the exact token stream the model saw and sampled, so training never
re-tokenizes text, and one `Turn` per reply with what the environment and its oracle made of it.
An `EpisodeSpec` names a task instance and a turn budget; with `replies` and `prompt_ids` it names
a point *inside* an episode (the evaluation's fixed decision states), and the rollout plays on
from there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import tasks


@dataclass
class EpisodeSpec:
    """What to play: one task instance at one turn budget. Episodes of a GRPO group share all.

    `replies` and `prompt_ids` start the episode from a saved state instead of the beginning: the
    environment replays the replies, and the conversation so far is exactly `prompt_ids` (ending
    with the assistant's header), so the next reply is sampled in the same context as before.
    """

    task: str
    seed: int
    budget: int
    group: int = 0
    replies: tuple[str, ...] = ()
    prompt_ids: tuple[int, ...] = ()


@dataclass
class Turn:
    """One assistant turn and what the environment made of it."""

    reply: str
    action: str | None
    valid: bool
    mistake: bool
    optimal: bool
    distance_before: float
    distance_after: float
    reward: float


@dataclass
class Episode:
    """A finished episode: the exact token stream, its masks and log-probs, and its outcome."""

    task: str
    seed: int
    group: int
    budget: int
    budget_visible: bool
    optimal_length: int
    input_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)  # 1 on sampled assistant tokens only
    logprobs: list[float] = field(default_factory=list)  # sampling log-prob; 0.0 where mask is 0
    turn_index: list[int] = field(default_factory=list)  # turn of each assistant token, else -1
    turns: list[Turn] = field(default_factory=list)
    success: bool = False
    truncated_replies: int = 0  # replies cut by max_new_tokens before their eos
    start_turn: int = 0  # turns played before this episode's spec started it (its `replies`)
    task_text: str = "compact"  # the task's text (tasks.TEXTS); replaying the replies needs it

    @property
    def turns_used(self) -> int:
        return len(self.turns)

    def add_context(self, ids: list[int]) -> None:
        """Append tokens the model reads but did not sample (prompt, observations): no loss."""
        self.input_ids += ids
        self.loss_mask += [0] * len(ids)
        self.turn_index += [-1] * len(ids)
        self.logprobs += [0.0] * len(ids)

    def add_reply(self, ids: list[int], turn: int, logprobs: list[float]) -> None:
        """Append a sampled reply of turn `turn` with its sampling log-probs: these carry loss."""
        if len(logprobs) != len(ids):
            raise ValueError(f"{len(ids)} reply tokens but {len(logprobs)} log-probs")
        self.input_ids += ids
        self.loss_mask += [1] * len(ids)
        self.turn_index += [turn] * len(ids)
        self.logprobs += logprobs


def turn_rates(episodes: list[Episode]) -> dict[str, float]:
    """Invalid, mistake and oracle-optimal actions as fractions of all turns played."""
    turns = [t for e in episodes for t in e.turns]
    n = max(1, len(turns))
    return {
        "invalid_rate": sum(not t.valid for t in turns) / n,
        "mistake_rate": sum(t.mistake for t in turns) / n,
        "optimal_rate": sum(t.optimal for t in turns) / n,
    }


def episode_stats(episodes: list[Episode]) -> dict[str, float]:
    """Success, turns used, budget, and the turn rates, averaged over episodes."""
    n = len(episodes)
    return {
        "success": sum(e.success for e in episodes) / n,
        "turns": sum(e.turns_used for e in episodes) / n,
        "budget": sum(e.budget for e in episodes) / n,
        **turn_rates(episodes),
    }


@dataclass
class Playing:
    """One episode in progress: its environment, and the record the rollout is writing."""

    env: tasks.Env
    episode: Episode
