"""The study: the paper's questions, asked of arms trained and evaluated on the same toy tasks.

For every task it trains (where a finished run is not already there) and then evaluates:
    (a) base        the untrained base model
    (b) fixed-T<g>  fixed-budget GRPO at a generous T = g
    (c) fixed-T<t>  fixed-budget GRPO at a tight T = t
    (d) budgetmix   BudgetMix GRPO, T drawn per group from [budget_min, budget_max]
    (e) process     (optional) BudgetMix with the per-turn process reward
one run per arm and training seed. All arms of a task are evaluated in one `compare` call, so they
play identical held-out instances from the same sampling seed, and the fixed states (fresh,
post-error and matched fresh) come from the base policy. With `--control`, a second base (by
default `tiny`, uniform-noise demonstrations) is evaluated alone on the same instances, so the
report can set the main base's recovery deficit beside one that has none. With `--jobs J` the
work goes J jobs at a time, each in its own process with cores / J threads (torch's CPU kernels
gain little from a second thread at tiny's size, while two processes use both cores fully): each
task's base is built first, once, then its runs; its evaluation starts as soon as its own runs
are done, beside the other tasks' training; the control bases fill in at the end (`run_jobs`).
The record of what ran is `StudyRecord` (study.json); minirl.study.claims
and minirl.study.report turn the results into report.md, where no conclusion is written by hand.

A study is resumable: run the same command again and it reuses what is done, but only what was
done with the same settings. A training run is reused when its summary.json records the arm's
whole config (every flag but those that cannot change its results, minirl.rundir.checkpoint),
continued when it stopped short of --max_steps, and refused with one line when it was trained
otherwise (a new --output keeps both). A task's evaluation is reused when study.json records the
very evaluation arguments (every flag of EvalArgs, the runs' paths included) and the sha256 of the
results.json they wrote, and no run of the task was trained since; else it is evaluated again.
Each file read back is checked first (minirl.infra.readback); a damaged one is named in one line.
"""

from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

from minirl.config import (
    BudgetArgs,
    Config,
    EvalArgs,
    GRPOArgs,
    ModelArgs,
    StudyArgs,
    TaskArgs,
    study_seeds,
    validate_study,
)
from minirl.infra.errors import ConfigError, DataError
from minirl.infra.progress import progress_bar
from minirl.infra.readback import check_json, read_json
from minirl.rundir.checkpoint import checkpoints, config_changes, sole_writer


@dataclass
class StudyTask:
    """One task of the study: its results file (relative to the study root) and its runs."""

    results: str
    arms: dict[str, list[str]]  # arm -> its run labels, one per training seed
    evaluation: dict = field(default_factory=dict)  # the EvalArgs results.json was made with
    results_sha256: str = ""  # of results.json as that evaluation wrote it
    control: str = ""  # the control base's results file ("" when none was evaluated)
    control_evaluation: dict = field(default_factory=dict)  # the EvalArgs the control ran with
    control_sha256: str = ""  # of the control's results.json as that evaluation wrote it


@dataclass
class StudyRecord:
    """study.json: the arguments, the commit measured, the tasks and the timings."""

    args: StudyArgs
    commit: str  # the code that measured the results
    tasks: dict[str, StudyTask] = field(default_factory=dict)
    # "task/label": {seconds, status}; total_seconds (and measured_seconds) a number
    timings: dict[str, dict[str, float | str] | float] = field(default_factory=dict)
    invoked_at: str = ""  # the code of this invocation (differs when it only reused results)

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> StudyRecord:
        return cls(
            args=StudyArgs(**data["args"]),
            commit=data["commit"],
            tasks={name: StudyTask(**entry) for name, entry in data["tasks"].items()},
            timings=data["timings"],
            invoked_at=data.get("invoked_at", data["commit"]),
        )


def load_study(path: str | Path) -> StudyRecord:
    """study.json, every value checked (DataError names the file and what is wrong)."""
    data = check_json(read_json(path), StudyRecord, f"{path}:")
    return StudyRecord.from_json(data)


@dataclass
class RunSummary:
    """What the study reads of a run's summary.json: the config it was trained with, its steps."""

    config: dict[str, dict]
    steps: int | None = None  # written when the run finished
    base_model: str = ""  # the base the flags loaded (minirl.models.base_identity); "": older


@dataclass
class Arm:
    """One trained configuration of the study."""

    name: str
    mode: str  # fixed | budgetmix
    budget: int
    reward_mode: str = "outcome"


def arms(args: StudyArgs) -> list[Arm]:
    found = [
        Arm(f"fixed-T{args.generous}", "fixed", args.generous),
        Arm(f"fixed-T{args.tight}", "fixed", args.tight),
        Arm("budgetmix", "budgetmix", args.generous),
    ]
    if args.process:
        found.append(Arm("process", "budgetmix", args.generous, "process"))
    return found


def run_label(arm: Arm, seed: int, seeds: list[int]) -> str:
    return arm.name if len(seeds) == 1 else f"{arm.name}-s{seed}"


def arm_config(args: StudyArgs, task: str, arm: Arm, seed: int, output_dir: Path) -> Config:
    """The training config of one arm: the project's defaults, with only the arm's choices set."""
    return Config(
        ModelArgs(model=args.model),
        GRPOArgs(
            max_steps=args.max_steps,
            seed=seed,
            output_dir=str(output_dir),
            num_generations=args.num_generations,
            eval_seeds=0,  # the study evaluates every arm itself, on a shared protocol
        ),
        BudgetArgs(
            mode=arm.mode,
            budget=arm.budget,
            budget_min=args.budget_min,
            budget_max=args.budget_max,
        ),
        TaskArgs(task=task, tasks_per_step=args.tasks_per_step, reward_mode=arm.reward_mode),
    )


def run_status(cfg: Config) -> str:
    """What `train_missing` will do with `cfg`'s run: 'reused' (it finished before with the same
    config), 'resumed' (it stopped short of --max_steps) or 'trained' (there is none). A run
    trained otherwise is refused in one line, before the study starts anything."""
    from minirl.models import base_identity

    out = Path(cfg.output_dir)
    path = out / "summary.json"
    found = checkpoints(out)
    if path.is_file():
        try:
            summary = check_json(read_json(path), RunSummary, f"{path}:")
        except DataError as err:
            raise DataError(f"{err}; delete {out} to train that run again") from err
        changes = config_changes(summary["config"], cfg)
        if changes:
            raise ConfigError(
                f"{out} was trained with other settings: {', '.join(changes)}; run the study "
                "with the flags it was started with, or give a new --output"
            )
        then, now = summary["base_model"], base_identity(cfg.model.model, cfg.task.task)
        if then != now:
            raise ConfigError(
                f"{out} was trained on another base than --model {cfg.model.model} loads now "
                f"(then {then or 'not recorded: trained before runs recorded it'}, now {now}); "
                "give a new --output, or delete the run to train it again"
            )
        steps = summary["steps"] or 0
        if steps > cfg.grpo.max_steps:
            raise ConfigError(
                f"{out} was trained for {steps} steps, more than --max_steps "
                f"{cfg.grpo.max_steps}; use --max_steps {steps}, or give a new --output"
            )
        if steps == cfg.grpo.max_steps and found:
            return "reused"
    # Without a checkpoint there is nothing to evaluate or resume: the run is trained afresh.
    return "resumed" if found else "trained"


def train_missing(cfg: Config, progress: bool) -> str:
    """Train `cfg` unless its run finished before with the same config; resume a run that was cut
    short (or that --max_steps now asks to go further); refuse one trained with other flags."""
    from minirl.trainer import train  # the study is one of the loop's three callers

    status = run_status(cfg)
    if status == "reused":
        return status
    cfg.grpo.resume = status == "resumed"
    cfg.grpo.overwrite_output_dir = False
    train(cfg, progress=progress)
    return status


def git_commit() -> str:
    """HEAD's short hash, marked when tracked files differ from it; 'unknown' outside git."""
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        return sha + (" (with uncommitted changes)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _worker_start(jobs: int, parent: int) -> None:
    """A worker's setup: its share of the cores, and an end when the study's process ends."""
    _end_with(parent)
    import torch

    torch.set_num_threads(max(1, (os.cpu_count() or 1) // jobs))


def _end_with(parent: int) -> None:
    """Have Linux send this worker SIGTERM when the study's process `parent` ends, however it ends.

    Ctrl-C reaches the whole process group, workers included. A study ended by `kill`, a
    scheduler's time limit or the out-of-memory killer does not: its workers would go on
    training runs that no one collects, holding their run directories, and the next invocation
    would be refused ("... is being written by another process"). Written by hand with ctypes
    because neither multiprocessing nor concurrent.futures offers it; prctl(PR_SET_PDEATHSIG)
    is Linux's alone, and elsewhere a worker still ends after the run it is on.
    """
    if not sys.platform.startswith("linux"):
        return
    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)
    if os.getppid() != parent:  # the study ended before the request was in place
        os.kill(os.getpid(), signal.SIGTERM)


def _timed_base(spec: tuple[str, str], progress: bool) -> float:
    """Build the base that `--model spec[0]` loads for task spec[1] if the cache lacks it; the
    seconds it took (0.0 when it was there already). Its warm start shows its own bar with one
    job at a time, as it did when the first run built it."""
    from minirl.models import ensure_base

    t0 = time.perf_counter()
    built = ensure_base(*spec, progress=progress)
    return round(time.perf_counter() - t0, 1) if built else 0.0


def _timed_train(cfg: Config, progress: bool) -> tuple[str, float]:
    t0 = time.perf_counter()
    status = train_missing(cfg, progress)
    return status, 0.0 if status == "reused" else round(time.perf_counter() - t0, 1)


def _timed_eval(args: EvalArgs, progress: bool) -> float:
    from minirl.compare import compare, write_outputs

    t0 = time.perf_counter()
    with sole_writer(args.output, "--output"):  # another writer of TASK_DIR is refused
        write_outputs(compare(args, progress=progress), args.output)
    return round(time.perf_counter() - t0, 1)


@dataclass
class Job:
    """One piece of the study's work: `fn(arg, progress)`, once the jobs named in `after` are done.

    `fn` is a module-level function, so that a worker process can be handed it.
    """

    key: str  # "task/label", as study.json's timings name it
    fn: Callable
    arg: object
    after: tuple[str, ...] = ()


def run_jobs(jobs: list[Job], workers: int, progress: bool) -> dict[str, object]:
    """Every job's result, by key: `workers` at a time, each in its own process.

    A job starts once every job it waits for has finished. Among the jobs that may start, the
    first in the list goes first: the list's order is the priority. The study lists a task's
    evaluation before the runs, so that it starts as soon as its own runs are done, beside the
    other tasks' training. Its earlier schedule (every run, then every evaluation, each stage
    J at a time) left a core idle while the last runs and the last long evaluation finished,
    and had a task's first two runs both wait on one build of their base. A job that fails ends
    the study: what is running is waited for, nothing more starts, and its error is raised here.
    """
    keys = {job.key for job in jobs}
    for job in jobs:
        if missing := [k for k in job.after if k not in keys]:
            raise ValueError(f"job {job.key} waits for {missing}, which no job makes")
    results: dict[str, object] = {}
    waiting = list(jobs)

    def next_ready() -> Job | None:
        return next((j for j in waiting if all(k in results for k in j.after)), None)

    if workers == 1:
        while waiting:
            job = next_ready()
            if job is None:
                raise ValueError(f"jobs {[j.key for j in waiting]} wait for each other")
            waiting.remove(job)
            results[job.key] = job.fn(job.arg, progress)
        return results
    # A fresh interpreter per worker ("spawn"): forking a process that holds torch threads can
    # deadlock. Progress bars from several processes would interleave, so workers run quietly
    # and this process draws one bar: the jobs done, and the ones running.
    context = multiprocessing.get_context("spawn")
    running: dict[Future, str] = {}
    with (
        progress_bar(disable=not progress) as bar,
        ProcessPoolExecutor(
            workers, mp_context=context, initializer=_worker_start, initargs=(workers, os.getpid())
        ) as pool,
    ):
        shown = bar.add_task("study", total=len(jobs), metrics="")
        try:
            while waiting or running:
                # Submitted only when a worker is free, so the priority is applied then.
                while len(running) < workers and (job := next_ready()) is not None:
                    waiting.remove(job)
                    running[pool.submit(job.fn, job.arg, False)] = job.key
                if not running:
                    raise ValueError(f"jobs {[j.key for j in waiting]} wait for each other")
                bar.update(shown, completed=len(results), metrics=", ".join(running.values()))
                finished, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in finished:
                    results[running.pop(future)] = future.result()
            bar.update(shown, completed=len(results), metrics="")
        except BaseException:
            pool.shutdown(cancel_futures=True)
            raise
    return results


def eval_args(
    args: StudyArgs, task: str, labels: dict[str, str], root: Path, control: bool = False
) -> EvalArgs:
    """The one evaluation of a task: every arm on the same instances, states and seed (or, with
    `control`, the control base alone, into <task>/control)."""
    return EvalArgs(
        checkpoints=",".join(f"{label}={path}" for label, path in labels.items()),
        task=task,
        model=args.control if control else args.model,
        k=args.k,
        t=args.t,
        n=args.n,
        instances=args.instances,
        seed=args.eval_seed,
        decision_states=args.decision_states,
        recovery_states=args.recovery_states,
        recovery_horizon=args.recovery_horizon,
        recovery_matches=args.recovery_matches,
        decision_samples=args.decision_samples,
        state_episodes=args.state_episodes,
        output=str(root / task / "control" if control else root / task),
    )


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""


def evaluated(recorded: dict | None, digest: str, args: EvalArgs, path: Path) -> bool:
    """Whether `path` is the evaluation `args` asks for, as study.json recorded it (its whole
    EvalArgs, and the sha256 of the file it wrote): then a rerun, e.g. after a crash in the
    report, reuses it instead of evaluating again."""
    from minirl.eval.results import load_results

    if recorded != dataclasses.asdict(args):
        return False
    if not digest or not path.is_file() or sha256(path) != digest:
        return False  # written by something else since (evaluate.py --output TASK_DIR)
    try:
        found = load_results(path)
    except (ValueError, KeyError, TypeError):
        return False  # unreadable or from an older layout: evaluate again
    return all(result.successes for result in found.checkpoints.values())


def run_study(args: StudyArgs, progress: bool = True) -> StudyRecord:
    """Train what is missing, evaluate every task, write per-task results and study.json.

    The caller holds the study directory (minirl.rundir.checkpoint.sole_writer; evaluate.py does).
    """
    validate_study(args)
    seeds = study_seeds(args)
    root = Path(args.output)
    root.mkdir(parents=True, exist_ok=True)
    # Taken when the study starts: code changed while it runs would not be the code it measured.
    now = git_commit()
    study = StudyRecord(args=dataclasses.replace(args), commit=now, invoked_at=now)
    # What an earlier invocation did and reuses now keeps the seconds it took then.
    record = root / "study.json"
    try:
        earlier = load_study(record) if record.exists() else None
    except DataError as err:
        raise DataError(
            f"{err}; delete it to start the record afresh (finished runs are reused, every "
            "task is evaluated again)"
        ) from err
    before = earlier.timings if earlier else {}

    def took(key: str, seconds: float) -> float:
        then = before.get(key)
        if seconds == 0 and isinstance(then, dict) and isinstance(then.get("seconds"), float):
            return then["seconds"]
        return seconds

    started = time.perf_counter()
    names = [t.strip() for t in args.tasks.split(",") if t.strip()]
    runs = [
        (
            task,
            run_label(arm, seed, seeds),
            arm_config(args, task, arm, seed, root / task / "runs" / run_label(arm, seed, seeds)),
        )
        for task in names
        for arm in arms(args)
        for seed in seeds
    ]
    # Decided before anything starts: a run trained otherwise is refused now, not an hour in,
    # and which runs will train says which tasks must be evaluated again.
    planned = {f"{task}/{label}": run_status(cfg) for task, label, cfg in runs}
    asked, control = {}, {}
    bases, evaluations, training, controls = [], [], [], []  # the jobs, in run_jobs' priority
    for task in names:
        labels = {"base": "base"}
        labels |= {label: cfg.output_dir for t, label, cfg in runs if t == task}
        asked[task] = eval_args(args, task, labels, root)
        own = [
            Job(f"{task}/{label}", _timed_train, cfg, (f"{task}/base",))
            for t, label, cfg in runs
            if t == task
        ]
        own = [job for job in own if planned[job.key] != "reused"]
        entry = earlier.tasks.get(task) if earlier else None
        if own or not evaluated(
            entry.evaluation if entry else None,
            entry.results_sha256 if entry else "",
            asked[task],
            root / task / "results.json",
        ):
            # The base first, built once before anything loads it; the evaluation after the
            # task's runs.
            bases.append(Job(f"{task}/base", _timed_base, (args.model, task)))
            after = (f"{task}/base", *(job.key for job in own))
            evaluations.append(Job(f"{task}/evaluation", _timed_eval, asked[task], after))
            training += own
        if args.control:
            control[task] = eval_args(args, task, {"base": "base"}, root, control=True)
            if not evaluated(
                entry.control_evaluation if entry else None,
                entry.control_sha256 if entry else "",
                control[task],
                root / task / "control" / "results.json",
            ):
                controls.append(Job(f"{task}/control", _timed_eval, control[task]))
    done = run_jobs(bases + evaluations + training + controls, args.jobs, progress)
    for key, seconds in done.items():
        if key.endswith("/base") and seconds:  # a base the cache had took no time worth a line
            study.timings[key] = {"seconds": seconds, "status": "built"}
    parts = [f"{task}/{label}" for task, label, _ in runs]
    parts += [f"{task}/{part}" for task in names for part in ("evaluation", "control")]
    for key in parts:
        if key.endswith("/control") and not args.control:
            continue
        if key not in done:  # reused: it keeps the seconds it took when it was measured
            study.timings[key] = {"seconds": took(key, 0), "status": "reused"}
        elif key.endswith(("/evaluation", "/control")):
            study.timings[key] = {"seconds": done[key], "status": "evaluated"}
        else:
            status, seconds = done[key]
            study.timings[key] = {"seconds": seconds, "status": status}
    for task in names:
        study.tasks[task] = StudyTask(
            results=f"{task}/results.json",
            arms={a.name: [run_label(a, s, seeds) for s in seeds] for a in arms(args)},
            evaluation=dataclasses.asdict(asked[task]),
            results_sha256=sha256(root / task / "results.json"),
            control=f"{task}/control/results.json" if args.control else "",
            control_evaluation=dataclasses.asdict(control[task]) if args.control else {},
            control_sha256=(
                sha256(root / task / "control" / "results.json") if args.control else ""
            ),
        )
    study.timings["total_seconds"] = round(time.perf_counter() - started, 1)
    reused = all(v.get("status") == "reused" for v in study.timings.values() if isinstance(v, dict))
    if earlier and reused:  # nothing was measured now: the numbers, and their time, are earlier
        study.commit = earlier.commit
        measured = earlier.timings.get("measured_seconds", earlier.timings.get("total_seconds"))
        if isinstance(measured, float):
            study.timings["measured_seconds"] = measured
    tmp = record.with_name(record.name + ".tmp")  # a crash mid-write keeps the earlier record
    tmp.write_text(json.dumps(study.to_json(), indent=1))
    tmp.replace(record)
    return study
