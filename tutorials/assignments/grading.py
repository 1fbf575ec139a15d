"""Pick what the graders test: your file, or (MINIRL_REFERENCE=1) the reference implementation."""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable


def implementation(module: str, name: str) -> Callable:
    """`name` from your `module` (e.g. a1_advantages), or from reference.py when asked for."""
    source = "reference" if os.environ.get("MINIRL_REFERENCE") == "1" else module
    return getattr(importlib.import_module(source), name)
