"""What an evaluation produces, as types, and its file form `results.json`.

    EvalResults
      meta: EvalMeta                       task, seeds, n, K and T lists, mode, decision states ...
      checkpoints: {label: CheckpointResult}
        grid: [Cell]                       Pass@(K,T) per (K, T) (minirl.eval.passkt)
        successes: {T: [int]}              each instance's successes of n (the bootstrap's units)
        feedback_use: {T: FeedbackUse}     bits per turn the replies depend on what was observed
                                           (minirl.eval.feedback, from the same episodes)
        analysis: Analysis                 minirl.eval.analysis
          decision: DecisionQuality        optimal / valid rates on the fixed fresh states
          recovery: Recovery               success with and without an error (own episodes)
          from_errors: StateRecovery       from the fixed post-error states (minirl.eval.recovery)
          matched: DecisionQuality         on the fresh states matched to the post-error ones
          position: PositionScores         exact chances in the same-position pairs
                                           (minirl.eval.position)
          horizon: {"1-2": Rate, ...}      success by optimal solution length
          efficiency: {T: Efficiency}      turns used by successful episodes
          invalid_rate
      open_loop: {T: Yardstick}            the best feedback-blind success (minirl.eval.openloop)

Everything downstream (the tables, the plots, the study's claims) reads these types, never key
paths into nested dicts. `to_json` writes and `load_results` reads the same layout: keys in field
order, integer keys as strings, NaN as null (strict JSON has no NaN) and back.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from minirl.eval.feedback import FeedbackUse
from minirl.eval.openloop import Yardstick, from_record
from minirl.eval.passkt import Cell


@dataclass
class Rate:
    """A proportion and the number of cases it is computed from (rate is NaN when count is 0)."""

    rate: float
    count: int

    @classmethod
    def of(cls, outcomes: list[bool]) -> Rate:
        return cls(sum(outcomes) / len(outcomes) if outcomes else math.nan, len(outcomes))


@dataclass
class DecisionQuality:
    """Oracle-optimal and valid replies among the samples drawn in the fixed states."""

    optimal: Rate
    valid: Rate
    optimal_counts: list[int] = field(default_factory=list)  # per state, of meta.decision_samples


@dataclass
class StateRecovery:
    """From the fixed post-error states: the next action's quality and success in the turns left.

    Per-state counts are of meta.decision_samples continuations; `by_kind` splits success by the
    kind of the error that led to the state (minirl.eval.recovery.KINDS).
    """

    optimal: Rate
    success: Rate
    by_kind: dict[str, Rate] = field(default_factory=dict)
    optimal_counts: list[int] = field(default_factory=list)
    success_counts: list[int] = field(default_factory=list)


@dataclass
class PositionScores:
    """Exact chances in the same-position pairs (EvalMeta.position_pairs; minirl.eval.position),
    one entry per pair, in the pairs' order: before the failed first error and just after it."""

    optimal_pre: list[float]  # P(an optimal action | the position before the error)
    optimal_post: list[float]  # P(an optimal action | the same position after it)
    repeat_pre: list[float]  # P(the action that then failed | before); NaN: it named no action
    repeat_post: list[float]  # P(that action again | after)


@dataclass
class Recovery:
    """Success of episodes without an error, with at least one, and by the first error's turn."""

    no_error: Rate
    after_error: Rate
    by_first_error_turn: dict[int, Rate] = field(default_factory=dict)


@dataclass
class Efficiency:
    """Turns used by the successful episodes, and their excess over the optimal length."""

    mean_turns: float
    mean_excess: float
    count: int


@dataclass
class Analysis:
    """The behaviour analyses of one checkpoint (at the largest T, except efficiency)."""

    decision: DecisionQuality
    recovery: Recovery
    horizon: dict[str, Rate]
    efficiency: dict[int, Efficiency]
    invalid_rate: float
    from_errors: StateRecovery | None = None  # None in files written before it existed
    matched: DecisionQuality | None = None  # on meta.matched_states (third edition on)
    position: PositionScores | None = None  # on meta.position_pairs (None in older files)


@dataclass
class CheckpointResult:
    """One evaluated checkpoint: where it came from, its grid and its analyses."""

    path: str | None
    grid: list[Cell]
    analysis: Analysis
    seconds: float
    successes: dict[int, list[int]] = field(default_factory=dict)  # T -> per instance, of n
    feedback_use: dict[int, FeedbackUse] = field(default_factory=dict)  # T -> its measure

    def cell(self, k: int, t: int) -> Cell:
        return next(c for c in self.grid if c.k == k and c.t == t)


@dataclass
class EvalMeta:
    """How the evaluation was run: enough to reproduce it and to read it correctly."""

    task: str
    model: str
    quant: str
    seeds: list[int]
    n: int
    ks: list[int]
    ts: list[int]
    seed: int
    budget_visible: bool
    mode: str
    temperature: float
    max_new_tokens: int
    analysis_budget: int
    minirl_version: str
    device: str
    # Fixed states: {seed, turn, replies, distance, optimal}; post-error ones add kind,
    # turns_left, after (actions since the first error) and matches (into matched_states).
    decision_states: list[dict] = field(default_factory=list)  # fresh, drawn at random
    post_error_states: list[dict] = field(default_factory=list)
    matched_states: list[dict] = field(default_factory=list)  # fresh, matched to post-error
    # Per instance (in `seeds`' order): base's share of non-optimal actions over every turn of
    # the episodes the fixed states come from (30 to 60 turns an instance); the study splits the
    # instances into an easier and a harder half by it. Empty in files older than it.
    base_error_rate: list[float | None] = field(default_factory=list)
    decision_samples: int = 0  # samples per fixed state and checkpoint
    # The same-position pairs (minirl.eval.position) from the same base episodes: {seed, replies
    # (the post-error state's; the pre state's are these but the last), error, optimal}.
    position_pairs: list[dict] = field(default_factory=list)
    task_text: str = "compact"  # the tasks' text (tasks.TEXTS); files older than it were compact


@dataclass
class EvalResults:
    """Every checkpoint's results on the same instances, states and sampling seed."""

    meta: EvalMeta
    checkpoints: dict[str, CheckpointResult] = field(default_factory=dict)
    open_loop: dict[int, Yardstick] = field(default_factory=dict)  # T -> the yardstick

    def to_json(self) -> dict:
        return _jsonable(dataclasses.asdict(self))  # type: ignore[return-value]

    @classmethod
    def from_json(cls, data: dict) -> EvalResults:
        return cls(
            meta=EvalMeta(**data["meta"]),
            checkpoints={name: _checkpoint(entry) for name, entry in data["checkpoints"].items()},
            open_loop=_open_loop(data.get("open_loop", {})),
        )


def save_results(results: EvalResults, path: Path) -> Path:
    """Write results.json atomically: a crash mid-write must not leave a truncated file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(results.to_json(), indent=1))
    tmp.replace(path)
    return path


def load_results(path: str | Path) -> EvalResults:
    """Read a results.json back into types (missing rates and means become NaN)."""
    return EvalResults.from_json(json.loads(Path(path).read_text()))


# ---- conversion --------------------------------------------------------------------------------


def _jsonable(value: object) -> object:
    """Int keys to strings and NaN to None, recursively (dataclasses are already dicts here)."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def _number(value: float | None) -> float:
    return math.nan if value is None else float(value)


def _rate(data: dict) -> Rate:
    return Rate(_number(data["rate"]), int(data["count"]))


def _checkpoint(data: dict) -> CheckpointResult:
    a = data["analysis"]
    recovery = a["recovery"]
    decision = a["decision"]
    analysis = Analysis(
        decision=_decision(decision),
        recovery=Recovery(
            no_error=_rate(recovery["no_error"]),
            after_error=_rate(recovery["after_error"]),
            by_first_error_turn={
                int(j): _rate(r) for j, r in recovery["by_first_error_turn"].items()
            },
        ),
        horizon={bucket: _rate(r) for bucket, r in a["horizon"].items()},
        efficiency={
            int(t): Efficiency(_number(e["mean_turns"]), _number(e["mean_excess"]), e["count"])
            for t, e in a["efficiency"].items()
        },
        invalid_rate=_number(a["invalid_rate"]),
        from_errors=_state_recovery(a["from_errors"]) if a.get("from_errors") else None,
        matched=_decision(a["matched"]) if a.get("matched") else None,
        position=_position(a["position"]) if a.get("position") else None,
    )
    return CheckpointResult(
        path=data["path"],
        grid=[
            Cell(**{k: _number(v) if k in _CELL_FLOATS else v for k, v in c.items()})
            for c in data["grid"]
        ],
        analysis=analysis,
        seconds=data["seconds"],
        successes={int(t): list(v) for t, v in data.get("successes", {}).items()},
        feedback_use=_feedback(data.get("feedback_use", {})),
    )


def _decision(data: dict) -> DecisionQuality:
    return DecisionQuality(
        _rate(data["optimal"]), _rate(data["valid"]), list(data.get("optimal_counts", []))
    )


def _position(data: dict) -> PositionScores:
    """Four equally long lists of chances (null: NaN), each value checked."""
    lists = {}
    for name in ("optimal_pre", "optimal_post", "repeat_pre", "repeat_post"):
        values = data.get(name)
        if not isinstance(values, list):
            raise ValueError(f"results.json: position.{name} is not a list")
        lists[name] = [_chance(v, f"position.{name}") for v in values]
    if len({len(v) for v in lists.values()}) > 1:
        raise ValueError("results.json: the position lists differ in length")
    return PositionScores(**lists)


def _chance(value: object, where: str) -> float:
    if value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise ValueError(f"results.json: {where} holds {value!r}, not a chance in [0, 1]")
    return float(value)


def _state_recovery(data: dict) -> StateRecovery:
    return StateRecovery(
        optimal=_rate(data["optimal"]),
        success=_rate(data["success"]),
        by_kind={kind: _rate(r) for kind, r in data["by_kind"].items()},
        optimal_counts=list(data["optimal_counts"]),
        success_counts=list(data["success_counts"]),
    )


_CELL_FLOATS = {"mean", "stderr", "ci_low", "ci_high"}


def _budget(key: object, where: str) -> int:
    if not isinstance(key, str) or not key.isdigit():
        raise ValueError(f"results.json: {where} has a key {key!r} that is not a turn budget")
    return int(key)


def _feedback(data: object) -> dict[int, FeedbackUse]:
    """{"T": FeedbackUse fields} -> {T: FeedbackUse}, every key and field checked (null: NaN)."""
    if not isinstance(data, dict):
        raise ValueError("results.json: feedback_use is not a mapping of turn budgets")
    fields = [f.name for f in dataclasses.fields(FeedbackUse)]
    out = {}
    for key, record in data.items():
        ok = isinstance(record, dict) and set(record) == set(fields)
        ok = ok and all(type(record[k]) is int for k in ("turns", "groups"))
        ok = ok and all(
            record[k] is None
            or (isinstance(record[k], int | float) and type(record[k]) is not bool)
            for k in ("bits", "null_sd", "plug_in")
        )
        if not ok:
            raise ValueError(f"results.json: feedback_use[{key!r}] is not a feedback-use record")
        numbers = {k: _number(record[k]) for k in ("bits", "null_sd", "plug_in")}
        out[_budget(key, "feedback_use")] = FeedbackUse(
            **numbers, turns=record["turns"], groups=record["groups"]
        )
    return out


def _open_loop(data: object) -> dict[int, Yardstick]:
    """{"T": Yardstick fields} -> {T: Yardstick}, each record type-checked (older files: {})."""
    if not isinstance(data, dict):
        raise ValueError("results.json: open_loop is not a mapping of turn budgets")
    out = {}
    for key, record in data.items():
        t = _budget(key, "open_loop")
        found = from_record(record)
        if found is None or found.budget != t:
            raise ValueError(f"results.json: open_loop[{key!r}] is not a yardstick record")
        out[t] = found
    return out
