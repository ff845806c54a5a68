"""Similarity measures of the sanity checks (evaluators/metrics/similarity.py) against scipy,
scikit-image and float64 hand computations; ties, constant maps, bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats
import torch
from skimage.feature import hog
from skimage.metrics import structural_similarity

from evaluators.metrics.similarity import (
    MEASURES, average_ranks, checked_measures, hog_features, measures_for, similarity,
)  # fmt: skip
from foundation.errors import InputError
from foundation.modality import IMAGES, ROWS


def maps(n=6, h=32, w=32, seed=0, ties=False):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(n, h, w, generator=g)
    b = 0.7 * a + torch.randn(n, h, w, generator=g)
    if ties:  # many tied values, also tied absolute values of opposite sign
        a, b = (a * 2).round() / 2, (b * 2).round() / 2
    return a, b


@pytest.mark.parametrize("ties", [False, True])
def test_ranks_as_scipy_rankdata(ties):
    a, _ = maps(4, 8, 8, ties=ties)
    rows = a.reshape(4, -1)
    expected = np.stack([scipy.stats.rankdata(r, method="average") for r in rows.numpy()])
    assert torch.equal(average_ranks(rows), torch.from_numpy(expected))


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("shape", [(5, 32, 32), (7, 23)])
def test_spearman_as_scipy(ties, shape):
    g = torch.Generator().manual_seed(1)
    a = torch.randn(*shape, generator=g)
    b = 0.5 * a + torch.randn(*shape, generator=g)
    if ties:
        a, b = a.round(), b.round()
    for measure, f in (("spearman", lambda t: t), ("spearman_abs", np.abs)):
        got = similarity(a, b, measure)
        assert got.dtype == torch.float64 and got.shape == (shape[0],)
        expected = [scipy.stats.spearmanr(f(x.ravel()), f(y.ravel()))[0] for x, y in zip(a.numpy(), b.numpy())]
        np.testing.assert_allclose(got.numpy(), expected, rtol=0, atol=1e-12)


def test_spearman_by_hand():
    a = torch.tensor([[1.0, 2, 3, 4], [1, 1, 2, 3], [-3, 1, 2, 0]])
    b = torch.tensor([[1.0, 3, 2, 4], [1, 2, 3, 4], [1, 2, 3, 0]])
    # 1 − 6 Σd²/(n(n²−1)) = 1 − 12/60; ties: ranks (1.5, 1.5, 3, 4): 4.5 / √(4.5·5);
    # row 3: |a| ranks (4, 2, 3, 1) against (2, 3, 4, 1); signed, (1, 3, 4, 2) against (2, 3, 4, 1)
    expected = [0.8, 4.5 / math.sqrt(22.5), 1 - 6 * (4 + 1 + 1 + 0) / 60]
    np.testing.assert_allclose(similarity(a, b, "spearman_abs").numpy(), expected, rtol=0, atol=1e-15)
    assert similarity(a, b, "spearman")[2] == pytest.approx(1 - 6 * (1 + 0 + 0 + 1) / 60, abs=1e-15)


@pytest.mark.parametrize("ties", [False, True])
def test_ssim_as_skimage(ties):
    a, b = maps(5, 32, 28, ties=ties)
    b[1] = b[1] * 50  # ranges that differ a lot
    expected = [structural_similarity(x, y, data_range=float(max(x.max(), y.max()) - min(x.min(), y.min())))
                for x, y in zip(a.double().numpy(), b.double().numpy())]  # fmt: skip
    np.testing.assert_allclose(similarity(a, b, "ssim").numpy(), expected, rtol=0, atol=1e-12)
    assert torch.allclose(similarity(a, a, "ssim"), torch.ones(5, dtype=torch.float64), atol=1e-12)


def test_ssim_by_hand_one_window():
    """A 7 × 7 map has one window: the SSIM formula with sample (co)variances, in float64."""
    a, b = maps(1, 7, 7, seed=3)
    x, y = a[0].double().flatten().tolist(), b[0].double().flatten().tolist()
    n = len(x)
    mx, my = sum(x) / n, sum(y) / n
    vx = sum((v - mx) ** 2 for v in x) / (n - 1)
    vy = sum((v - my) ** 2 for v in y) / (n - 1)
    cxy = sum((u - mx) * (v - my) for u, v in zip(x, y)) / (n - 1)
    r = max(x + y) - min(x + y)
    c1, c2 = (0.01 * r) ** 2, (0.03 * r) ** 2
    expected = (2 * mx * my + c1) * (2 * cxy + c2) / ((mx**2 + my**2 + c1) * (vx + vy + c2))
    assert float(similarity(a, b, "ssim")[0]) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("shape", [(4, 32, 32), (2, 50, 37)])
def test_hog_as_skimage(shape):
    """Features to 1e-7 (scikit-image sums each cell in float32), correlations to 1e-7."""
    a, b = maps(*shape)
    a[0, :6] = a[0, :6].round()  # flat regions: zero gradients
    np.testing.assert_allclose(hog_features(a).numpy(), np.stack([hog(x) for x in a.double().numpy()]), atol=1e-7)
    expected = [np.corrcoef(hog(x), hog(y))[0, 1] for x, y in zip(a.double().numpy(), b.double().numpy())]
    np.testing.assert_allclose(similarity(a, b, "hog_pearson").numpy(), expected, rtol=0, atol=1e-7)
    assert torch.allclose(similarity(a, a, "hog_pearson"), torch.ones(len(a), dtype=torch.float64), atol=1e-12)


def test_constant_maps_are_nan():
    a, b = maps(3, 32, 32)
    a[1] = 0.0  # a constant map: no correlation, no HOG (all-zero features)
    b[2] = a[2] = 0.25  # two equal constant maps: data range 0
    for measure in ("spearman", "spearman_abs", "hog_pearson"):
        got = similarity(a, b, measure)
        assert got[0].isfinite() and got[1].isnan(), measure
        with np.errstate(invalid="ignore"):
            assert np.isnan(scipy.stats.spearmanr(a[1].ravel(), b[1].ravel())[0])
    assert similarity(a, b, "ssim")[2].isnan() and similarity(a, b, "ssim")[:2].isfinite().all()


def test_bad_input():
    a, b = maps(3, 32, 32)
    bad = a.clone()
    bad[2, 4, 4] = float("nan")
    with pytest.raises(InputError, match=r"maps b: map 2 has 1 NaN"):
        similarity(a, bad, "spearman")
    bad[2, 4, 4] = float("inf")
    with pytest.raises(InputError, match=r"gradcam: map 2 has 1 infinite"):
        similarity(bad, b, "ssim", names=("gradcam", "original"))
    with pytest.raises(InputError, match="unknown similarity measure 'pearson'"):
        similarity(a, b, "pearson")
    with pytest.raises(InputError, match="equal shapes"):
        similarity(a, b[:2], "spearman")
    for measure in ("ssim", "hog_pearson"):
        with pytest.raises(InputError, match=f"'{measure}' takes image maps"):
            similarity(a.flatten(1), b.flatten(1), measure)
    with pytest.raises(InputError, match="at least 24 x 24"):
        similarity(a[:, :16, :16], b[:, :16, :16], "hog_pearson")
    with pytest.raises(InputError, match="float tensor"):
        similarity(a.numpy(), b, "spearman")
    assert MEASURES == ("spearman_abs", "spearman", "ssim", "hog_pearson")


def test_a_measures_option_is_checked_against_the_measures_and_the_maps_modality():
    assert measures_for(IMAGES) == list(MEASURES) and measures_for(ROWS) == ["spearman_abs", "spearman"]
    assert checked_measures(None, ROWS) == ["spearman_abs", "spearman"] and checked_measures(("spearman", "ssim")) == [
        "spearman", "ssim"]  # fmt: skip
    for bad in ("spearman", [], ["pearson"], None):
        with pytest.raises(InputError, match="option measures=.*expected a non-empty list"):
            checked_measures(bad)
    with pytest.raises(InputError, match=r"unknown measure\(s\) \['pearson'\]"):
        checked_measures(["spearman", "pearson"])
    with pytest.raises(InputError, match=r"option measures: \['ssim'\] compare 2-D image maps; tabular maps \(rows\)"):
        checked_measures(["spearman", "ssim"], ROWS)
    for modality in (ROWS, IMAGES):  # each measure it allows takes such maps
        shape = (2, 24, 24) if modality is IMAGES else (2, 9)
        maps = torch.rand(*shape, dtype=torch.float64)
        assert all(similarity(maps, maps + 0.1 * maps.flip(-1), m).shape == (2,) for m in measures_for(modality))
