"""Image folders in the ImageNet layout: finding the split folders, scanning class folders, reading image files."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from PIL import Image, UnidentifiedImageError
from torch.utils.data import Dataset

from foundation.errors import InputError

SPLITS = ("train", "val", "test")
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".ppm", ".pgm", ".tif", ".tiff", ".webp")
DECODE_ERRORS = (OSError, UnidentifiedImageError, ValueError, SyntaxError, Image.DecompressionBombError)


def _find_split_root(root: Path) -> Path:
    """``root`` if it holds split folders, else its only sub-folder if that one does."""
    if any((root / s).is_dir() for s in SPLITS):
        return root
    subs = [p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")]
    if len(subs) == 1 and any((subs[0] / s).is_dir() for s in SPLITS):
        return subs[0]
    raise InputError(
        f"image root {str(root)!r}: no split folder; expected {', '.join(s + '/' for s in SPLITS)} "
        "(whichever exist) each holding <class>/<image> files"
    )


def _scan_split(split_dir: Path) -> tuple[dict[str, list[Path]], list[Path]]:
    """Image files per class folder (sorted, sub-folders included) and the skipped files."""
    classes: dict[str, list[Path]] = {}
    skipped: list[Path] = []
    for entry in sorted(split_dir.iterdir()):
        if not entry.is_dir():
            skipped.append(entry)
            continue
        images = classes[entry.name] = []
        for dirpath, dirnames, filenames in os.walk(entry, followlinks=True):
            dirnames.sort()
            for name in sorted(filenames):
                path = Path(dirpath) / name
                is_image = path.suffix.lower() in IMAGE_EXTENSIONS and not name.startswith(".")
                (images if is_image else skipped).append(path)
    return classes, skipped


def _fingerprint(paths: list[Path], root: Path, extra: str) -> str:
    digest = hashlib.sha256(extra.encode())
    for path in paths:
        stat = path.stat()
        digest.update(f"{path.relative_to(root)}|{stat.st_size}|{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


def _open_image(path: Path, mode: str) -> Image.Image:
    """The image at ``path`` fully decoded in ``mode`` ("L" or "RGB"); InputError naming it if PIL cannot."""
    try:
        with Image.open(path) as img:
            return img.convert(mode)
    except DECODE_ERRORS as err:
        raise InputError(f"image file {str(path)!r}: cannot decode it ({err}); expected a readable image") from err


def _header(path: Path) -> tuple[int, int, str]:
    """Width, height and "L" or "RGB" from the file's header, without decoding the pixels."""
    try:
        with Image.open(path) as img:
            width, height = img.size
            return width, height, "L" if img.mode in ("1", "L", "I", "I;16", "F") else "RGB"
    except DECODE_ERRORS as err:
        raise InputError(f"image file {str(path)!r}: cannot decode it ({err}); expected a readable image") from err


def _geometry(image_size: int | None, crop_fraction: float):
    """The eval geometry: resize the shorter side to ``image_size / crop_fraction``, centre-crop ``image_size``."""
    from torchvision import transforms

    if image_size is None:
        return []
    return [transforms.Resize(round(image_size / crop_fraction)), transforms.CenterCrop(image_size)]


class ImageFileDataset(Dataset):
    """``ImageFolder``-style: (path, label) pairs decoded in ``__getitem__`` and transformed.

    A file PIL cannot decode raises an ``InputError`` naming it; so does one whose transformed
    tensor is not ``expected`` = ((height, width), the file that set them) where given."""

    def __init__(self, samples: list[tuple[Path, int]], mode: str, transform,
                 expected: tuple[tuple[int, int], Path] | None = None) -> None:  # fmt: skip
        self.samples, self.mode, self.transform, self.expected = samples, mode, transform, expected

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int):
        path, label = self.samples[i]
        image = self.transform(_open_image(path, self.mode))
        if self.expected is not None and tuple(image.shape[-2:]) != tuple(self.expected[0]):
            (height, width), first = self.expected
            size = f"{image.shape[-1]}x{image.shape[-2]}"
            raise InputError(f"image file {str(path)!r} is {size}; expected {width}x{height} "
                             f"like {str(first)!r} (pass image_size to resize every image to one size)")
        return image, label
