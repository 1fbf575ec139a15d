"""`python -m minirl.tools.bench` at toy size: every part measured, the rollout paths agree."""

from __future__ import annotations

import json

import pytest

from minirl.tools import bench


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--task", "chess"], "valid tasks are"),
        (["--backends", "minirl,jax"], "valid backends are minirl, trl"),
        (["--turns", ""], "--turns is empty"),
        (["--turns", "1-1000"], "--turns '1-1000': values must be <= 100"),
        (["--episodes", "0"], "--episodes must be in [1, 100000], got 0"),
        (["--seed", "-1"], "--seed must be in [0, 4294967295], got -1"),
        (["--quant", "int8"], "argument --quant: invalid choice: 'int8'"),
        (["--no_such_flag", "1"], "--no_such_flag"),
        # The memory part's flags are checked before anything runs.
        (["--memory_episodes", "6"], "multiple of --num_generations 4"),
        (["--memory_flags", "--budget_min 9 --budget_max 2"], "--budget_min (9) must be <="),
    ],
)
def test_bad_flags_are_one_line_errors(flags, words, capsys: pytest.CaptureFixture[str]) -> None:
    try:
        code = bench.main(flags)
    except SystemExit as exc:  # argparse's errors
        code = exc.code
    lines = capsys.readouterr().err.splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("minirl.tools.bench: error: ")
    assert words in lines[0], lines


def test_toy_bench_writes_every_measurement(tmp_path, monkeypatch, quick_tiny_path) -> None:
    monkeypatch.setenv("MINIRL_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "bench"
    code = bench.main(
        [
            "--turns", "2,6",
            "--episodes", "6",
            "--naive_budget", "2",
            "--tasks_per_step", "2",
            "--num_generations", "2",
            "--per_device_train_batch_size", "2",
            "--train_steps", "1",
            "--memory_model", quick_tiny_path,
            "--memory_episodes", "2,4",
            "--memory_flags", "--mode fixed --budget 2 --num_generations 2 "
            "--per_device_train_batch_size 2",
            "--engine_models", quick_tiny_path,
            "--engine_steps", "1",
            "--output", str(out),
        ]
    )  # fmt: skip
    assert code == 0
    results = json.loads((out / "bench.json").read_text())
    assert (out / "bench_rollout.png").stat().st_size > 10_000
    rows = results["rollouts"]["rows"]
    assert [r["T"] for r in rows] == [2, 6]
    for row in rows:
        # Same seed, same episodes: the cache and the dense engine are optimisations, not
        # different samplers.
        assert row["identical_episodes"] == 1.0 == row["engine"]["identical_episodes"]
        assert row["max_logprob_diff"] < 1e-4 and row["engine"]["max_logprob_diff"] < 1e-4
        assert row["dense"]["tokens_fed"] <= row["cached"]["tokens_fed"]
        # The barely trained base plays (nearly) every turn, so T really is the episode length.
        assert row["cached"]["turns_played"] >= 0.8 * row["T"]
    # Prompt work: the simple path re-reads the history, so it grows faster than the cached one.
    long = rows[-1]
    assert long["cached"]["tokens_fed"] < long["simple"]["tokens_fed"] / 1.5
    growth = {p: rows[1][p]["tokens_fed"] / rows[0][p]["tokens_fed"] for p in ("cached", "simple")}
    assert growth["simple"] > growth["cached"]
    assert set(results["rollouts"]["slope"]) == {"cached", "simple", "dense"}
    (engine_row,) = results["engine"]["rows"]
    assert engine_row["steps_per_path"] == 1
    assert engine_row["step_speedup"] > 0 and engine_row["rollout_speedup"] > 0
    assert engine_row["dense"]["generated_tokens_per_s"] > 0
    assert results["batching"]["episodes"] == 6 and results["batching"]["speedup"] > 0
    fwd = results["training_forward"]
    assert fwd["bucketed"]["padding_fraction"] <= fwd["single_pass"]["padding_fraction"]
    steps = results["train_steps"]
    assert steps["minirl"]["steps_timed"] == steps["trl"]["steps_timed"] == 1
    assert steps["trl_over_minirl"] > 0
    memory = results["memory"]
    assert [(r["backend"], r["episodes"]) for r in memory["rows"]] == [
        ("minirl", 2),
        ("minirl", 4),
        ("trl", 2),
        ("trl", 4),
    ]
    for row in memory["rows"]:
        assert row["peak_mb"] >= row["loaded_mb"] > 100 and row["seconds"] > 0
    for backend, growth in memory["growth"].items():
        rows = [r["peak_mb"] for r in memory["rows"] if r["backend"] == backend]
        assert growth == rows[-1] / rows[0]
    for key in ("roofline", "roofline_dense"):
        roof = results[key]
        assert 0 < roof["flops_fraction"] < 1 and 0 < roof["bandwidth_fraction"] < 1
    assert results["peak_memory_mb"] > 100
