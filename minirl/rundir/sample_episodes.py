"""Sample episodes to look at: `episodes.json`, the file the episode viewer (minirl.rundir.viewer)
reads.

A training run keeps, at its before/after evaluation, the episodes of the first
`SAMPLE_INSTANCES` held-out instances at each evaluation budget, played by the base ("base") and
by the trained policy ("trained"). `evaluate.py` keeps the first episode of the same instances for
every checkpoint it compares. Every policy plays the same instances from the same sampling seed,
so the records line up instance by instance, which is what lets the viewer put them side by side.

An episode is kept as its replies and the oracle's marks of each turn (minirl.episode.Turn), not
as tokens: the tasks are deterministic given the seed and the replies, so the viewer replays the
replies through a fresh environment to get every turn's observation and picture. The file stays a
few kilobytes, the page needs no model, and a killed run still has its base episodes (they are
written as soon as the base is evaluated). Reloading the policy from a checkpoint instead would
need the model and would sample new episodes, not the ones the run's numbers came from.

    {"task": "gridnav", "budget_visible": true,
     "episodes": {"base": [{"seed": 1000000, "budget": 4, "optimal_length": 3, "success": true,
                            "turns": [{"reply": "up", "valid": true, "mistake": false, ...}]},
                           ...],
                  "trained": [...]},
     "stats": {"base": {"4": {"success": 0.2, "feedback_use": 0.07, "feedback_use_sd": 0.02},
                          ...}, "trained": ...},
     "open_loop": {"4": {"success": 0.079, "stderr": 0.009, "sequence": ["up", ...], ...}}}
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal

import tasks
from minirl.config import MAX_TURNS
from minirl.episode import Episode, Turn
from minirl.eval.openloop import Yardstick
from minirl.infra.errors import DataError
from minirl.infra.readback import check_json, read_json
from minirl.infra.validation import Range

SAMPLE_INSTANCES = 8  # instances kept per budget: enough to compare, small enough to read


@dataclass
class EpisodeRecord:
    """One kept episode, as the file holds it: what `load_samples` checks every record against.

    The page prints these values and the replay feeds them to the task, so each must have its
    type: a seed "1<script>" is not a seed (Env.reset refuses it too).
    """

    seed: Annotated[int, Range(ge=0)]
    budget: Annotated[int, Range(ge=1, le=MAX_TURNS)]
    optimal_length: Annotated[int, Range(ge=0)]
    success: bool
    turns: list[Turn]  # each turn's reply and marks, as minirl.episode.Turn
    task_text: Literal["compact", "natural"] = "compact"  # files older than it were compact


@dataclass
class BudgetStats:
    """One policy's whole evaluation at one budget, beside its kept episodes (the headline)."""

    success: Annotated[float, Range(ge=0, le=1)]
    feedback_use: float  # bits per turn, minus the shuffled null (minirl.eval.feedback)
    feedback_use_sd: float


@dataclass
class SamplesFile:
    """episodes.json: the task, whether the budget was shown, each policy's episodes, and the
    headline's numbers: each policy's stats by budget and the open-loop yardstick by budget."""

    task: str
    episodes: dict[str, list[EpisodeRecord]]
    budget_visible: bool = True
    stats: dict[str, dict[str, BudgetStats]] = field(default_factory=dict)
    open_loop: dict[str, Yardstick] = field(default_factory=dict)


def episode_record(episode: Episode) -> dict:
    """What the viewer needs of one episode: the instance, the budget, the outcome, the turns."""
    return {
        "seed": episode.seed,
        "budget": episode.budget,
        "optimal_length": episode.optimal_length,
        "success": episode.success,
        "task_text": episode.task_text,  # the replay parses the replies as the rollout did
        "turns": [dataclasses.asdict(turn) for turn in episode.turns],
    }


def add_samples(
    path: Path,
    policy: str,
    episodes_by_t: dict[int, list[Episode]],
    *,
    task: str,
    budget_visible: bool,
    per_instance: int = 1,
    instances: int = SAMPLE_INSTANCES,
    stats: dict[str, dict] | None = None,
    open_loop: dict[str, dict] | None = None,
) -> Path:
    """Add (or replace) `policy`'s sample in the file at `path`, creating it if needed.

    `episodes_by_t[t]` is instance-major with `per_instance` episodes each (as
    minirl.eval.sampler.sweep returns them); the first episode of each of the first `instances`
    instances is kept. The file is written to a temporary name and renamed, so a crash never
    leaves half a file. `stats` ({"T": {"success", "feedback_use", "feedback_use_sd"}}, over all
    of the evaluation's episodes, not only the kept ones) and `open_loop` (the yardstick by "T",
    minirl.eval.openloop) are kept beside the episodes for the viewer's headline.
    """
    path = Path(path)
    data = load_samples(path) if path.exists() else {}
    if data.get("task", task) != task:
        data = {}  # another task's samples (an overwritten run): start afresh
    data.update(task=task, budget_visible=budget_visible)
    data.setdefault("episodes", {})[policy] = [
        episode_record(e)
        for t in sorted(episodes_by_t)
        for e in episodes_by_t[t][::per_instance][:instances]
    ]
    if stats is not None:
        data.setdefault("stats", {})[policy] = stats
    if open_loop is not None:
        data["open_loop"] = open_loop
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)
    return path


def load_samples(path: str | Path) -> dict:
    """The samples file as plain data, every value checked (DataError names the file and field).

    Checked here for its types and ranges only; minirl.rundir.viewer.load_verified also replays
    every episode, so that the outcomes it shows are the ones the task gives.
    """
    path = Path(path)
    data = check_json(read_json(path), SamplesFile, f"{path}:")
    if data["task"] not in tasks.NAMES:
        raise DataError(f"{path}: task {data['task']!r} is not one of {', '.join(tasks.NAMES)}")
    for policy, records in data["episodes"].items():
        for i, record in enumerate(records):
            if len(record["turns"]) > record["budget"]:
                raise DataError(
                    f"{path}: episodes[{policy!r}][{i}] plays {len(record['turns'])} turns, "
                    f"more than its budget T={record['budget']}"
                )
    return data
