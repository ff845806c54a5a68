"""ROAR's modified image datasets written once as shards on disk and served from them, for
image sets that do not fit in memory (docs/roar.md, "ImageNet-scale: modified datasets as
shards", says why this format and what it costs).

A written split is a folder ``<out_dir>/<split>-<key>/`` (``key``: 16 hex digits of a SHA-256
of the stored split's fingerprint, the caller's name of the modification, the format and the
shard size, :func:`split_key`; a changed input or modification names another folder, so nothing
written is ever reused for other data or overwritten) holding

* ``manifest.json``: format, key, images, (C, H, W), images per shard, shards;
* per shard s: ``<s>.npy``, its modified uint8 images (n, C, H, W) as a NumPy array file (read
  memory-mapped), then ``<s>.json``, its first and last image and labels. A shard is finished
  when its ``.json`` exists; both are written under a temporary name and moved into place
  (``os.replace``), the ``.json`` last, so a writer killed at any moment leaves finished shards
  and at most temporary files, which the next run of that shard on the same machine removes
  (once their process is gone) before writing the shard again. Writers on several machines
  sharing the folder may write the same shard at once: the same bytes, moved into place once.

Serving: :class:`ShardImages` indexes the written images like a uint8 tensor, so the wrapped
datamodule's ``tensor_loader`` serves them exactly as it serves the in-memory modified tensors
(its seeded per-epoch order, augmentation after the removal, normalisation): the batches equal
the in-memory path's. Under DDP Lightning wraps the loader's sampler in a distributed sampler,
so each rank reads its own part of every epoch's order.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
from collections.abc import Callable
from functools import cached_property
from pathlib import Path

import numpy as np
import torch

from datamodules.roar import ModifiedDataModule, _check_datamodule
from foundation.errors import InputError, DiskFull
from foundation.files import dead_writer, temporary_name, write_json, fsync

FORMAT = 1
SHARD_IMAGES = 1024  # images per shard (150 MB at 3 × 224 × 224)
CHUNK_ELEMENTS = 2**22  # input values read, modified and written at a time (27 images at 3 × 224 × 224)


def stored_size(datamodule, split: str) -> int:
    """Images in ROAR's ``"train"`` or ``"test"`` split (the evaluation split: ``test/``, else ``val/``)."""
    return datamodule.split_sizes[datamodule.stored_split_name(split)]


def served_from_files(datamodule) -> bool:
    """Whether ``datamodule`` serves its images from files (an image folder's ``in_memory`` false):
    ROAR then writes its modified splits as shards instead of holding them."""
    return getattr(datamodule, "in_memory", True) is False


def split_key(datamodule, split: str, name: str, shard_images: int) -> str:
    """16 hex digits of a SHA-256 of the stored split (``stored_fingerprint``), the modification's
    ``name`` (what the caller's ``modify`` does: estimator, fraction, ranking file …), the format
    and the shard size."""
    text = json.dumps([FORMAT, split, datamodule.stored_fingerprint(split), name, shard_images])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _shard_path(folder: Path, shard: int, suffix: str) -> Path:
    return folder / f"{shard:05d}{suffix}"


def write_modified_split(datamodule, split: str, modify: Callable, out_dir, name: str,
                         shard: tuple[int, int] | None = None, shard_images: int = SHARD_IMAGES,
                         chunk: int | None = None) -> Path:  # fmt: skip
    """Write ROAR's ``split`` (``"train"``/``"test"``) of ``datamodule`` with ``modify(x, index)``
    applied (uint8 images (n, C, H, W) and their int64 indices in the split -> uint8 images of the
    same shape) as shards of ``shard_images`` images under ``out_dir``; returns the split's folder.

    ``name``: what ``modify`` does, in words that change whenever its output would (part of the
    folder's key). Images are read with ``datamodule.stored_images`` ``chunk`` at a time (default:
    as many as hold :data:`CHUNK_ELEMENTS` values), so at most one chunk is in memory.
    ``shard=(i, k)``: this process writes shards i, i+k, …; k processes with the same arguments
    write the whole split. Shards already finished are skipped, so a rerun after a crash writes
    only the rest and ends with the same bytes."""
    _check_datamodule(datamodule)
    if not callable(getattr(datamodule, "stored_images", None)):
        raise InputError(f"datamodule {type(datamodule).__name__}; expected an image datamodule (stored_images)")
    count, shape = stored_size(datamodule, split), tuple(datamodule.image_shape)
    chunk = chunk or max(1, CHUNK_ELEMENTS // int(np.prod(shape)))
    for option, value in (("shard_images", shard_images), ("chunk", chunk)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(f"option {option}={value!r}; expected a positive integer")
    shards = -(-count // shard_images)
    index, step = shard or (0, 1)
    if not (isinstance(index, int) and isinstance(step, int) and 0 <= index < step):
        raise InputError(f"option shard={shard!r}; expected (i, k) with 0 <= i < k")
    key = split_key(datamodule, split, name, shard_images)
    folder = Path(out_dir) / f"{split}-{key}"
    folder.mkdir(parents=True, exist_ok=True)
    manifest = {"format": FORMAT, "key": key, "name": name, "split": split, "images": count, "shape": list(shape),
                "shard_images": shard_images, "shards": shards}  # fmt: skip
    if not (folder / "manifest.json").is_file():
        write_json(folder / "manifest.json", manifest, indent=1)
    for s in range(index, shards, step):
        if not _shard_path(folder, s, ".json").is_file():
            _write_shard(datamodule, split, modify, folder, s, (s * shard_images, min(count, (s + 1) * shard_images)),
                         shape, chunk)  # fmt: skip
    return folder


def _write_shard(datamodule, split, modify, folder: Path, shard: int, span: tuple[int, int], shape, chunk) -> None:
    for stale in folder.glob(f".{shard:05d}.*.tmp-*"):  # a killed writer's, left by kill -9 or a crash
        if dead_writer(stale):
            stale.unlink(missing_ok=True)
    start, stop = span
    images = _shard_path(folder, shard, ".npy")
    tmp = temporary_name(images)
    labels = []
    try:
        out = reserved_memmap(tmp, (stop - start, *shape))
        for a in range(start, stop, chunk):
            b = min(a + chunk, stop)
            x, y = datamodule.stored_images(split, torch.arange(a, b))
            modified = modify(x, torch.arange(a, b))
            if not isinstance(modified, torch.Tensor) or modified.dtype != torch.uint8 or modified.shape != x.shape:
                got = f"{getattr(modified, 'dtype', type(modified).__name__)} {tuple(getattr(modified, 'shape', ()))}"
                raise InputError(f"modify returned {got} for the {split} images {a} … {b - 1} {tuple(x.shape)}; "
                                 "expected uint8 images of the input's shape")  # fmt: skip
            out[a - start : b - start] = modified.cpu().numpy()
            labels += y.tolist()
        out.flush()
        del out
        fsync(tmp)
        if not _shard_path(folder, shard, ".json").is_file():  # not finished meanwhile by another machine
            os.replace(tmp, images)
    finally:
        tmp.unlink(missing_ok=True)
    record = {"shard": shard, "start": start, "stop": stop, "labels": labels}
    if not _shard_path(folder, shard, ".json").is_file():
        write_json(_shard_path(folder, shard, ".json"), record, indent=None)


def reserved_memmap(path: Path, shape: tuple[int, ...]) -> np.memmap:
    """A new ``.npy`` file of uint8 ``shape`` at ``path``, mapped for writing, its disk blocks
    allocated first (``os.posix_fallocate``): a full disk is then ``DiskFull`` here, naming the
    folder and the size, instead of a bus error (SIGBUS) that kills the process at a write into
    the map of a sparse file."""
    size = int(np.prod(shape))
    try:
        out = np.lib.format.open_memmap(path, mode="w+", dtype=np.uint8, shape=shape)
        fd = os.open(path, os.O_RDWR)
        try:
            os.posix_fallocate(fd, 0, path.stat().st_size)
        except OSError as err:
            if err.errno not in (errno.EOPNOTSUPP, errno.EINVAL):  # a file system that cannot: as before
                raise
        finally:
            os.close(fd)
    except OSError as err:
        if err.errno in (errno.ENOSPC, errno.EDQUOT):
            raise DiskFull(path.parent, size) from err
        raise
    return out


class ShardImages:
    """The images of a written split (a folder of :func:`write_modified_split`), indexed like a
    uint8 tensor: ``images[index]`` (int64 indices) -> (len(index), C, H, W), read from the
    memory-mapped shards; ``labels`` (int64). Every shard must be finished."""

    def __init__(self, folder) -> None:
        self.folder = Path(folder)
        try:
            manifest = json.loads((self.folder / "manifest.json").read_text())
        except (OSError, ValueError) as err:
            raise InputError(f"{self.folder}: no readable manifest.json ({err}); expected a folder written by "
                             "write_modified_split") from err  # fmt: skip
        if manifest.get("format") != FORMAT:
            raise InputError(f"{self.folder}/manifest.json: format {manifest.get('format')!r}; expected {FORMAT}")
        self.count, self.shard_images = manifest["images"], manifest["shard_images"]
        self.shape = tuple(manifest["shape"])
        missing = [s for s in range(manifest["shards"]) if not _shard_path(self.folder, s, ".json").is_file()]
        if missing:
            raise InputError(f"{self.folder}: shard(s) {missing[:10]} of {manifest['shards']} not written yet; "
                             "expected every shard (run write_modified_split for each --shard i/k)")  # fmt: skip
        self._maps: dict[int, np.ndarray] = {}

    @cached_property
    def labels(self) -> torch.Tensor:
        records = [json.loads(_shard_path(self.folder, s, ".json").read_text())
                   for s in range(-(-self.count // self.shard_images))]  # fmt: skip
        return torch.tensor([label for r in records for label in r["labels"]], dtype=torch.int64)

    def __len__(self) -> int:
        return self.count

    def _shard(self, s: int) -> np.ndarray:
        if s not in self._maps:
            self._maps[s] = np.load(_shard_path(self.folder, s, ".npy"), mmap_mode="r")
        return self._maps[s]

    def __getitem__(self, index) -> torch.Tensor:
        index = torch.as_tensor(index, dtype=torch.int64).reshape(-1).numpy()
        if len(index) and (index.min() < 0 or index.max() >= self.count):
            raise IndexError(f"index out of range for {self.count} images")
        out = np.empty((len(index), *self.shape), dtype=np.uint8)
        shard_of = index // self.shard_images
        for s in np.unique(shard_of):
            rows = np.nonzero(shard_of == s)[0]
            out[rows] = self._shard(int(s))[index[rows] - s * self.shard_images]
        return torch.from_numpy(out)

    def __getstate__(self) -> dict:  # to loader workers and spawned processes without open maps
        return {**self.__dict__, "_maps": {}}


class ShardedDataModule(ModifiedDataModule):
    """:class:`~datamodules.roar.ModifiedDataModule` whose modified splits are written once as
    shards under ``out_dir`` (:func:`write_modified_split`, in ``prepare_data``: once per node,
    shards already written are skipped) and served from them (:class:`ShardImages`) through the
    wrapped datamodule's ``tensor_loader``. ``name``: ``{"train": ..., "test": ...}``, each
    split's modification in words (the folders' keys)."""

    def __init__(self, datamodule, modify: dict, name: dict, out_dir, shard_images: int = SHARD_IMAGES,
                 chunk: int | None = None) -> None:  # fmt: skip
        super().__init__(datamodule, modify)
        if not isinstance(name, dict) or sorted(name) != ["test", "train"]:
            raise InputError(f"option name={name!r}; expected {{'train': ..., 'test': ...}} naming each modification")
        self.name, self.out_dir, self.shard_images, self.chunk = name, Path(out_dir), shard_images, chunk

    def write(self, split: str, shard: tuple[int, int] | None = None) -> Path:
        """Write the split's shards (those of ``shard`` (i, k)) that are missing; returns its folder."""
        return write_modified_split(self.datamodule, split, self.modify[split], self.out_dir, self.name[split],
                                    shard, self.shard_images, self.chunk)  # fmt: skip

    def prepare_data(self) -> None:
        super().prepare_data()
        for split in ("train", "test"):
            self.write(split)

    def stored_split(self, split: str) -> tuple[ShardImages, torch.Tensor]:
        """The written split: its :class:`ShardImages` and labels (read from disk as batches ask)."""
        if split not in self._modified:
            folder = self.out_dir / f"{split}-{split_key(self.datamodule, split, self.name[split], self.shard_images)}"
            images = ShardImages(folder)
            self._modified[split] = images, images.labels
        return self._modified[split]


def roar_datamodule(datamodule, modify: dict, name: dict | None = None, out_dir=None, in_memory: bool | None = None,
                    **shard_options) -> ModifiedDataModule:  # fmt: skip
    """The modified splits of ``datamodule`` served for ``pl.Trainer.fit``/``test``, in memory or
    from shards by the data's size: ``in_memory=None`` follows the datamodule's own ``in_memory``
    (an image folder is decoded into memory when its images are at most 64 pixels a side;
    tabular data is always in memory); ``True``/``False`` forces either. In memory:
    :class:`~datamodules.roar.ModifiedDataModule`; else :class:`ShardedDataModule` under
    ``out_dir`` (``name``: each split's modification in words; ``shard_options``:
    ``shard_images``, ``chunk``)."""
    if in_memory is None:
        in_memory = not served_from_files(datamodule)
    if in_memory:
        return ModifiedDataModule(datamodule, modify)
    if name is None or out_dir is None:
        raise InputError(f"{getattr(datamodule, 'source', type(datamodule).__name__)}: its images are served from "
                         "files, so the modified splits are written as shards; expected options name and out_dir")
    return ShardedDataModule(datamodule, modify, name, out_dir, **shard_options)
