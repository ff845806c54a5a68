"""The options and serving shared by the image datamodules (``datamodules.images``)."""

from __future__ import annotations

import abc
import hashlib
import logging
from functools import cached_property, partial

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, SequentialSampler

from datamodules.image_batches import EpochShuffle, InMemoryImageBatches, _whole_batch, channel_stats
from datamodules.image_files import SPLITS
from datamodules.label_permutation import check_permute_labels, permuted_labels
from foundation.batching import loader_batch_sizes
from foundation.errors import InputError
from foundation.modality import IMAGES

log = logging.getLogger(__name__)


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
    ``permute_labels``: a seed of a random permutation of the ``train`` split's labels
    (``datamodules.label_permutation``), or None.
    """

    modality = IMAGES  # what its inputs are (foundation.modality; images (N, C, H, W))

    name = "images"
    inputs = modality.name  # what a model of this data takes, linked to a ModulePopulation's by train.py
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
        permute_labels: int | None = None,
    ) -> None:
        super().__init__()
        self.batch_size, self.eval_batch_size = loader_batch_sizes(batch_size, eval_batch_size)
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
        self.permute_labels = check_permute_labels(permute_labels)
        self.mean_option = None if mean is None else [float(m) for m in mean]
        self.std_option = None if std is None else [float(s) for s in std]
        self.random_crop_padding = random_crop_padding
        self.horizontal_flip = horizontal_flip
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
        """A split's uint8 images and labels as served (:meth:`subset_indices`, :meth:`served_labels`).
        The normalisation statistics stay those of the whole training split, so a model trained
        on all of it sees the same inputs."""
        images, labels = self._uint8_split(split)
        chosen = self.subset_indices(split)
        if chosen is not None:
            images, labels = images[chosen], labels[chosen]
        return images, self.served_labels(split, labels)

    def served_labels(self, split: str, labels: torch.Tensor) -> torch.Tensor:
        """The labels served for a split's chosen images: the ``train`` split's permuted with option
        ``permute_labels``, every other split's as they are."""
        return permuted_labels(labels, self.permute_labels) if split == "train" else labels

    def probe(self, n: int, split: str = "test") -> tuple[torch.Tensor, torch.Tensor]:
        """``n`` images evenly spaced through the split (``test``: :attr:`eval_split`; index 0, k,
        2k, ... with k = size // n, in fixed order, without augmentation), so that class-sorted
        folders show several classes."""
        name, step = self.probe_spacing(n, split)
        xs, ys, seen = [], [], 0
        for x, y in self.eval_dataloader(name):
            picked = [i for i in range(len(x)) if (seen + i) % step == 0]
            xs.append(x[picked])
            ys.append(y[picked])
            seen += len(x)
            if sum(len(v) for v in ys) >= n:
                break
        return torch.cat(xs)[:n], torch.cat(ys)[:n]

    def probe_spacing(self, n: int, split: str = "test") -> tuple[str, int]:
        """The split :meth:`probe` reads (``test``: :attr:`eval_split`) and its step k: it takes
        the images at index 0, k, 2k, ... of that split as served."""
        name = self.eval_split if split == "test" else split
        return name, max(1, self.split_sizes[name] // n)

    def probe_truth(self, n: int, target=None, split: str = "test", part: slice = slice(None)) -> dict | None:
        """The ground truth of ``probe(n, split)``'s images (docs/ground_truth.md): None, these
        images know none (``PlantedPatternDataModule`` does)."""
        return None

    # --- what remove-and-retrain (datamodules.roar) reads ----------------------------------
    def stored_split(self, split: str) -> tuple[torch.Tensor, torch.Tensor]:
        """ROAR's ``"train"`` or ``"test"`` (:attr:`eval_split`) split as stored: uint8 images, labels."""
        if not self.in_memory:
            raise InputError(f"{self.source}: ROAR modifies images in memory; expected small images "
                             "(in_memory=True) — large images are served from files")  # fmt: skip
        return self.split_images(self.stored_split_name(split))

    def stored_split_name(self, split: str) -> str:
        """The split behind ROAR's ``"train"`` or ``"test"``: ``train``, or the evaluation split
        (:attr:`eval_split`: ``test``, else ``val``)."""
        return "train" if split == "train" else self.eval_split

    def stored_images(self, split: str, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Positions ``index`` of ROAR's ``"train"`` or ``"test"`` split (:meth:`stored_split`'s
        order) as stored: uint8 images (n, C, H, W) and labels; ``ImageFolderDataModule``
        decodes large images from their files, the same uint8 as its in-memory path."""
        images, labels = self.stored_split(split)
        return images[index], labels[index]

    def stored_fingerprint(self, split: str) -> str:
        """A SHA-256 identifying ROAR's split as stored (its images and labels)."""
        digest = hashlib.sha256()
        for t in self.stored_split(split):
            digest.update(f"{t.dtype}|{tuple(t.shape)}|".encode())
            digest.update(t.contiguous().view(torch.uint8).numpy().tobytes())
        return digest.hexdigest()

    def as_model_inputs(self, images: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Stored images as the model sees them: normalised float32, not augmented."""
        return InMemoryImageBatches(images, labels, *self.normalization).__getitems__(list(range(len(labels))))

    def stored_fill(self, images: torch.Tensor) -> torch.Tensor:
        """ROAR's fill c: the images' per-channel mean rounded to uint8."""
        return (torch.tensor(channel_stats(images)[0], dtype=torch.float64) * 255.0).round().to(torch.uint8)

    @property
    def standardisation(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``normalization`` as tensors (C, 1, 1) that broadcast over a batch: raw = served * std + mean
        (a table's ``standardisation``, per feature)."""
        mean, std = self.normalization
        return torch.tensor(mean).view(-1, 1, 1), torch.tensor(std).view(-1, 1, 1)

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
        if self.permute_labels is not None:
            info["permuted_train_labels"] = self.permute_labels
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
