"""Files written whole or not at all: :func:`atomic_write`, used for every file that a
reader, or a run resumed after a crash, must never find half-written (cache entries,
population and ensemble files, metrics)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path


def atomic_write(path: Path, write: Callable[[Path], object]) -> None:
    """``write(temporary)``, then move the temporary file onto ``path`` with ``os.replace``.

    ``os.replace`` within one file system is atomic (POSIX ``rename``): ``path`` holds the
    old file or the whole new one, never a part. The temporary file is ``.<name>.tmp-<pid>``
    beside ``path`` (the same file system; one per process, so processes writing the same
    entry, such as DDP ranks, never share one) and is removed if ``write`` fails."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
