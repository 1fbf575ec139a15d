"""Offline means offline: importing minirl's stack asks the network for nothing
(minirl.infra.offline).

The lookup it stops happens only on CPUs with AVX512-BF16, where bitsandbytes' CPU backend asks
the Hugging Face Hub for a kernel while it is imported. This machine may lack the instruction set,
so the child process below makes bitsandbytes believe it has it (by patching
`has_avx512bf16` as bitsandbytes.functional finishes loading), cuts the network off, and counts
what reaches `kernels.get_kernel` and the network. Without minirl's hook the same child shows
the red-team symptom, which proves the test can see it: the lookup happens, and with
HF_HUB_OFFLINE=1 `kernels` prints "Skipping publisher trust check ..." on stderr.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

CHILD = r"""
import importlib.abc, importlib.machinery, json, socket, sys

network = []
def refuse(*args, **kwargs):
    network.append(repr(args[:2]))
    raise OSError("network cut off")
socket.getaddrinfo = refuse
socket.socket.connect = refuse

class PretendAVX512BF16(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "bitsandbytes.functional":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        load = spec.loader.exec_module
        def exec_module(module):
            load(module)
            module.has_avx512bf16 = lambda: True
        spec.loader.exec_module = exec_module
        return spec

sys.meta_path.insert(0, PretendAVX512BF16())
if sys.argv[1] == "with-minirl":
    import minirl
import kernels
asked = []
real = kernels.get_kernel
def spy(repo_id, *args, **kwargs):
    asked.append(repo_id)
    return real(repo_id, *args, **kwargs)
kernels.get_kernel = spy
import bitsandbytes.backends.cpu.ops as ops
import peft, transformers  # the rest of what a run imports
print(json.dumps({"avx512bf16": ops.has_avx512bf16(), "asked": asked, "network": network}))
"""


def import_stack(mode: str, offline: str) -> tuple[dict, str]:
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    if offline:
        env["HF_HUB_OFFLINE"] = offline
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, mode],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


@pytest.mark.parametrize("offline", ["", "1"], ids=["online", "HF_HUB_OFFLINE=1"])
def test_minirl_stops_bitsandbytes_hub_kernel_lookup(offline: str) -> None:
    seen, stderr = import_stack("with-minirl", offline)
    assert seen == {"avx512bf16": True, "asked": [], "network": []}
    assert stderr == ""


def test_without_minirl_the_lookup_happens_and_offline_it_prints_a_line() -> None:
    seen, stderr = import_stack("without-minirl", "1")
    assert seen["avx512bf16"] and seen["asked"] == ["kernels-community/quantization-bitsandbytes"]
    assert "Skipping publisher trust check for 'kernels-community/quantization-bitsandbytes'" in (
        stderr
    )
