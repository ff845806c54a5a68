"""A three-class table for the multi-class tests: Gaussian blobs, given by class path to train.py."""

from __future__ import annotations

import numpy as np
import pandas as pd
from sklearn.datasets import make_blobs

from datamodules.tabular import TabularDataModule


class BlobsDataModule(TabularDataModule):
    """``n_samples`` rows of ``n_features`` features around ``classes`` overlapping centres (sklearn's
    ``make_blobs``, standard deviation 2.5), labels 0 .. classes - 1."""

    name = "blobs"

    def __init__(self, n_samples: int = 300, n_features: int = 4, classes: int = 3, sample_seed: int = 0,
                 **kwargs) -> None:  # fmt: skip
        super().__init__(**kwargs)
        self.n_samples, self.n_features, self.sample_seed = n_samples, n_features, sample_seed
        self.num_classes = classes

    def load_raw(self) -> tuple[pd.DataFrame, np.ndarray, str]:
        x, y = make_blobs(n_samples=self.n_samples, n_features=self.n_features, centers=self.num_classes,
                          cluster_std=2.5, random_state=self.sample_seed)  # fmt: skip
        return pd.DataFrame(x, columns=[f"x{i}" for i in range(self.n_features)]), y.astype(np.int64), "blobs"
