"""Each financial loader on the real raw files: counts, labels, no NaNs, and
standardisation fitted on the training split only (float64 recomputation from the
raw file with the csv module as the reference)."""

from __future__ import annotations

import csv
import io
import zipfile

import numpy as np
import pytest
import torch
from sklearn.model_selection import train_test_split

from datamodules import FinancialDataModule

# rows x features after preprocessing, and the share of label 1 (desired outcome).
EXPECTED = {
    "heloc": (9_870, 23, 0.4797),  # paper: 9,871 (one more duplicate row is dropped here)
    "german": (1_000, 61, 0.7000),  # paper: ~70 inputs; 13 categorical attributes one-hot -> 54 + 7 numeric
    "adult": (32_561, 6, 0.2408),
    "default_credit": (30_000, 91, 0.7788),  # paper: ~90; 9 categorical one-hot -> 77 + 14 numeric
    "gmsc": (11_426, 10, 0.5000),
}


@pytest.fixture(scope="module", params=sorted(EXPECTED))
def loaded(request, data_dir):
    dm = FinancialDataModule(dataset=request.param, data_dir=str(data_dir))
    return request.param, dm


def test_counts_and_balance(loaded):
    name, dm = loaded
    rows, features, positive = EXPECTED[name]
    info = dm.describe()
    assert (info["rows"], info["features"]) == (rows, features)
    assert info["positive_rate"] == pytest.approx(positive, abs=5e-4)
    assert info["test_rows"] == round(rows * 0.2) or info["test_rows"] == int(np.ceil(rows * 0.2))


def test_finite_and_standardised_on_train_only(loaded):
    _, dm = loaded
    (x_train, y_train), (x_test, _) = dm.train_tensors, dm.test_tensors
    assert torch.isfinite(x_train).all() and torch.isfinite(x_test).all()
    assert set(y_train.unique().tolist()) == {0, 1}
    varying = x_train.std(dim=0) > 0
    mean, std = x_train.double().mean(0), x_train.double().std(0, unbiased=False)[varying]
    torch.testing.assert_close(mean, torch.zeros_like(mean), atol=1e-5, rtol=0)
    torch.testing.assert_close(std, torch.ones_like(std), atol=1e-4, rtol=0)
    # The test split is transformed with train statistics, so it is not exactly standardised itself.
    assert x_test.double().mean(0).abs().max() > 1e-3


def _split(n: int, labels: np.ndarray):
    return train_test_split(np.arange(n), test_size=0.2, random_state=0, stratify=labels)


def _assert_test_split(data_dir, dataset: str, features: np.ndarray, labels: np.ndarray, idx_train, idx_test):
    """The datamodule's test split of ``dataset`` equals the float64 recomputation: the labels at
    ``idx_test``, and ``features`` standardised by the mean and (population) std of ``idx_train``'s."""
    mean, std = features[idx_train].mean(0), features[idx_train].std(0)
    x_test, y_test = FinancialDataModule(dataset=dataset, data_dir=str(data_dir)).test_tensors
    np.testing.assert_array_equal(y_test.numpy(), labels[idx_test])
    np.testing.assert_allclose(x_test.numpy(), (features[idx_test] - mean) / std, rtol=1e-5, atol=1e-5)


def test_adult_matches_float64_recomputation_from_raw(data_dir):
    with open(data_dir / "adult" / "adult.data", newline="") as fh:
        rows = [[v.strip() for v in r] for r in csv.reader(fh) if len(r) == 15]
    raw = np.array([[float(r[i]) for i in (0, 2, 4, 10, 11, 12)] for r in rows])
    labels = np.array([r[14] == ">50K" for r in rows], dtype=np.int64)
    _assert_test_split(data_dir, "adult", raw, labels, *_split(len(labels), labels))


def test_heloc_imputes_train_median_and_drops_rows(data_dir):
    with open(data_dir / "heloc" / "heloc_dataset_v1.csv", newline="") as fh:
        reader = csv.reader(fh)
        next(reader)
        rows, seen = [], set()
        for r in reader:
            key = tuple(r)
            values = [float(v) for v in r[1:]]
            if key in seen or all(v < 0 for v in values):
                continue
            seen.add(key)
            rows.append((r[0] == "Good", values))
    labels = np.array([g for g, _ in rows], dtype=np.int64)
    raw = np.array([v for _, v in rows])
    raw[raw < 0] = np.nan
    idx_train, idx_test = _split(len(labels), labels)
    median = np.nanmedian(raw[idx_train], axis=0)
    _assert_test_split(data_dir, "heloc", np.where(np.isnan(raw), median, raw), labels, idx_train, idx_test)


def test_gmsc_sample_is_balanced_and_complete(data_dir):
    with zipfile.ZipFile(data_dir / "gmsc" / "cs-training.csv.zip") as zf:
        text = zf.read("cs-training.csv").decode()
    complete_pos = sum(1 for r in list(csv.reader(io.StringIO(text)))[1:] if "NA" not in r and r[1] == "0")
    assert complete_pos > 5_713  # the raw data allows the paper's balanced sample
    dm = FinancialDataModule(dataset="gmsc", data_dir=str(data_dir))
    y = torch.cat([dm.train_tensors[1], dm.test_tensors[1]])
    assert int((y == 1).sum()) == int((y == 0).sum()) == 5_713
    other = FinancialDataModule(dataset="gmsc", data_dir=str(data_dir), sample_seed=1)
    y_other = torch.cat([other.train_tensors[1], other.test_tensors[1]])
    assert int((y_other == 1).sum()) == int((y_other == 0).sum()) == 5_713
    assert not torch.equal(other.train_tensors[0], dm.train_tensors[0])  # another sample of the same rows
    same = FinancialDataModule(dataset="gmsc", data_dir=str(data_dir), sample_seed=0)
    assert torch.equal(same.train_tensors[0], dm.train_tensors[0])  # seed 0 is the default sample


def test_embedded_copy_equals_shared_raw_file(data_dir):
    embedded = FinancialDataModule(dataset="german")
    shared = FinancialDataModule(dataset="german", data_dir=str(data_dir))
    torch.testing.assert_close(embedded.train_tensors, shared.train_tensors, rtol=0, atol=0)
