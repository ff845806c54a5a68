"""Archives unpack safely on every Python the project accepts (datamodules/archives.py).

Every test runs twice: with ``tarfile.data_filter`` as this Python has it (3.11.4 and
later) and with it removed, which is what Debian 12's Python 3.11.2 has. `.ci/run` also
runs this file under that interpreter itself.
"""

from __future__ import annotations

import io
import stat
import tarfile
from pathlib import Path

import pytest

from datamodules.image_cache import unpack_archive
from foundation.errors import InputError


@pytest.fixture(params=["native", "no-filters"])
def python_kind(request, monkeypatch):
    if request.param == "no-filters":
        monkeypatch.delattr(tarfile, "data_filter", raising=False)
    elif not hasattr(tarfile, "data_filter"):
        pytest.skip("this Python has no extraction filters (< 3.11.4); the other case covers it")
    return request.param


def _archive(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def _file(name: str, data: bytes = b"x", mode: int = 0o644) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.mode = mode
    return info, data


def _link(name: str, target: str, kind: bytes) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info, None


def _device(name: str, kind: bytes) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type, info.devmajor, info.devminor = kind, 1, 3
    return info, None


UNSAFE = {
    "parent": [_file("../evil.txt")],
    "deep-parent": [_file("set/train/../../../evil.txt")],
    "absolute": [_file("/tmp/evil-absolute.txt")],
    "symlink-out": [_link("set/escape", "../../evil", tarfile.SYMTYPE)],
    "symlink-absolute": [_link("set/escape", "/etc/passwd", tarfile.SYMTYPE)],
    "hardlink-out": [_link("set/escape", "../evil.txt", tarfile.LNKTYPE)],
    "char-device": [_device("set/null", tarfile.CHRTYPE)],
    "block-device": [_device("set/disk", tarfile.BLKTYPE)],
    "fifo": [_device("set/pipe", tarfile.FIFOTYPE)],
}


@pytest.mark.parametrize("case", sorted(UNSAFE))
def test_unsafe_member_refuses_the_archive(case, python_kind, tmp_path):
    archive = _archive(tmp_path / "evil.tar.gz", [_file("set/train/a/ok.png"), *UNSAFE[case]])
    with pytest.raises(InputError, match=r"archive '.*evil\.tar\.gz': member '.*' is refused because"):
        unpack_archive(archive, tmp_path / "cache")
    assert not (tmp_path / "evil.txt").exists() and not Path("/tmp/evil-absolute.txt").exists()
    cache = tmp_path / "cache"
    assert not [p for p in cache.iterdir() if not p.name.endswith(".lock")], list(cache.iterdir())


def test_safe_archive_unpacks_with_the_data_filters_modes(python_kind, tmp_path):
    archive = _archive(tmp_path / "ok.tar.gz", [
        _file("set/train/a/one.png", b"one", mode=0o4777),  # set-user-ID, world-writable
        _file("set/train/a/two.png", b"two"),
        _file("set/train/a/three.png", b"three", mode=0o400),
        _link("set/train/a/same.png", "one.png", tarfile.SYMTYPE),  # a link that stays inside
        _link("set/train/a/hard.png", "set/train/a/two.png", tarfile.LNKTYPE),
    ])  # fmt: skip
    root = unpack_archive(archive, tmp_path / "cache") / "set" / "train" / "a"
    assert (root / "one.png").read_bytes() == b"one" and (root / "same.png").read_bytes() == b"one"
    assert (root / "hard.png").read_bytes() == b"two"
    assert stat.S_IMODE((root / "one.png").stat().st_mode) == 0o755  # no set-user-ID, no group/other write
    assert stat.S_IMODE((root / "three.png").stat().st_mode) == 0o600  # the owner can always read and write
