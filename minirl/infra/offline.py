"""Offline means offline: a minirl run reaches for the network only for a hub model it is given.

`--model tiny`, `smollm2` and local directories load from disk, and a name that is neither a
directory nor a hub id `owner/name` is refused before anything is asked (minirl.models).

One lookup used to happen anyway, and this module stops it. On CPUs with AVX512-BF16, importing
bitsandbytes asks the Hugging Face Hub for an optional CPU kernel,
`kernels-community/quantization-bitsandbytes`, through the `kernels` package (a dependency of
transformers since 5.x). Online that is a request on every run; with HF_HUB_OFFLINE=1, as offline
classrooms set it, `kernels` prints "Skipping publisher trust check ..." on every run, which
turns each one-line error into two. The kernel would only speed up bitsandbytes' packed-weight
inference path, which minirl switches off because it has no gradient
(minirl.models.keep_4bit_weights_differentiable), and `kernels` has no setting to skip the lookup.

So `install()`, called by minirl/__init__.py before anything imports bitsandbytes, adds an import
hook: while the module that does the lookup (`bitsandbytes.backends.cpu.ops`) executes,
`kernels.get_kernel` raises ImportError, and bitsandbytes falls back to its built-in CPU kernels,
exactly as it does when `kernels` is not installed (it logs a warning, which minirl/__init__.py
keeps quiet). Nothing else changes, and a bitsandbytes imported before minirl has already looked.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Iterator, Sequence
from types import ModuleType

LOOKS_UP_KERNELS = "bitsandbytes.backends.cpu.ops"


def refuse(repo_id: str, *args: object, **kwargs: object) -> ModuleType:
    raise ImportError(f"{repo_id}: minirl does not download hub kernels")


@contextlib.contextmanager
def no_hub_kernels() -> Iterator[None]:
    """While active, `kernels.get_kernel` raises instead of asking the Hugging Face Hub."""
    try:
        import kernels
    except ImportError:  # nothing to stop
        yield
        return
    real = kernels.get_kernel
    kernels.get_kernel = refuse
    try:
        yield
    finally:
        kernels.get_kernel = real


class KernelFreeLoader(importlib.abc.Loader):
    """Runs a module's own loader inside `no_hub_kernels`."""

    def __init__(self, loader: importlib.abc.Loader) -> None:
        self.loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        with no_hub_kernels():
            self.loader.exec_module(module)


class NoHubKernels(importlib.abc.MetaPathFinder):
    """Finds bitsandbytes' CPU backend as usual, and loads it with `KernelFreeLoader`."""

    def find_spec(
        self, name: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if name != LOOKS_UP_KERNELS:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = KernelFreeLoader(spec.loader)
        return spec


def install() -> None:
    if not any(isinstance(finder, NoHubKernels) for finder in sys.meta_path):
        sys.meta_path.insert(0, NoHubKernels())
