"""The GPU memory estimate against the README table it backs."""

from __future__ import annotations

import json
import re
from pathlib import Path

from hubstub import HUB_ID, QWEN_CONFIG, stub_hub_download


def test_readme_memory_estimates_for_qwen_on_a_gpu(tmp_path, monkeypatch) -> None:
    """The README's table is what minirl.tools.gpu_memory computes from a config (estimates)."""
    from transformers import AutoConfig

    from minirl.tools.gpu_memory import estimate

    snapshot = stub_hub_download(tmp_path, monkeypatch)
    (snapshot / "config.json").write_text(json.dumps(QWEN_CONFIG))
    config = AutoConfig.from_pretrained(HUB_ID)
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    row = r"^\| [^|]+ \| (\d+) \| (\d+) \| [^|]+ \| (\d+) \| ([\d.]+) GiB \|$"
    rows = re.findall(row, readme, re.M)
    assert len(rows) == 4
    for generations, groups, tokens, shown in rows:
        e = estimate(config, episodes=int(generations) * int(groups), tokens=int(tokens))
        assert f"{e.total_gib:.1f}" == shown
    laptop = estimate(config, episodes=4, tokens=300)
    assert laptop.parameters == 494_032_768  # the model card's "0.49B (0.36B non-embedding)"
    assert laptop.total_gib < 7.5  # leaves room for the CUDA context on an 8 GB GPU
    assert laptop.base_gib < 1.0 and laptop.logits_gib > laptop.base_gib
