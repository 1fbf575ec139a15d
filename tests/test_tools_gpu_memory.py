"""The GPU memory estimate against the table it backs (the measured page, tutorials/measured.md)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hubstub import HUB_ID, QWEN_CONFIG, stub_hub_download


def test_measured_page_memory_estimates_for_qwen_on_a_gpu(tmp_path, monkeypatch) -> None:
    """The measured page's table is what minirl.tools.gpu_memory computes from a config."""
    from transformers import AutoConfig

    from minirl.tools.gpu_memory import estimate

    snapshot = stub_hub_download(tmp_path, monkeypatch)
    (snapshot / "config.json").write_text(json.dumps(QWEN_CONFIG))
    config = AutoConfig.from_pretrained(HUB_ID)
    readme = (Path(__file__).resolve().parents[1] / "tutorials" / "measured.md").read_text()
    row = (
        r"^\| [^|]+ \| (\d+) \| (\d+) \| [^|]+ \| (\d+) \| (\d+) \| (\d+) \| (yes|no) \| "
        r"([\d.]+) GiB \|$"
    )
    rows = re.findall(row, readme, re.M)
    assert len(rows) == 5
    for generations, groups, tokens, replies, micro, checkpointing, shown in rows:
        e = estimate(
            config,
            episodes=int(generations) * int(groups),
            tokens=int(tokens),
            reply_tokens=int(replies),
            micro_batch=int(micro),
            gradient_checkpointing=checkpointing == "yes",
        )
        assert f"{e.total_gib:.1f}" == shown
    defaults = {"episodes": 64, "tokens": 500, "reply_tokens": 96}
    laptop = estimate(config, **defaults, micro_batch=4, gradient_checkpointing=True)
    assert laptop.parameters == 494_032_768  # the model card's "0.49B (0.36B non-embedding)"
    assert laptop.total_gib < 5.0  # leaves room for the CUDA context on a 6 GB GPU
    # The README quotes this row for a laptop GPU.
    front = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    assert f"| {laptop.total_gib:.1f} GiB, **estimated**" in front
    # Only the micro-batch enters the training items: 4x the episodes leave them unchanged.
    more = estimate(
        config, **{**defaults, "episodes": 256}, micro_batch=4, gradient_checkpointing=True
    )
    assert more.activations_gib == laptop.activations_gib
    assert more.logits_gib == laptop.logits_gib
    assert more.rollout_gib == pytest.approx(4 * laptop.rollout_gib)
    # --generation_batch_size bounds the rollout too: then nothing grows with the episodes.
    chunked = [
        estimate(config, **{**defaults, "episodes": n}, micro_batch=4, generation_batch=8)
        for n in (8, 64, 256)
    ]
    assert chunked[0].total_gib == pytest.approx(chunked[2].total_gib)
    assert chunked[0].rollout_gib == pytest.approx(laptop.rollout_gib / 8)
    # Checkpointing keeps 1 vector per token and layer instead of ~14.
    plain = estimate(config, **defaults, micro_batch=4)
    assert 8 < plain.activations_gib / laptop.activations_gib < 16
