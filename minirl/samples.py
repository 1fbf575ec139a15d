"""Sample episodes to look at: `episodes.json`, the file the episode viewer (minirl.viewer) reads.

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
from pathlib import Path

from minirl.episode import Episode

SAMPLE_INSTANCES = 8  # instances kept per budget: enough to compare, small enough to read


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
    """The samples file as a dict; ValueError with the path if it is not one."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"{path}: not a readable episodes file ({err})") from err
    if not isinstance(data, dict) or "task" not in data or "episodes" not in data:
        raise ValueError(f"{path}: not an episodes file (no 'task' and 'episodes')")
    return data
