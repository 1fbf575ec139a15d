"""The yardstick and feedback use where people read them: results.json, the tables, the plot,
train.py's closing lines and the viewer's headline; every value read back from a file is checked.

The end-to-end runs (a training run, an evaluation) check the same places with real numbers in
tests/test_trackers.py and tests/test_eval_compare.py; here the files are made by hand, so the
malformed ones can be too.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from rich.console import Console

from minirl.eval import plots
from minirl.eval.feedback import FeedbackUse
from minirl.eval.openloop import Search, Yardstick, from_record, yardsticks
from minirl.eval.results import EvalResults, load_results, save_results
from minirl.eval.tables import open_loop_table
from minirl.rundir import outputs, viewer
from minirl.study.simulate import SimPolicy, sim_results

TS = (2, 4)


@pytest.fixture(scope="module")
def results() -> EvalResults:
    study = sim_results(
        "gridnav",
        {"base": SimPolicy(0.5, 0.5)},
        runs=1,
        instances=8,
        n=2,
        ts=TS,
        fresh_states=10,
        post_states=10,
    )
    res = study.results
    res.open_loop = yardsticks("gridnav", list(TS), Search(seeds=20, width=4, held_out=100))
    res.checkpoints["base"].feedback_use = {
        2: FeedbackUse(0.25, 0.02, 0.4, 30, 5),
        4: FeedbackUse(math.nan, math.nan, 0.0, 0, 0),
    }
    return res


def test_results_json_round_trips_and_refuses_malformed_records(results, tmp_path) -> None:
    path = save_results(results, tmp_path / "results.json")
    back = load_results(path)
    assert back.open_loop == results.open_loop
    used = back.checkpoints["base"].feedback_use
    assert used[2] == FeedbackUse(0.25, 0.02, 0.4, 30, 5)
    assert math.isnan(used[4].bits) and used[4].turns == 0  # NaN is null in the file, and back
    data = json.loads(path.read_text())
    record = data["checkpoints"]["base"]["feedback_use"]["2"]
    for bad in (
        {"2": "lots"},
        {"two": record},
        {"2": {**record, "bits": "0.3"}},
        {"2": {**record, "turns": 30.0}},
        {"2": {**record, "extra": 1}},
        [record],
    ):
        broken = json.loads(json.dumps(data))
        broken["checkpoints"]["base"]["feedback_use"] = bad
        with pytest.raises(ValueError, match="feedback_use"):
            EvalResults.from_json(broken)
    for bad in ({"2": {"success": 0.1}}, {"3": data["open_loop"]["2"]}, "x"):
        broken = json.loads(json.dumps(data))
        broken["open_loop"] = bad
        with pytest.raises(ValueError, match="open_loop"):
            EvalResults.from_json(broken)
    del data["open_loop"], data["checkpoints"]["base"]["feedback_use"]  # an older file
    old = EvalResults.from_json(data)
    assert old.open_loop == {} and old.checkpoints["base"].feedback_use == {}


def test_from_record_checks_every_field() -> None:
    good = {
        "task": "gridnav",
        "budget": 4,
        "success": 0.1,
        "stderr": 0.01,
        "sequence": ["up"],
        "method": "beam",
        "train_success": 0.2,
        "held_out": 100,
        "seconds": 1.0,
    }
    assert from_record(good) == Yardstick(**good)
    for key, value in [
        ("budget", 4.0),
        ("budget", True),
        ("success", "0.1"),
        ("success", math.nan),
        ("sequence", "up"),
        ("sequence", [1]),
        ("task", None),
    ]:
        assert from_record({**good, key: value}) is None, key
    assert from_record({**good, "extra": 1}) is None and from_record([good]) is None


def test_the_terminal_table_puts_pass1_beside_the_yardstick(results) -> None:
    console = Console(record=True, width=200)
    console.print(open_loop_table(results))  # print_tables shows it (tests/test_eval_compare.py)
    text = console.export_text()
    assert "Pass@(1,T) beside the best feedback-blind policy" in text
    row = next(line for line in text.splitlines() if "open-loop best" in line)
    for t in TS:
        y = results.open_loop[t]
        assert f"{y.success:.3f}±{y.stderr:.3f}" in row
    used = next(line for line in text.splitlines() if "base feedback use" in line)
    assert "0.25±0.02" in used and "nan±nan" in used


def test_the_pass1_panel_draws_the_yardstick(results, tmp_path, monkeypatch) -> None:
    drawn = []
    monkeypatch.setattr(plots.plt, "close", drawn.append)
    plots.curves(results.checkpoints, "t", tmp_path / "c.png", open_loop=results.open_loop)
    (figure,) = drawn
    first = figure.axes[0]  # K = 1
    (line,) = [x for x in first.lines if x.get_label() == "open-loop best"]
    assert list(line.get_ydata()) == [results.open_loop[t].success for t in TS]
    assert all(x.get_label() != "open-loop best" for ax in figure.axes[1:] for x in ax.lines)


def test_train_py_closing_lines() -> None:
    summary = {
        "open_loop": {"4": {"success": 0.0789, "stderr": 0.0085}},
        "base": {
            "4": {"success": 0.2, "feedback_use": 0.31, "feedback_use_sd": 0.02},
            "8": {"success": 0.3},
        },
        "trained": {
            "4": {"success": 0.35, "feedback_use": 0.02, "feedback_use_sd": 0.01},
            "8": {"success": "?"},
        },
    }
    lines = outputs.before_after(summary, "gridnav")
    assert len(lines) == 2 and "open-loop" in lines[0]
    assert (
        lines[1]
        == "  T= 4: 0.200 -> 0.350   open-loop 0.079 ± 0.009   feedback use 0.31±0.02 -> 0.02±0.01"
    )
    assert outputs.before_after({"base": {}}, "gridnav") == []  # no trained: no table
    old = {"base": {"4": {"success": 0.2}}, "trained": {"4": {"success": 0.5}}}
    assert outputs.before_after(old, "gridnav")[1] == "  T= 4: 0.200 -> 0.500"


def test_the_viewer_headline_reads_only_well_typed_values() -> None:
    y = yardsticks("guess", [4])[4]
    record = {"task": "guess", "budget": 4, "success": y.success, "stderr": 0.0,
              "sequence": y.sequence, "method": "exact", "train_success": y.success,
              "held_out": 0, "seconds": 0.0}  # fmt: skip
    samples = {
        "task": "guess",
        "open_loop": {"4": record},
        "stats": {
            "base": {"4": {"success": 0.05, "feedback_use": 0.4, "feedback_use_sd": 0.02}},
            "x<b>": "junk",
        },
    }
    line = viewer.reference(samples, 4)
    assert "wins <b>0.267</b> (exact) at T = 4" in line and "1 | 2 | 3 | 4" in line
    assert "base: success 0.050, feedback use 0.40 ± 0.02" in line and "x<b>" not in line
    for bad in ({**record, "success": "0.3"}, {**record, "budget": 6}, {**record, "task": "hilo"}):
        line = viewer.reference({**samples, "open_loop": {"4": bad}}, 4)
        assert "was not recorded" in line and "--budgets 4" in line
    nan = {"base": {"4": {"success": math.nan, "feedback_use": 0.1, "feedback_use_sd": 0.01}}}
    assert "base:" not in viewer.reference({**samples, "stats": nan}, 4)


def test_a_run_without_a_cache_dir_still_reports(tmp_path: Path, monkeypatch) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("a file where the cache directory would go")
    monkeypatch.setenv("MINIRL_CACHE", str(blocked))
    found = yardsticks("hilo", [3, 5])  # the cache cannot be written: computed, not an error
    assert found[3].success == pytest.approx(3 / 15) and found[5].success == pytest.approx(5 / 15)
