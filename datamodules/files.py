"""Files written whole or not at all: :func:`atomic_write`, used for every file that a
reader, or a run resumed after a crash, must never find half-written (cache entries,
population and ensemble files, metrics); and results files that stay valid JSON:
:func:`json_text` and :func:`write_json` (``null`` for a number that is not finite, and why)."""

from __future__ import annotations

import json
import math
import os
import re
import socket
from collections.abc import Callable, Mapping
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
    atomic_write(path, lambda tmp: tmp.write_text(text))
