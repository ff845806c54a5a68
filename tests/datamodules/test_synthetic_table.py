"""The synthetic table with known contributions (``datamodules.synthetic_table``): labels from
its scores, the truth equal to a brute-force Shapley value, nuisance correlation, seeds, bad options."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from datamodules import SyntheticTableDataModule
from foundation.errors import InputError


def shapley_by_enumeration(f, x: np.ndarray) -> np.ndarray:
    """φ_i = Σ_S |S|! (d − |S| − 1)! / d! (f(S ∪ i) − f(S)), f(S) = f of x with features outside S at 0."""
    d = len(x)
    phi = np.zeros(d)
    for i in range(d):
        others = [j for j in range(d) if j != i]
        for size in range(d):
            weight = math.factorial(size) * math.factorial(d - size - 1) / math.factorial(d)
            for subset in itertools.combinations(others, size):
                kept = np.zeros(d)
                kept[list(subset)] = x[list(subset)]
                with_i = kept.copy()
                with_i[i] = x[i]
                phi[i] += weight * (f(with_i) - f(kept))
    return phi


@pytest.mark.parametrize("classes", [2, 3])
def test_labels_follow_the_scores_and_the_truth_is_the_shapley_value(classes):
    data = SyntheticTableDataModule(n_rows=600, n_linear=2, n_interacting=2, n_correlated=1, n_irrelevant=2,
                                    num_classes=classes)  # fmt: skip
    x, y = data.test_tensors
    raw = data.raw_rows(x)
    assert np.array_equal(data.scores(raw).argmax(1), y.numpy())  # no label noise: the label is the argmax
    assert data.relevant.tolist() == [True] * 4 + [False] * 3
    for t in range(classes):
        truth = data.true_attributions(x[:3], t).numpy()
        for r in range(3):
            expected = shapley_by_enumeration(lambda row: data.scores(row[None])[0, t], raw[r])
            np.testing.assert_allclose(truth[r], expected, rtol=0, atol=1e-10)
    assert (data.true_attributions(x, 1)[:, 4:] == 0).all()  # nuisance and irrelevant features: nothing


def test_nuisance_correlation_seeds_and_label_noise():
    data = SyntheticTableDataModule(n_rows=4000, correlation=0.8)
    raw, _ = data.load_raw()[:2]
    assert np.corrcoef(raw["linear_0"], raw["correlated_0"])[0, 1] == pytest.approx(0.8, abs=0.03)
    assert abs(np.corrcoef(raw["linear_0"], raw["irrelevant_0"])[0, 1]) < 0.05
    again = SyntheticTableDataModule(n_rows=4000, correlation=0.8).load_raw()[0]
    assert again.equals(raw) and not SyntheticTableDataModule(n_rows=4000, sample_seed=1).load_raw()[0].equals(raw)
    clean = SyntheticTableDataModule(n_rows=4000).load_raw()[1]
    noisy = SyntheticTableDataModule(n_rows=4000, label_noise=0.2).load_raw()[1]
    assert 0.07 < (clean != noisy).mean() < 0.13  # a fifth replaced, half of those by another class


@pytest.mark.parametrize("options, message", [({"n_interacting": 3}, "option n_interacting=3"),
                                              ({"n_linear": 0, "n_interacting": 0}, "at least one relevant"),
                                              ({"num_classes": 1}, "at least 2 classes"),
                                              ({"correlation": 1.0}, "option.*correlation=1.0"),
                                              ({"n_rows": -1}, "option n_rows=-1")])
def test_bad_options(options, message):
    with pytest.raises(InputError, match=message):
        SyntheticTableDataModule(**options)
    data = SyntheticTableDataModule(n_rows=200)
    with pytest.raises(InputError, match="target"):
        data.true_attributions(data.test_tensors[0], 2)
    with pytest.raises(InputError, match="rows of shape"):
        data.true_attributions(torch.zeros(3, 5), 1)


def test_the_truth_of_probed_rows():
    data = SyntheticTableDataModule(n_rows=300)
    x, _ = data.probe(5)
    truth = data.probe_truth(5, 1)
    assert torch.equal(truth["attributions"], data.true_attributions(x, 1))
    assert truth["mask"].shape == (5, 12) and truth["mask"][:, :6].all() and not truth["mask"][:, 6:].any()
    target = torch.tensor([0, 1])  # a chunk's: rows 2 and 3 of the 5, each its own class
    part = data.probe_truth(5, target, part=slice(2, 4))
    assert torch.equal(part["attributions"], data.true_attributions(x[2:4], target))
    assert torch.equal(part["mask"], truth["mask"][2:4])
