"""Where minirl keeps the base models it builds, and how it writes them without ever half-writing.

The embedded `tiny` base (minirl.tiny) and the converted `smollm2` checkpoint (minirl.infra.smollm2)
are built once and then loaded like any hub checkpoint from `cache_root()/<name>-<hash>`. A build
can take minutes, and a killed build must not leave a directory that later loads as a broken model,
so each is written into a temporary sibling and renamed into place: `os.replace` of a directory is
atomic on one filesystem, so the target either does not exist or is complete. Two processes that
need the same missing model at once (two runs started together, the test suite's two workers)
take turns on a lock file beside it (`build_lock`), so the second waits for the first build and
finds it done instead of repeating it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock


def cache_root() -> Path:
    """`$MINIRL_CACHE`, else `$XDG_CACHE_HOME/minirl`, else `~/.cache/minirl`."""
    if os.environ.get("MINIRL_CACHE"):
        return Path(os.environ["MINIRL_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "minirl"


def write_directory_atomically(target: Path, write: Callable[[Path], None]) -> None:
    """Call `write(tmp)` on a fresh temporary sibling of `target`, then rename it to `target`."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
    try:
        write(tmp)
        os.replace(tmp, target)
    except OSError:
        # Another process finished the same build first (the rename found a full directory):
        # keep theirs. Any other failure is re-raised below after cleaning up.
        shutil.rmtree(tmp, ignore_errors=True)
        if not target.is_dir():
            raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


@contextmanager
def build_lock(target: Path) -> Iterator[None]:
    """Hold `<target>.lock` while checking whether `target` exists and building it if not.

    filelock rather than fcntl by hand: the same lock works on Windows laptops. The lock file is
    left behind (removing it while another process waits on it would break the lock).
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(f"{target}.lock"):
        yield
