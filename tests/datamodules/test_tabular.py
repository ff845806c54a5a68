"""Split, impute, standardise and serve a table (datamodules/tabular.py), against scikit-learn's
``train_test_split`` and a float64 pandas computation of the training split's median, mean and
population std; the training order a ``randperm`` of ``data_order_seed``; columns dropped and
options refused. The financial datasets' readers: test_raw_readers.py, test_datasets_real.py."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from sklearn.datasets import make_moons
from sklearn.model_selection import train_test_split

from datamodules.tabular import TabularDataModule, TwoMoonsDataModule
from foundation.errors import InputError


class Table(TabularDataModule):
    """A small table given by hand: a column with missing values and a constant one."""

    name = "table"

    def load_raw(self):
        rng = np.random.default_rng(0)
        features = pd.DataFrame({"a": rng.normal(size=40), "b": rng.normal(3, 2, 40), "c": np.ones(40)})
        features.loc[[3, 17, 30], "a"] = np.nan
        return features, (np.arange(40) % 3 == 0).astype(np.int64), "hand"


def test_the_split_and_standardisation_against_sklearn_and_pandas():
    data = Table(test_fraction=0.25, split_seed=2)
    features, labels, _ = data.load_raw()
    idx_train, idx_test = train_test_split(np.arange(40), test_size=0.25, random_state=2, stratify=labels)
    train, test = features.iloc[idx_train], features.iloc[idx_test]
    median = train.median()
    train, test = train.fillna(median), test.fillna(median)
    mean, std = train.mean(), train.std(ddof=0).replace(0, 1.0)
    x_train, y_train = data.train_tensors
    np.testing.assert_allclose(x_train.numpy(), ((train - mean) / std).to_numpy(), atol=1e-6)
    np.testing.assert_allclose(data.test_tensors[0].numpy(), ((test - mean) / std).to_numpy(), atol=1e-6)
    assert y_train.tolist() == labels[idx_train].tolist() and data.feature_names == ["a", "b", "c"]
    served_mean, served_std = data.standardisation
    np.testing.assert_allclose(served_mean.numpy(), mean.to_numpy(), rtol=1e-6)
    assert served_std[2] == 1.0  # a constant column is only centred
    torch.testing.assert_close(data.stored_fill(x_train), x_train.mean(0))
    described = data.describe()
    assert (described["rows"], described["train_rows"], described["test_rows"]) == (40, 30, 10)
    assert described["positive_rate"] == round(float((labels == 1).mean()), 4)


def test_two_moons_are_sklearns_and_the_training_order_is_seeded():
    data = TwoMoonsDataModule(n_samples=50, noise=0.2, sample_seed=1, batch_size=8, shuffle=True, data_order_seed=6)
    x_raw, _ = make_moons(n_samples=50, noise=0.2, random_state=1)
    x, y = data.train_tensors
    mean, std = data.standardisation
    raw = (x * std + mean).double().numpy()  # every served row is one of make_moons' rows
    assert np.abs(raw[:, None, :] - x_raw[None]).max(2).min(1).max() < 1e-5
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(6))
    torch.testing.assert_close(torch.cat([xb for xb, _ in data.train_dataloader()]), x[order])
    torch.testing.assert_close(torch.cat([xb for xb, _ in data.eval_dataloader("train")]), x)


def test_columns_dropped_and_options_refused():
    assert Table(drop_columns=["c"]).feature_names == ["a", "b"]
    with pytest.raises(InputError, match=r"hand: option drop_columns names \['z'\], not columns"):
        Table(drop_columns=["z"]).train_tensors
    for options, message in (({"batch_size": 0}, "option batch_size=0"), ({"test_fraction": 1.0}, "test_fraction=1.0"),
                             ({"permute_labels": -2}, "option permute_labels=-2")):  # fmt: skip
        with pytest.raises(InputError, match=message):
            Table(**options)
    with pytest.raises(InputError, match=r"table: no 'val' split"):
        Table().eval_dataloader("val")
