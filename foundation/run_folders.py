"""A run folder belongs to one process: :func:`new_folder` makes one and :func:`hold` takes an
existing one (``--resume``), each under an exclusive lock on ``<folder>/.lock`` kept until the
process ends (or :func:`release`). A second process on a held folder stops with one line naming
the folder and the holder's pid.

The lock is ``fcntl.flock`` rather than the ``filelock`` package: it needs no dependency, the
kernel releases it when its process dies however it dies (kill -9 included), so a lock left by a
killed run never blocks its ``--resume``, and the lock file can hold the holder's pid for the
message (``filelock`` uses ``flock`` underneath too, but keeps nothing in its file). A new folder
is made under a temporary name, locked, given its pid and only then renamed into place: it is
never visible unlocked, so two processes that both found the name free cannot both use it.

Work designed to be shared between processes (ROAR's grid folder, shards and ranking passes,
DDP ranks of one run) takes no lock here: only the launching process (rank 0) holds a run folder.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import time
from pathlib import Path

from pytorch_lightning.plugins.environments import SLURMEnvironment, TorchElasticEnvironment

from foundation.errors import DiskFull, InputError, disk_full_in
from foundation.files import temporary_name

LOCK = ".lock"
_held: dict[Path, int] = {}  # a folder (resolved) -> the open lock file's descriptor, held by this process
WAIT_S = 0.5  # how long a lock attempt retries: another process may hold it for a moment (a probe, a pid write)


def launched_rank() -> tuple[int, int]:
    """(rank, world size) of this process as the Trainer will see them, read before the process
    group exists: Lightning's own detection of torchrun and SLURM's srun; (0, 1) alone."""
    for environment in (TorchElasticEnvironment, SLURMEnvironment):
        if environment.detect():
            found = environment()
            return found.global_rank(), max(found.world_size(), 1)
    return 0, 1


def launching_process() -> bool:
    """Whether this process is the one that holds run folders: rank 0 of torchrun or SLURM, and
    not a process that Lightning's DDP launcher started (``LOCAL_RANK`` other than 0)."""
    return launched_rank()[0] == 0 and os.environ.get("LOCAL_RANK", "0") == "0"


def _try_lock(fd: int, wait_s: float = WAIT_S) -> bool:
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)


def _holder(folder: Path) -> str:
    try:
        pid = (folder / LOCK).read_text().split()
    except OSError:
        pid = []
    return f"process {pid[0]}" if pid else "another process"


def in_use(folder: Path) -> InputError:
    return InputError(f"{folder}: in use by {_holder(folder)}, which holds {folder / LOCK}; wait for it to "
                      "finish (or stop it), then resume or choose another folder")  # fmt: skip


def _lock(folder: Path) -> int:
    """Lock ``folder/.lock`` (made if missing) for this process and write its pid there; the open
    descriptor, or an ``InputError`` naming the holder."""
    fd = os.open(folder / LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    if not _try_lock(fd):
        os.close(fd)
        raise in_use(folder)
    record = f"{os.getpid():<10}\n".encode()  # one width: rewritten in place, needing no new disk block
    try:
        os.pwrite(fd, record, 0)
    except OSError as err:
        os.close(fd)
        raise DiskFull(folder, len(record)) if err.errno in (errno.ENOSPC, errno.EDQUOT) else err
    return fd


def hold(folder: Path) -> Path:
    """Lock the existing ``folder`` for this process (a no-op where it already does)."""
    key = Path(folder).resolve()
    if key not in _held:
        _held[key] = _lock(key)
    return Path(folder)


def release(folder: Path) -> None:
    """Give up this process's lock on ``folder``, if it holds one (the lock file stays: removing
    it could let two processes lock two different files of the same name)."""
    fd = _held.pop(Path(folder).resolve(), None)
    if fd is not None:
        os.close(fd)


def _free(folder: Path) -> bool:
    """Whether no process holds existing ``folder``: a lock attempt that is given up at once."""
    if not (folder / LOCK).exists():
        return True
    fd = os.open(folder / LOCK, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if _try_lock(fd):
            return True
    finally:
        os.close(fd)
    return False


def new_folder(path: Path, stop_if_in_use: bool = False) -> Path:
    """Make and hold ``path``, or ``path-2``, ``path-3``, ...: the first name free, so earlier
    runs are never overwritten. ``stop_if_in_use``: a name the user chose (``--run_name``) held
    by a live process is an error naming it and its pid (the same command started twice), not a
    reason to move on."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = temporary_name(path)
    try:
        staging.mkdir()
        fd = _lock(staging)  # nobody else knows the staging name: never held
    except BaseException as err:
        shutil.rmtree(staging, ignore_errors=True)
        if disk_full_in(err) is not None:
            raise DiskFull(path.parent) from err  # the folder the user knows, not the staging name
        raise
    try:
        candidate, suffix = path, 1
        while True:
            try:
                os.rename(staging, candidate)  # atomic; fails where candidate holds anything
                break
            except OSError as err:
                if err.errno not in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR):
                    raise
            if stop_if_in_use and not _free(candidate):  # made by new_folder: locked before it was visible
                raise in_use(candidate)
            suffix += 1
            candidate = path.with_name(f"{path.name}-{suffix}")
    except BaseException:
        os.close(fd)
        shutil.rmtree(staging, ignore_errors=True)
        raise
    _held[candidate.resolve()] = fd
    return candidate


def claim_run_folder(path: Path, resume: bool, named: bool) -> tuple[Path, list[Path]]:
    """train.py's run folder for ``path`` and the folders this process made for it, innermost
    first (removed again if the run fails before training): ``path`` itself held for a resume,
    else a :func:`new_folder` (``named``: the user chose the name). A process other than the
    launching one (:func:`launching_process`, a DDP rank) shares ``path`` and holds nothing."""
    path = Path(path)
    if not launching_process():
        return path, []
    if resume:
        return hold(path), []
    made = [p for p in path.parents if not p.exists()]
    folder = new_folder(path, stop_if_in_use=named)
    return folder, [folder, *made]
