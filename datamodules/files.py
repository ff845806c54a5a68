"""Files written whole or not at all: :func:`atomic_write`, used for every file that a
reader, or a run resumed after a crash, must never find half-written (cache entries,
population and ensemble files, metrics)."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from pathlib import Path


def temporary_name(path: Path) -> Path:
    """``.<name>.tmp-<host>-<pid>`` beside ``path``: one per process and machine, so that writers
    of the same entry (DDP ranks, on one node or several sharing a file system) never share one,
    and a later process can tell a dead writer's file (:func:`dead_writer`)."""
    return path.with_name(f".{path.name}.tmp-{socket.gethostname()}-{os.getpid()}")


def dead_writer(tmp: Path) -> bool:
    """Whether temporary file ``tmp`` (``.<name>.tmp-[<host>-]<pid>``) is a dead process's of this
    host: only those may be removed, as another process's may still be at work."""
    owner = tmp.name.rsplit(".tmp-", 1)[1]
    host, _, pid = owner.rpartition("-")
    if (host and host != socket.gethostname()) or not pid.isdigit():
        return False  # another machine's writer (on a shared file system) may still be at work
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def atomic_write(path: Path, write: Callable[[Path], object]) -> None:
    """``write(temporary)``, then move the temporary file onto ``path`` with ``os.replace``.

    ``os.replace`` within one file system is atomic (POSIX ``rename``): ``path`` holds the
    old file or the whole new one, never a part. The temporary file is :func:`temporary_name`
    (beside ``path``, so on the same file system) and is removed if ``write`` fails."""
    tmp = temporary_name(path)
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
