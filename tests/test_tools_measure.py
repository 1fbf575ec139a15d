"""What the benchmark measures with: the power-law fit and the FLOP count, against hand counts."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from minirl.tools import measure


def test_loglog_slope_recovers_a_power_law() -> None:
    ts = [2.0, 4.0, 8.0, 16.0]
    assert measure.loglog_slope(ts, [3 * t for t in ts]) == pytest.approx(1.0)
    assert measure.loglog_slope(ts, [0.5 * t**2 for t in ts]) == pytest.approx(2.0)
    assert math.isnan(measure.loglog_slope([4.0, 4.0], [1.0, 2.0]))


def test_flop_count_uses_every_base_weight_once(quick_policy) -> None:
    model, _ = quick_policy
    c = model.config
    per_layer = 4 * c.hidden_size**2 + 3 * c.hidden_size * c.intermediate_size  # attn + MLP
    expected = c.num_hidden_layers * per_layer + c.hidden_size * c.vocab_size  # + lm_head
    shape = measure.model_shape(model)
    assert shape["linear_weights"] == expected
    count = measure.ForwardCount()
    hook = measure.count_forwards(model, count, shape)
    try:
        ids = torch.ones(3, 5, dtype=torch.long)
        model(input_ids=ids, attention_mask=torch.ones_like(ids))
    finally:
        hook.remove()
    attention = 4 * c.num_hidden_layers * c.hidden_size * 3 * 5 * 5
    assert (count.calls, count.tokens) == (1, 15)
    assert count.flops == 2 * expected * 15 + attention


# In a fresh process: in this one, earlier tests leave freed heap that a new tensor would reuse
# without raising the resident set, so the allocations below would not move the peak.
RESET_CHECK = """
import torch
from minirl.tools.measure import peak_memory_mb, reset_peak_memory
big = torch.ones(64 * 2**20)  # 256 MiB, mmap'd, so freeing it returns it to the system
del big
before = peak_memory_mb()
reset_peak_memory()
after = peak_memory_mb()
small = torch.ones(16 * 2**20)  # 64 MiB: the new peak sees it
print(before, after, peak_memory_mb())
"""


@pytest.mark.skipif(
    torch.cuda.is_available() or not Path("/proc/self/clear_refs").exists(),
    reason="the CPU high-water-mark reset is Linux's",
)
def test_reset_peak_memory_forgets_an_earlier_peak() -> None:
    """A step's peak must not be hidden under the larger peak of loading the model before it."""
    done = subprocess.run(
        [sys.executable, "-c", RESET_CHECK], capture_output=True, text=True, check=True
    )
    before, after, grown = map(float, done.stdout.split())
    assert before - after > 200, (before, after)
    assert grown - after > 50, (after, grown)
