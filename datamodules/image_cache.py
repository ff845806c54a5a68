"""The image cache (default ``~/.cache/reliable-explanations/images``, option ``cache_dir``; ``datamodules.images``):
its folder, a lock between processes, ``.tar.gz`` archives unpacked once, and a quick look inside an archive."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import logging
import os
import shutil
import tarfile
import zlib
from pathlib import Path

from PIL import Image

from datamodules.archives import extract_members
from datamodules.image_files import IMAGE_EXTENSIONS, SPLITS
from foundation.errors import InputError

log = logging.getLogger(__name__)

DEFAULT_CACHE_DIR = Path("~/.cache/reliable-explanations/images")
COMPLETE_MARKER = ".unpack-complete"


def _short_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _cache_root(cache_dir: str | Path | None) -> Path:
    root = Path(cache_dir if cache_dir is not None else DEFAULT_CACHE_DIR).expanduser()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InputError(f"cache_dir {str(root)!r}: cannot create it ({err}); expected a writable folder") from err
    return root


@contextlib.contextmanager
def _locked(lock_path: Path):
    """An exclusive lock between processes (e.g. DDP ranks) working on one cache entry. Its
    file is removed on release, by its holder, so no lock file stays in the cache; a process
    that was waiting on a removed file sees it gone (another inode at the path, or none) and
    locks the path anew."""
    while True:
        handle = open(lock_path, "a")
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            if os.stat(lock_path).st_ino == os.fstat(handle.fileno()).st_ino:
                break
        except FileNotFoundError:
            pass
        handle.close()
    try:
        yield
    finally:
        lock_path.unlink(missing_ok=True)
        handle.close()  # releases the lock


def archive_name(archive: Path) -> str:
    """``cifar10-jpeg`` for ``cifar10-jpeg.tar.gz``."""
    for suffix in (".tar.gz", ".tgz"):
        if archive.name.endswith(suffix):
            return archive.name[: -len(suffix)]
    return archive.stem


def is_archive(path: Path) -> bool:
    return path.name.endswith((".tar.gz", ".tgz"))


def unpack_archive(archive: str | Path, cache_dir: str | Path | None = None) -> Path:
    """Unpack the ``.tar.gz`` ``archive`` once into ``cache_dir`` and return the unpacked folder.

    The folder is ``<cache_dir>/<archive name>-<hash of the archive's path, size and
    modification time>``. The archive is extracted into a temporary sibling folder that
    receives a completion marker and is then moved into place with ``os.replace``; a
    later call finds the marker and returns at once. A temporary folder, or a folder
    without the marker, left by an interrupted unpack is removed and the unpack redone.
    Members are checked by :func:`datamodules.archives.extract_members` (no absolute paths,
    no ``..``, no links out of the folder, no device files) on every Python. A truncated or corrupt archive raises
    an ``InputError`` naming it. A file lock keeps concurrent processes from unpacking
    the same archive twice.
    """
    archive = Path(archive).expanduser().resolve()
    if not archive.is_file():
        raise InputError(
            f"archive {str(archive)!r} does not exist; expected a .tar.gz file holding <split>/<class>/<image> files"
        )
    cache = _cache_root(cache_dir)
    stat = archive.stat()
    target = cache / f"{archive_name(archive)}-{_short_hash(f'{archive}|{stat.st_size}|{stat.st_mtime_ns}')}"
    if (target / COMPLETE_MARKER).is_file():
        return target
    with _locked(cache / f".{target.name}.lock"):
        if (target / COMPLETE_MARKER).is_file():  # another process finished it while we waited
            return target
        for stale in [target, *cache.glob(f".{target.name}.tmp-*")]:
            if stale.exists():
                log.warning("removing the half-finished unpack %s of %s", stale, archive)
                shutil.rmtree(stale)
        tmp = cache / f".{target.name}.tmp-{os.getpid()}"
        log.info("unpacking %s into %s", archive, target)
        try:
            with tarfile.open(archive, "r:gz") as tar:
                extract_members(tar, tmp, archive)
        except (tarfile.TarError, EOFError, zlib.error, OSError) as err:
            shutil.rmtree(tmp, ignore_errors=True)
            raise InputError(
                f"archive {str(archive)!r}: cannot unpack it ({type(err).__name__}: {err}); "
                "expected a complete, readable .tar.gz file"
            ) from err
        (tmp / COMPLETE_MARKER).write_text(f"unpacked from {archive}\n")
        os.replace(tmp, target)
    return target


# --- a quick look inside an archive --------------------------------------------------
def describe_archive(archive: str | Path) -> dict:
    """Classes, images per split and the first image's size, read from the archive's member
    list and one image header: nothing is unpacked or decoded beyond that."""
    archive = Path(archive)
    counts: dict[str, int] = {}
    classes: set[str] = set()
    shape = "?"
    try:
        with tarfile.open(archive, "r|gz") as tar:
            for member in tar:
                parts = Path(member.name).parts
                if not member.isfile() or Path(member.name).suffix.lower() not in IMAGE_EXTENSIONS:
                    continue
                split_at = next((i for i, p in enumerate(parts[:-2]) if p in SPLITS), None)
                if split_at is None:
                    continue
                counts[parts[split_at]] = counts.get(parts[split_at], 0) + 1
                classes.add(parts[split_at + 1])
                if shape == "?":
                    with Image.open(io.BytesIO(tar.extractfile(member).read())) as img:
                        shape = f"{1 if img.mode == 'L' else 3}x{img.size[1]}x{img.size[0]}"
    except (tarfile.TarError, EOFError, zlib.error, OSError) as err:
        raise InputError(f"archive {str(archive)!r}: cannot read it ({type(err).__name__}: {err})") from err
    return {"dataset": archive_name(archive), "source": str(archive), "classes": len(classes),
            **{s: counts.get(s, 0) for s in SPLITS}, "image": shape}  # fmt: skip
