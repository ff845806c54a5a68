"""Files written whole or not at all: :func:`atomic_write` (and :func:`atomic_open`,
:func:`write_text`, :func:`write_bytes`, :func:`save_figure` on it), used for every file the project writes, so
that a reader, or a run resumed after a crash, a kill -9 or a full disk, finds the previous
complete file or the whole new one, never a part (checkpoints: ``lightning_modules.checkpoint_io``).
Out of disk space, a write raises ``foundation.errors.DiskFull`` naming the folder and the
bytes the write needed where known, which entry points end with on one line. Results files stay
valid JSON: :func:`json_text` and :func:`write_json` (``null`` for a number that is not finite, and why).
A YAML file is read by :func:`read_yaml`, which names the file and line of a problem."""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import re
import shutil
import socket
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import IO

import yaml

from foundation.errors import DiskFull, InputError, disk_full_in


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


def atomic_write(path: Path, write: Callable[[Path], object], size: int | None = None) -> None:
    """``write(temporary)``, flush it to the disk (fsync), then move the temporary file onto
    ``path`` with ``os.replace`` and flush the folder's entry.

    ``os.replace`` within one file system is atomic (POSIX ``rename``): ``path`` holds the
    old file or the whole new one, never a part, also after a crash of the machine (the fsyncs).
    The temporary file is :func:`temporary_name` (beside ``path``, so on the same file system)
    and is removed if ``write`` fails. Out of space (:func:`out_of_space`): ``DiskFull`` naming
    the folder and ``size`` (the bytes to write, where the caller knows them)."""
    with _replacing(Path(path), size) as tmp:
        write(tmp)


@contextlib.contextmanager
def atomic_open(path: Path, mode: str = "w", **options) -> Iterator[IO]:
    """``open(path, mode, **options)`` for writing (e.g. a ``csv.writer``'s file), atomically as
    :func:`atomic_write`: ``path`` changes once the ``with`` block ends without an error."""
    with _replacing(Path(path)) as tmp, open(tmp, mode, **options) as handle:
        yield handle


@contextlib.contextmanager
def _replacing(path: Path, size: int | None = None) -> Iterator[Path]:
    """The temporary file to write, moved onto ``path`` once the block ends (:func:`atomic_write`)."""
    tmp = temporary_name(path)
    try:
        yield tmp
        fsync(tmp)
        os.replace(tmp, path)
        fsync(path.parent)
    except Exception as err:
        if out_of_space(err, path.parent):
            written = tmp.stat().st_size if tmp.exists() else 0
            raise DiskFull(path.parent, size, written) from err
        raise
    finally:
        tmp.unlink(missing_ok=True)


def write_text(path: Path, text: str) -> None:
    """``path.write_text(text)``, atomically (:func:`atomic_write`)."""
    write_bytes(path, text.encode())


def write_bytes(path: Path, data: bytes) -> None:
    """``path.write_bytes(data)``, atomically (:func:`atomic_write`; its size is known when out of space)."""
    atomic_write(path, lambda tmp: tmp.write_bytes(data), size=len(data))


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend (figures drawn for files, no display needed),
    imported when a figure is first drawn, so that a module writing figures loads matplotlib only then."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: Path, layout: bool = True, **options) -> None:
    """A finished matplotlib figure written and let go: ``fig.tight_layout()`` (unless ``layout``
    is False: a figure laid out by hand), ``fig.savefig(path, **options)`` atomically
    (:func:`atomic_write`; the format is the suffix's), then the figure closed (pyplot keeps
    every figure it made until it is closed)."""
    import matplotlib.pyplot as plt  # loaded by whoever made ``fig``; not by the modules that import this one

    path = Path(path)
    try:
        if layout:
            fig.tight_layout()
        atomic_write(path, lambda tmp: fig.savefig(tmp, format=path.suffix.lstrip("."), **options))
    finally:
        plt.close(fig)


def fsync(path: Path) -> None:
    """Flush ``path`` (a file or a folder's entries) to the disk; a file system that cannot sync a
    folder (EINVAL) is left as it is."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as err:
        if err.errno not in (errno.EINVAL, errno.EBADF):
            raise
    finally:
        os.close(fd)


FULL_BELOW = 1 << 20  # a folder with less free space than this (1 MiB) is full for a write that failed there


def out_of_space(err: BaseException, folder: Path) -> bool:
    """Whether a write into ``folder`` failed for want of space: an ``OSError`` ENOSPC or EDQUOT behind
    ``err``, or a ``RuntimeError`` of a writer that names no errno (torch's C++ writers: "basic_ios::clear",
    "PytorchStreamWriter failed writing file") while ``folder``'s file system has under 1 MiB free."""
    if disk_full_in(err) is not None:
        return True
    return isinstance(err, RuntimeError) and shutil.disk_usage(folder).free < FULL_BELOW


UNDEFINED = "undefined"  # the top-level key of a JSON file that lists its undefined numbers and why


def json_text(payload, reasons: Mapping[str, str] | None = None, **options) -> str:
    """``payload`` as JSON that any strict reader parses (``allow_nan=False``): a float that is NaN or
    ±inf is written as ``null``, and the top-level mapping gains ``"undefined"``: each such number's
    place (``"a.b[2]"``) and why it is undefined, ``reasons``'s entry for that place or for its key
    (``"test_acc_std": "one member"``), else what it was ("NaN (... no reason recorded)"). A payload
    whose numbers are all finite is written as ``json.dumps`` writes it. ``options``: ``json.dumps``'s
    (``indent``, ``sort_keys``)."""
    reasons, undefined = reasons or {}, {}

    def clean(value, place: str):
        if isinstance(value, float) and not math.isfinite(value):
            key = re.sub(r"(\[\d+\])+$", "", place).rpartition(".")[2]
            undefined[place] = (reasons.get(place) or reasons.get(key)
                                or f"{'NaN' if math.isnan(value) else value} (not a finite number; no reason recorded)")
            return None
        if isinstance(value, Mapping):
            return {k: clean(v, f"{place}.{k}" if place else str(k)) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [clean(v, f"{place}[{i}]") for i, v in enumerate(value)]
        return value

    cleaned = clean(payload, "")
    if undefined:
        if not isinstance(cleaned, dict) or UNDEFINED in cleaned:
            raise ValueError(f"NaN or ±inf at {sorted(undefined)}, and the payload is no mapping free of an "
                             f"{UNDEFINED!r} key, where to say why")  # fmt: skip
        cleaned[UNDEFINED] = undefined
    return json.dumps(cleaned, allow_nan=False, **options)


def write_json(path: Path, payload, reasons: Mapping[str, str] | None = None, indent: int | None = 2,
               sort_keys: bool = False) -> None:  # fmt: skip
    """Write ``payload`` to ``path`` as :func:`json_text` (non-finite numbers ``null``, and why),
    with :func:`atomic_write`."""
    text = json_text(payload, reasons, indent=indent, sort_keys=sort_keys)
    write_text(path, text)


def read_yaml(path: Path, option: str = "--config"):
    """A YAML file's content; a missing file or a YAML error names the file and line."""
    if not path.is_file():
        raise InputError(f"{option} {path}: file not found")
    try:
        return yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise InputError(f"{option} {path}: not valid YAML: {getattr(err, 'problem', None) or err}{where}") from None
