"""--init_adapter: a run that starts from an earlier run's adapter (a curriculum, task after task).

Checked: the run really starts from those weights (not from fresh adapters, whose lora_B is 0);
an adapter of another rank or alpha, a missing directory, a config whose rank is not a number and
weights that are not finite are each refused in one line before the base model loads, on both
backends.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from test_checkpoint import ADAPTER, refuse_model_loading, small_config

import minirl.trainer
import minirl.trl_backend
from minirl.infra.errors import CheckpointError
from minirl.trainer import train
from minirl.trl_backend import train_trl


@pytest.fixture(scope="module")
def first_run(quick_tiny_path: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-step run at a large learning rate, so its adapter is far from a fresh one."""
    run = tmp_path_factory.mktemp("init") / "first"
    train(small_config(quick_tiny_path, run, 2, learning_rate=1e-2), progress=False)
    return run / "checkpoint-2"


@pytest.mark.parametrize("backend", ["minirl", "trl"])
def test_the_run_starts_from_the_adapter_it_is_given(
    backend: str, first_run: Path, quick_tiny_path: str, tmp_path: Path
) -> None:
    start = load_file(first_run / ADAPTER)
    lora_b = [v for k, v in start.items() if "lora_B" in k]
    # Fresh adapters start with lora_B = 0 (peft); the first run's moved by about its rate.
    assert lora_b and max(float(v.abs().max()) for v in lora_b) > 1e-3
    # One step at a rate so small that AdamW (which moves a weight by about the rate) leaves
    # every weight where it started: the run's adapter is then its starting adapter.
    out = tmp_path / "second"
    cfg = small_config(quick_tiny_path, out, 1, learning_rate=1e-12, backend=backend)
    cfg.task.reward_mode = "outcome"  # the TRL backend's only mode
    cfg.model.init_adapter = str(first_run)
    (train if backend == "minirl" else train_trl)(cfg, progress=False)
    # minirl writes checkpoint-1/; TRL's trainer leaves the final adapter in the run directory.
    after = load_file((out / "checkpoint-1" if backend == "minirl" else out) / ADAPTER)
    assert after.keys() == start.keys()
    for key, value in start.items():
        torch.testing.assert_close(after[key], value, rtol=0, atol=1e-9)


def bad_copy(first_run: Path, tmp_path: Path, config: dict | None = None) -> Path:
    """A copy of the first run's adapter, its adapter_config.json updated with `config`."""
    bad = tmp_path / "bad"
    bad.mkdir()
    save_file(load_file(first_run / ADAPTER), str(bad / ADAPTER))
    conf = json.loads((first_run / "adapter_config.json").read_text())
    (bad / "adapter_config.json").write_text(json.dumps({**conf, **(config or {})}))
    return bad


@pytest.mark.parametrize("backend", ["minirl", "trl"])
def test_bad_adapters_are_refused_before_the_model_loads(
    backend: str,
    first_run: Path,
    quick_tiny_path: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    refuse_model_loading(monkeypatch)
    monkeypatch.setattr(minirl.trl_backend, "load_policy", minirl.trainer.load_policy)
    run = train if backend == "minirl" else train_trl

    def refused(adapter: Path | str, match: str, **model: int) -> None:
        cfg = small_config(quick_tiny_path, tmp_path / f"run{len(list(tmp_path.iterdir()))}", 1)
        cfg.grpo.backend = backend  # type: ignore[assignment]
        cfg.task.reward_mode = "outcome"  # the TRL backend's only mode
        cfg.model.init_adapter = str(adapter)
        for name, value in model.items():
            setattr(cfg.model, name, value)
        with pytest.raises(CheckpointError, match=match) as err:
            run(cfg, progress=False)
        assert "\n" not in str(err.value)

    refused(tmp_path / "nowhere", "no such directory")
    refused(first_run, r"trained with r 16, this run has --lora_r 8: pass --lora_r 16", lora_r=8)
    refused(
        first_run, r"lora_alpha 32, this run has --lora_alpha 4: pass --lora_alpha 32", lora_alpha=4
    )
    # A planted config: the value is quoted and cut, never shown as it came.
    planted = bad_copy(first_run, tmp_path, {"r": "16<script>"})
    refused(planted, r"has no usable 'r' \('16<script>'\)")
    nan = tmp_path / "nan"
    nan.mkdir()
    weights = load_file(first_run / ADAPTER)
    weights[next(iter(weights))][0] = float("nan")
    save_file(weights, str(nan / ADAPTER))
    (nan / "adapter_config.json").write_text((first_run / "adapter_config.json").read_text())
    refused(nan, "unusable weights")
