"""datamodules/image_cache.py: an archive unpacked once into its cache folder (a half-finished unpack
redone, a truncated archive leaving nothing), the lock between processes, and the quick look inside
an archive against the folder it was made from."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from datamodules.image_cache import COMPLETE_MARKER, _locked, archive_name, describe_archive, unpack_archive
from foundation.errors import InputError
from tests.datamodules.test_images import make_archive, make_folder


@pytest.fixture
def archive(tmp_path) -> tuple[Path, dict]:
    """``tiny.tar.gz`` of make_folder's images (3 classes x 4 per split, 8 x 8) and their arrays."""
    arrays = make_folder(tmp_path / "data")
    return make_archive(tmp_path / "data", tmp_path / "tiny.tar.gz"), arrays


def test_an_archive_unpacks_to_its_images_pixel_for_pixel(archive, tmp_path):
    path, arrays = archive
    unpacked = unpack_archive(path, tmp_path / "cache")
    assert unpacked.parent == tmp_path / "cache" and unpacked.name.startswith("tiny-")
    assert (unpacked / COMPLETE_MARKER).is_file()
    images, _ = arrays["train"]  # classes sorted: bird, cat, dog; 4 each
    np.testing.assert_array_equal(np.asarray(Image.open(unpacked / "train" / "cat" / "001.png")),
                                  images[4 + 1].transpose(1, 2, 0))  # fmt: skip


def test_archive_names_and_a_missing_archive():
    assert archive_name(Path("a/cifar10-jpeg.tar.gz")) == "cifar10-jpeg"
    assert archive_name(Path("b.tgz")) == "b" and archive_name(Path("c.zip")) == "c"
    with pytest.raises(InputError, match=r"archive '.*nowhere\.tar\.gz' does not exist; expected a \.tar\.gz"):
        unpack_archive("nowhere.tar.gz")


def test_describe_archive_counts_what_make_folder_wrote(archive):
    path, _ = archive
    assert describe_archive(path) == {"dataset": "tiny", "source": str(path), "classes": 3, "train": 12, "val": 0,
                                      "test": 12, "image": "3x8x8"}  # fmt: skip
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(InputError, match=r"archive '.*tiny\.tar\.gz': cannot read it"):
        describe_archive(path)


def test_half_finished_unpack_is_redone(archive, tmp_path):
    archive, _ = archive
    unpacked = unpack_archive(archive, tmp_path / "cache")
    (unpacked / COMPLETE_MARKER).unlink()  # a folder without the marker
    (unpacked / "train" / "cat" / "000.png").unlink()
    (unpacked / "junk").write_text("left over")
    leftover = tmp_path / "cache" / f".{unpacked.name}.tmp-99999"  # a temporary folder of a killed run
    leftover.mkdir()
    assert unpack_archive(archive, tmp_path / "cache") == unpacked
    assert (unpacked / COMPLETE_MARKER).is_file() and (unpacked / "train" / "cat" / "000.png").is_file()
    assert not (unpacked / "junk").exists() and not leftover.exists()


def test_a_truncated_archive_leaves_nothing_in_the_cache(archive, tmp_path):
    archive, _ = archive
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(archive.read_bytes()[: archive.stat().st_size // 2])
    with pytest.raises(InputError, match=r"archive '.*cut\.tar\.gz': cannot unpack it"):
        unpack_archive(cut, tmp_path / "cache")
    assert list((tmp_path / "cache").iterdir()) == []
    unpacked = unpack_archive(archive, tmp_path / "cache")  # and a good one leaves its folder alone
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [unpacked.name]


def test_the_lock_excludes_while_its_file_is_removed(tmp_path):
    """Eight threads (each its own open file, as separate processes have) take the lock 25 times
    each: never two inside at once, though every release removes the lock file."""
    lock, inside, overlaps = tmp_path / ".entry.lock", [], []

    def work() -> None:
        for _ in range(25):
            with _locked(lock):
                inside.append(1)
                if len(inside) > 1:
                    overlaps.append(len(inside))
                time.sleep(0.0005)
                inside.pop()

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert overlaps == [] and not lock.exists()
