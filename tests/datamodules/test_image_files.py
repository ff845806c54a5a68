"""Image folders in the ImageNet layout (datamodules/image_files.py): the split folders found, class
folders scanned (what is skipped), files decoded to their exact pixels (the PNGs ``make_folder``
wrote), headers read without decoding, the eval geometry, and undecodable or odd-sized files named."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision import transforms

from datamodules.image_files import (ImageFileDataset, _find_split_root, _fingerprint, _geometry, _header,
                                     _open_image, _scan_split)  # fmt: skip
from foundation.errors import InputError
from tests.datamodules.test_images import make_folder


def test_the_split_root_is_the_root_or_its_only_sub_folder(tmp_path):
    make_folder(tmp_path / "data" / "inner", classes=("a",), n=1)
    assert _find_split_root(tmp_path / "data" / "inner") == tmp_path / "data" / "inner"
    assert _find_split_root(tmp_path / "data") == tmp_path / "data" / "inner"
    (tmp_path / "data" / "second").mkdir()
    with pytest.raises(InputError, match="no split folder; expected train/, val/, test/"):
        _find_split_root(tmp_path / "data")


def test_class_folders_are_scanned_in_order_and_other_files_skipped(tmp_path):
    make_folder(tmp_path, splits=("train",), classes=("b", "a"), n=2)
    (tmp_path / "train" / "a" / "deeper").mkdir()
    Image.new("RGB", (8, 8)).save(tmp_path / "train" / "a" / "deeper" / "x.JPG")
    for name in ("notes.txt", ".hidden.png"):
        (tmp_path / "train" / "a" / name).write_text("")
    (tmp_path / "train" / "loose.png").write_text("")
    classes, skipped = _scan_split(tmp_path / "train")
    a = tmp_path / "train" / "a"
    assert list(classes) == ["a", "b"]
    assert classes["a"] == [a / "000.png", a / "001.png", a / "deeper" / "x.JPG"]
    assert sorted(skipped) == sorted([a / ".hidden.png", a / "notes.txt", tmp_path / "train" / "loose.png"])


def test_the_fingerprint_follows_names_sizes_and_times(tmp_path):
    make_folder(tmp_path, splits=("train",), classes=("a",), n=2)
    paths = sorted((tmp_path / "train" / "a").iterdir())
    first = _fingerprint(paths, tmp_path, "options")
    assert _fingerprint(paths, tmp_path, "options") == first and len(first) == 16
    assert _fingerprint(paths, tmp_path, "other options") != first
    os.utime(paths[0], ns=(0, 10**9))
    assert _fingerprint(paths, tmp_path, "options") != first


def test_files_decode_to_their_pixels_and_headers_say_their_size(tmp_path):
    pixels = make_folder(tmp_path, splits=("train",), classes=("a",), n=1, size=6)["train"][0][0]  # (3, 6, 6)
    path = tmp_path / "train" / "a" / "000.png"
    assert np.array_equal(np.asarray(_open_image(path, "RGB")), pixels.transpose(1, 2, 0))
    grey = np.asarray(_open_image(path, "L"))
    assert grey.shape == (6, 6)  # PIL's luma: (299 R + 587 G + 114 B) / 1000, rounded
    pixels = pixels.astype(int)
    expected = (pixels[0] * 299 + pixels[1] * 587 + pixels[2] * 114 + 500) // 1000
    assert np.abs(grey.astype(int) - expected).max() <= 1
    assert _header(path) == (6, 6, "RGB")
    Image.new("L", (5, 3)).save(tmp_path / "grey.png")
    assert _header(tmp_path / "grey.png") == (5, 3, "L")
    (tmp_path / "bad.png").write_bytes(b"not an image")
    for read in (lambda p: _open_image(p, "RGB"), _header):
        with pytest.raises(InputError, match="bad.png'?: cannot decode it"):
            read(tmp_path / "bad.png")


def test_the_eval_geometry_resizes_the_shorter_side_then_crops():
    assert _geometry(None, 0.875) == []
    resize, crop = _geometry(28, 0.875)
    assert resize.size == 32 and crop.size == (28, 28)
    image = Image.new("RGB", (64, 40))
    assert transforms.Compose([resize, crop])(image).size == (28, 28)


def test_the_dataset_serves_transformed_images_and_names_odd_sizes(tmp_path):
    pixels = make_folder(tmp_path, splits=("train",), classes=("a", "b"), n=1, size=6)["train"][0]
    files = [tmp_path / "train" / c / "000.png" for c in ("a", "b")]
    dataset = ImageFileDataset([(files[0], 0), (files[1], 1)], "RGB", transforms.ToTensor(), ((6, 6), files[0]))
    image, label = dataset[1]
    assert len(dataset) == 2 and label == 1
    torch.testing.assert_close(image, torch.from_numpy(pixels[1]).float() / 255, rtol=0, atol=0)
    Image.new("RGB", (7, 6)).save(tmp_path / "wide.png")
    odd = ImageFileDataset([(tmp_path / "wide.png", 0)], "RGB", transforms.ToTensor(), ((6, 6), files[0]))
    with pytest.raises(InputError, match=r"wide.png' is 7x6; expected 6x6 like .*000.png' \(pass image_size"):
        odd[0]
