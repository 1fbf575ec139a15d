"""The whole study at toy size, and its bad flags."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # evaluate.py is a script at the repo root, not part of the package
import evaluate  # noqa: E402


@pytest.mark.slow
def test_toy_study_writes_every_section_and_plot_from_the_data(tmp_path, monkeypatch) -> None:
    """The full pipeline at toy size: 4 arms x 2 seeds x 2 tasks, 2 steps each, the control
    base alone, then the report."""
    from minirl.tiny import TinyRecipe, ensure_tiny

    monkeypatch.setenv("MINIRL_CACHE", str(tmp_path / "cache"))
    model = ensure_tiny(
        TinyRecipe(max_steps=4, tasks=(("gridnav", 1.0), ("hilo", 1.0))), progress=False
    ).path
    out = tmp_path / "study"
    flags = [
        "--study",
        "--model",
        str(model),
        "--control",
        str(model),
        "--tasks",
        "gridnav,hilo",
        "--seeds",
        "0,1",
        "--max_steps",
        "2",
        "--tasks_per_step",
        "2",
        "--num_generations",
        "2",
        "--k",
        "1,2",
        "--t",
        "2,4",
        "--n",
        "2",
        "--instances",
        "4",
        "--decision_states",
        "8",
        "--recovery_states",
        "8",
        "--state_episodes",
        "2",
        "--validation_reps",
        "1",
        "--output",
        str(out),
    ]
    assert evaluate.main(flags) == 0
    report = (out / "report.md").read_text()
    # The report names the commit study.json recorded when the study started.
    commit = json.loads((out / "study.json").read_text())["commit"]
    assert commit and f"at commit {commit}." in report
    for section in (
        "## What the study shows",
        "## Power, and the rules on simulated truths",
        "## 0. Did RL move the policy",
        "## Verdicts at a glance",
        "## 1. Budget dependence",
        "## 2. Where RL helps",
        "## 3. BudgetMix robustness",
        "## 4. Process supervision",
    ):
        assert section in report
    # One glance row per test: per task 3 budget, 4 recovery, 1 robustness, 1 process.
    glance = report.split("## Verdicts at a glance")[1].split("## 1.")[0]
    assert sum(line.startswith(("| gridnav |", "| hilo |")) for line in glance.splitlines()) == 18
    for task in ("gridnav", "hilo"):
        assert report.count(f"### {task}") == 4  # gate, budget, where, robustness
        runs = sorted(p.name for p in (out / task / "runs").iterdir())
        arms = ["budgetmix", "fixed-T12", "fixed-T4", "process"]
        assert runs == [f"{arm}-s{seed}" for arm in arms for seed in (0, 1)]
        for run in runs:  # every arm really trained its 2 steps
            summary = json.loads((out / task / "runs" / run / "summary.json").read_text())
            assert summary["steps"] == 2
        # The base row of the budget table is the base grid of results.json, to 3 decimals.
        res = json.loads((out / task / "results.json").read_text())
        base = {c["t"]: c["mean"] for c in res["checkpoints"]["base"]["grid"] if c["k"] == 1}
        section = report.split("## 1. Budget dependence")[1].split(f"### {task}")[1]
        row = next(line for line in section.splitlines() if line.startswith("| base Pass@"))
        assert [float(x.split("±")[0]) for x in row.split("|")[2:-1]] == [
            round(base[t], 3) for t in (2, 4)
        ]
        # Every arm was asked in the same post-error and matched fresh states (this toy base
        # replies nonsense, so no fresh state reaches a later turn, and nothing is matched).
        states = res["meta"]["post_error_states"]
        assert len(states) <= 8
        for entry in res["checkpoints"].values():
            errors = entry["analysis"]["from_errors"]
            assert errors is None or len(errors["optimal_counts"]) == len(states)
        # The control base was evaluated alone, on the same instances.
        control = json.loads((out / task / "control" / "results.json").read_text())
        assert list(control["checkpoints"]) == ["base"]
        assert control["meta"]["seeds"] == res["meta"]["seeds"]
    for link in re.findall(r"\]\(([^)]+)\)", report):  # every linked file exists
        assert (out / link).is_file(), link
        if link.endswith(".png"):
            assert (out / link).read_bytes()[:4] == b"\x89PNG"
    assert {"gap_gridnav.png", "where_hilo.png"} <= {p.name for p in out.iterdir()}
    first = json.loads((out / "study.json").read_text())["timings"]
    # A second invocation reuses the finished runs and evaluations, and keeps their seconds.
    assert evaluate.main(flags) == 0
    timings = json.loads((out / "study.json").read_text())["timings"]
    assert timings["gridnav/budgetmix-s1"]["status"] == "reused"
    assert timings["measured_seconds"] == first["total_seconds"]  # the time of the measurement
    rerun = (out / "report.md").read_text()
    minutes = first["total_seconds"] / 60
    assert f"The invocation that measured it took {minutes:.1f} minutes" in rerun
    for part in ("hilo/evaluation", "hilo/control"):
        assert timings[part] == {"seconds": first[part]["seconds"], "status": "reused"}
    assert os.environ["MINIRL_CACHE"] == str(tmp_path / "cache")


def test_bad_study_flags_exit_2(capsys) -> None:
    assert evaluate.main(["--study", "--tasks", "chess"]) == 2
    assert "--tasks 'chess'" in capsys.readouterr().err
    assert evaluate.main(["--study", "--tight", "12", "--generous", "4"]) == 2
    capsys.readouterr()
    refused = {
        "--tasks gridnav,gridnav --jobs 2": "--tasks 'gridnav,gridnav' names gridnav twice",
        "--tasks gridnav,hilo,gridnav": "names gridnav twice",
        "--jobs 65": "--jobs must be in [1, 64], got 65 (each job is a process",
        "--jobs 0": "--jobs must be in [1, 64], got 0",
    }
    for flags, words in refused.items():
        assert evaluate.main(["--study", *flags.split()]) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and words in lines[0], (flags, lines)


def test_validate_is_a_cli_like_the_others(capsys) -> None:
    from minirl.study import validate

    refused = {
        "--task chess": "--task 'chess': valid tasks are gridnav",
        "--reps 0": "--reps must be in [1, 10000], got 0",
        "--reps x": "argument --reps: invalid int value: 'x'",
        "--replicates 5": "--replicates must be in [10, 100000], got 5",
        "--family -1": "--family must be in [1, 10000], got -1",
        "--rep 3": "unrecognized arguments: --rep 3",  # no abbreviations
        "--bogus": "unrecognized arguments: --bogus",
    }
    for flags, words in refused.items():
        try:
            code = validate.main(flags.split())
        except SystemExit as exc:  # argparse's errors
            code = exc.code
        lines = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(lines) == 1, (flags, lines)
        assert lines[0].startswith("minirl.study.validate: error: ") and words in lines[0], lines


# A study small enough to rerun many times: one task, one seed, three arms of one step each.
TOY = [
    *("--tasks", "gridnav", "--seeds", "0", "--no_process", "--max_steps", "1"),
    *("--tasks_per_step", "1", "--num_generations", "2", "--k", "1", "--t", "2", "--n", "1"),
    *("--instances", "2", "--decision_states", "2", "--recovery_states", "2"),
    *("--state_episodes", "1", "--decision_samples", "1", "--validation_reps", "1"),
]


def study(flags: list[str], capsys) -> tuple[int, list[str]]:
    code = evaluate.main(["--study", *flags])
    return code, capsys.readouterr().err.strip().splitlines()


def statuses(out: Path) -> dict[str, str]:
    timings = json.loads((out / "study.json").read_text())["timings"]
    return {key: value["status"] for key, value in timings.items() if isinstance(value, dict)}


@pytest.fixture(scope="module")
def toy(quick_tiny_path: str, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One toy study, trained and evaluated once; the tests below rerun it (in this order)."""
    out = tmp_path_factory.mktemp("toy-study") / "study"
    flags = [*TOY, "--model", quick_tiny_path, "--output", str(out)]
    assert evaluate.main(["--study", *flags]) == 0
    assert set(statuses(out).values()) == {"trained", "evaluated"}
    return {"out": out, "flags": flags, "model": quick_tiny_path}


def test_damaged_study_files_are_one_line(toy: dict, capsys) -> None:
    out, flags = toy["out"], toy["flags"]
    record = (out / "study.json").read_bytes()
    summary = out / "gridnav" / "runs" / "fixed-T4" / "summary.json"
    good_summary = summary.read_bytes()
    damaged = {
        "empty study.json": (out / "study.json", b"", "study.json: not valid JSON"),
        "truncated study.json": (out / "study.json", record[:100], "not valid JSON"),
        "study.json a list": (out / "study.json", b"[]", "expected an object, got a list"),
        "study.json tasks a list": (
            out / "study.json",
            record.replace(b'"tasks": {', b'"tasks": [{', 1),
            "study.json",
        ),
        "study.json args mistyped": (
            out / "study.json",
            record.replace(b'"n": 1', b'"n": "1"', 1),
            "study.json: args.n: expected an integer, got '1'",
        ),
        "study.json not UTF-8": (out / "study.json", b"\xff" + record, "byte 0 is not UTF-8"),
        "summary.json truncated": (summary, good_summary[:50], "fixed-T4/summary.json: not valid"),
        "summary.json without config": (summary, b'{"steps": 1}', "summary.json: no 'config'"),
        "summary.json steps a string": (
            summary,
            good_summary.replace(b'"steps": 1', b'"steps": "1"'),
            "summary.json: steps: expected an integer or null",
        ),
        # A run on another base (a tiny recipe changed under the same --model) is not reused,
        # nor one that predates the record: it cannot say which base it was trained on.
        "summary.json on another base": (
            summary,
            good_summary.replace(b'"base_model": "', b'"base_model": "tiny-sticky (tiny-0', 1),
            "was trained on another base",
        ),
        "summary.json without its base": (
            summary,
            good_summary.replace(b'"base_model": ', b'"base_model_": ', 1),
            "not recorded",
        ),
    }
    assert b'"base_model": ' in good_summary
    for case, (path, data, words) in damaged.items():
        assert data != good_summary, case
        path.write_bytes(data)
        code, lines = study(flags, capsys)
        assert code == 2 and len(lines) == 1, (case, lines)
        assert lines[0].startswith("evaluate.py: error: ") and words in lines[0], (case, lines)
        (out / "study.json").write_bytes(record)
        summary.write_bytes(good_summary)
    assert study(flags, capsys)[0] == 0  # and repaired, it is all reused
    assert set(statuses(out).values()) == {"reused"}


def test_a_rerun_reuses_only_what_was_done_with_the_same_settings(
    toy: dict, tmp_path: Path, capsys
) -> None:
    """Training reuse compares each run's whole recorded config, evaluation reuse the whole
    EvalArgs and the results file's hash: other flags are refused in one line or re-run, never
    reported as if they had been run."""
    from minirl.study.run import eval_args, evaluated, load_study

    out, flags, model = toy["out"], toy["flags"], toy["model"]
    results = (out / "gridnav" / "results.json").read_bytes()
    # The same command: everything reused, nothing rewritten.
    assert study(flags, capsys)[0] == 0
    assert set(statuses(out).values()) == {"reused"}
    assert (out / "gridnav" / "results.json").read_bytes() == results
    # Training flags, or another model (the same files under another name): refused.
    other_model = tmp_path / "other-name"
    other_model.symlink_to(model)
    for changed, words in {
        ("--num_generations", "4"): "--num_generations (2, now 4)",
        ("--budget_min", "6", "--budget_max", "10"): "--budget_min (4, now 6), --budget_max",
        ("--tasks_per_step", "2"): "--tasks_per_step (1, now 2)",
        ("--model", str(other_model)): f"--model ('{model}', now '{other_model}')",
    }.items():
        code, lines = study([*flags, *changed], capsys)
        assert code == 2 and len(lines) == 1 and words in lines[0], (changed, lines)
        assert "was trained with other settings" in lines[0] and "new --output" in lines[0]
    code, lines = study([*flags, "--max_steps", "0"], capsys)
    assert code == 2 and "--max_steps must be >= 1" in lines[0]
    assert (out / "gridnav" / "results.json").read_bytes() == results
    # Evaluation reuse: the recorded arguments and the file's hash must both match. Another
    # evaluation flag, or a results.json rewritten since, is not the recorded evaluation.
    record = load_study(out / "study.json")
    args = eval_args(record.args, "gridnav", {"base": "base"}, out)
    args.checkpoints = record.tasks["gridnav"].evaluation["checkpoints"]
    entry, path = record.tasks["gridnav"], out / "gridnav" / "results.json"
    assert evaluated(entry.evaluation, entry.results_sha256, args, path)
    other = dataclasses.replace(args, decision_samples=2)
    assert not evaluated(entry.evaluation, entry.results_sha256, other, path)
    path.write_bytes(results + b" ")
    assert not evaluated(entry.evaluation, entry.results_sha256, args, path)
    # The real command with an evaluation flag changed, and one run's checkpoint deleted: that run
    # is trained again (nothing blames a --checkpoints flag), the others are reused, and the
    # evaluation is run again with the new flag.
    for checkpoint in (out / "gridnav" / "runs" / "budgetmix").glob("checkpoint-*"):
        shutil.rmtree(checkpoint)
    assert study([*flags, "--decision_samples", "2"], capsys)[0] == 0
    found = statuses(out)
    assert found.pop("gridnav/budgetmix") == "trained"
    assert found.pop("gridnav/evaluation") == "evaluated"
    assert found.pop("gridnav/control") == "evaluated"  # the control base ran with the flag too
    assert set(found.values()) == {"reused"}
    meta = json.loads((out / "gridnav" / "results.json").read_text())["meta"]
    assert meta["decision_samples"] == 2


def _running(pid: int) -> bool:
    """Whether process `pid` still runs (a zombie waiting to be reaped has ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_workers_end_when_the_study_process_is_killed(tmp_path: Path) -> None:
    # Two workers take a 60-second task each; the study's process is then killed outright
    # (SIGKILL: no handler of its own can run). Its workers must not train on for nobody.
    (tmp_path / "nap.py").write_text(
        "import os, time\n"
        "from pathlib import Path\n"
        "def nap(seconds, progress):\n"
        f"    Path({str(tmp_path)!r}, str(os.getpid())).with_suffix('.pid').touch()\n"
        "    time.sleep(seconds)\n"
    )
    study = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import sys; sys.path.insert(0, {str(tmp_path)!r}); import nap; "
            "from minirl.study.run import Job, run_jobs; "
            "run_jobs([Job(str(i), nap.nap, 60) for i in range(2)], 2, False)",
        ],
        cwd=ROOT,
    )
    workers: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while len(workers) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
            workers = [int(p.stem) for p in tmp_path.glob("*.pid")]
        assert len(workers) == 2, "the workers never started their tasks"
        assert all(_running(pid) for pid in workers)
        study.kill()
        study.wait()
        deadline = time.monotonic() + 20  # well short of the tasks' 60 s
        while any(_running(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(_running(pid) for pid in workers), "workers outlived the study"
    finally:
        study.kill()
        for pid in workers:
            if _running(pid):
                os.kill(pid, signal.SIGKILL)


STAMP = """import time
from pathlib import Path
def stamp(arg, progress):
    folder, name, seconds, fail = arg
    Path(folder, name + ".start").write_text(repr(time.time()))
    time.sleep(seconds)
    if fail:
        raise ValueError("job " + name + " failed")
    Path(folder, name + ".end").write_text(repr(time.time()))
    return name
"""


@pytest.fixture
def stamp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A job function that records when it started and ended, importable by spawned workers
    (they are handed the parent's sys.path)."""
    (tmp_path / "stamp_jobs.py").write_text(STAMP)
    monkeypatch.syspath_prepend(str(tmp_path))
    import stamp_jobs

    yield stamp_jobs.stamp
    sys.modules.pop("stamp_jobs", None)


def _when(folder: Path, name: str, edge: str) -> float:
    return float((folder / f"{name}.{edge}").read_text())


@pytest.mark.parametrize("workers", [1, 2])
def test_jobs_start_after_what_they_wait_for_and_in_the_list_s_order(
    workers: int, stamp, tmp_path: Path, capsys
) -> None:
    from minirl.study.run import Job, run_jobs

    def job(name: str, seconds: float, after: tuple[str, ...] = ()) -> Job:
        return Job(name, stamp, (str(tmp_path), name, seconds, False), after)

    # d waits for b and c, b for a; e waits for nothing but is listed last. With two workers a
    # and c start first (d and b cannot yet); when a ends, b goes before e (it is listed first).
    jobs = [job("d", 0.1, ("b", "c")), job("b", 0.2, ("a",)), job("a", 0.2), job("c", 3.0)]
    jobs.append(job("e", 0.1))
    done = run_jobs(jobs, workers, progress=workers > 1)
    assert done == {name: name for name in "abcde"}
    for name, before in (("b", "a"), ("d", "b"), ("d", "c")):
        assert _when(tmp_path, name, "start") >= _when(tmp_path, before, "end")
    assert _when(tmp_path, "b", "start") < _when(tmp_path, "e", "start")
    if workers == 1:  # one at a time: the first job of the list that may start, each time
        assert list(done) == ["a", "b", "c", "d", "e"]
    else:  # c ran beside a, b and e, not before or after them
        assert _when(tmp_path, "c", "start") < _when(tmp_path, "b", "start")
        assert _when(tmp_path, "e", "end") < _when(tmp_path, "c", "end")
        # The workers are quiet; the study's process shows one bar of the jobs done.
        assert re.search(r"study .* 5/5", capsys.readouterr().out)


def test_a_failed_job_ends_the_jobs_and_what_waits_for_it_never_starts(
    stamp, tmp_path: Path
) -> None:
    from minirl.study.run import Job, run_jobs

    jobs = [
        Job("b", stamp, (str(tmp_path), "b", 0.1, False), ("a",)),
        Job("a", stamp, (str(tmp_path), "a", 0.1, True)),
        Job("c", stamp, (str(tmp_path), "c", 0.1, False)),
    ]
    with pytest.raises(ValueError, match="job a failed"):
        run_jobs(jobs, 2, False)
    assert (tmp_path / "a.start").exists() and not (tmp_path / "a.end").exists()
    assert not (tmp_path / "b.start").exists()
    with pytest.raises(ValueError, match=r"job b waits for \['z'\], which no job makes"):
        run_jobs([Job("b", stamp, (str(tmp_path), "b", 0.1, False), ("z",))], 1, False)
