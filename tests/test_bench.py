"""`python -m minirl.bench` at toy size: every part is measured and the rollout paths agree."""

from __future__ import annotations

import json
import math

import pytest
import torch

from minirl import bench


def test_loglog_slope_recovers_a_power_law() -> None:
    ts = [2.0, 4.0, 8.0, 16.0]
    assert bench.loglog_slope(ts, [3 * t for t in ts]) == pytest.approx(1.0)
    assert bench.loglog_slope(ts, [0.5 * t**2 for t in ts]) == pytest.approx(2.0)
    assert math.isnan(bench.loglog_slope([4.0, 4.0], [1.0, 2.0]))


def test_bad_flags_are_one_line_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["--task", "chess"]) == 2
    assert "valid tasks are" in capsys.readouterr().err
    assert bench.main(["--backends", "minirl,jax"]) == 2
    assert bench.main(["--turns", ""]) == 2


def test_toy_bench_writes_every_measurement(tmp_path, monkeypatch) -> None:
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
            "--output", str(out),
        ]
    )  # fmt: skip
    assert code == 0
    results = json.loads((out / "bench.json").read_text())
    assert (out / "bench_rollout.png").stat().st_size > 10_000
    rows = results["rollouts"]["rows"]
    assert [r["T"] for r in rows] == [2, 6]
    for row in rows:
        # Same seed, same episodes: the cache is an optimisation, not a different sampler.
        assert row["identical_episodes"] == 1.0
        assert row["max_logprob_diff"] < 1e-4
        # The barely trained base plays (nearly) every turn, so T really is the episode length.
        assert row["cached"]["turns_played"] >= 0.8 * row["T"]
    # Prompt work: the simple path re-reads the history, so it grows faster than the cached one.
    long = rows[-1]
    assert long["cached"]["tokens_fed"] < long["simple"]["tokens_fed"] / 1.5
    growth = {p: rows[1][p]["tokens_fed"] / rows[0][p]["tokens_fed"] for p in ("cached", "simple")}
    assert growth["simple"] > growth["cached"]
    assert set(results["rollouts"]["slope"]) == {"cached", "simple"}
    assert results["batching"]["episodes"] == 6 and results["batching"]["speedup"] > 0
    fwd = results["training_forward"]
    assert fwd["bucketed"]["padding_fraction"] <= fwd["single_pass"]["padding_fraction"]
    steps = results["train_steps"]
    assert steps["minirl"]["steps_timed"] == steps["trl"]["steps_timed"] == 1
    assert steps["trl_over_minirl"] > 0
    roof = results["roofline"]
    assert 0 < roof["flops_fraction"] < 1 and 0 < roof["bandwidth_fraction"] < 1
    assert results["peak_memory_mb"] > 100


def test_flop_count_uses_every_base_weight_once(quick_policy) -> None:
    model, _ = quick_policy
    c = model.config
    per_layer = 4 * c.hidden_size**2 + 3 * c.hidden_size * c.intermediate_size  # attn + MLP
    expected = c.num_hidden_layers * per_layer + c.hidden_size * c.vocab_size  # + lm_head
    shape = bench.model_shape(model)
    assert shape["linear_weights"] == expected
    count = bench.ForwardCount()
    hook = bench.count_forwards(model, count, shape)
    try:
        ids = torch.ones(3, 5, dtype=torch.long)
        model(input_ids=ids, attention_mask=torch.ones_like(ids))
    finally:
        hook.remove()
    attention = 4 * c.num_hidden_layers * c.hidden_size * 3 * 5 * 5
    assert (count.calls, count.tokens) == (1, 15)
    assert count.flops == 2 * expected * 15 + attention
