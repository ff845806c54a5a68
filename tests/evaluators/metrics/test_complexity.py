"""Sparseness and complexity (evaluators.metrics.complexity) against Quantus 0.6's
``Sparseness`` and ``Complexity``, float64 hand computations and an independent formula
(the Gini index as a mean absolute difference); all-zero and non-finite maps; the Metrics
and the registry with no model."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from evaluators.metrics.complexity import Complexity, Sparseness, complexity, sparseness
from evaluators.metrics.registry import METRICS, score
from foundation.errors import InputError


def gini_by_differences(a: np.ndarray) -> float:
    """Gini index as Σ_i Σ_j |a_i − a_j| / (2 d Σ a): no sorting, a formula of its own."""
    a = np.abs(a.ravel())
    return float(np.abs(a[:, None] - a[None, :]).sum() / (2 * len(a) * a.sum()))


def entropy(a: np.ndarray) -> float:
    p = np.abs(a.ravel()) / np.abs(a).sum()
    return float(-sum(v * math.log(v) for v in p if v > 0))


def test_hand_worked_row():
    phi = torch.tensor([[0.0, -1.0, 3.0]], dtype=torch.float64)
    # |φ| sorted: 0, 1, 3; weights 2i − d − 1 = −2, 0, 2: (0 + 0 + 6) / (3 · 4)
    assert sparseness(phi).item() == pytest.approx(0.5, abs=1e-15)
    # p = 0, 1/4, 3/4
    assert complexity(phi).item() == pytest.approx(-(0.25 * math.log(0.25) + 0.75 * math.log(0.75)), abs=1e-15)


@pytest.mark.parametrize("shape", [(5, 7), (4, 6, 5), (3, 2, 4, 5)])
def test_every_map_shape_against_independent_float64_formulas(shape):
    g = torch.Generator().manual_seed(len(shape))
    maps = torch.randn(shape, generator=g, dtype=torch.float64) ** 3
    maps[0].flatten()[:3] = 0.0  # exact zeros: 0 ln 0 = 0
    for n in range(shape[0]):
        assert sparseness(maps)[n].item() == pytest.approx(gini_by_differences(maps[n].numpy()), abs=1e-12)
        assert complexity(maps)[n].item() == pytest.approx(entropy(maps[n].numpy()), abs=1e-12)


def test_extremes_scale_and_sign():
    d = 12
    one = torch.zeros(1, d, dtype=torch.float64)
    one[0, 5] = -2.0
    uniform = torch.full((1, d), 0.3, dtype=torch.float64)
    assert sparseness(one).item() == pytest.approx(1 - 1 / d) and complexity(one).item() == 0.0
    assert sparseness(uniform).item() == pytest.approx(0.0, abs=1e-15)
    assert complexity(uniform).item() == pytest.approx(math.log(d))
    maps = torch.randn(3, 4, 4, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    for f in (sparseness, complexity):
        torch.testing.assert_close(f(-7.5 * maps), f(maps), rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("channels", [1, 3])
def test_against_quantus(channels):
    """Quantus (abs=True, normalise=True by the max, its defaults) scores the same maps. Its
    Complexity takes ln(p + 1e-12): equal within 1e-9. Its Sparseness adds 1e-7 to every entry
    of the map divided by the largest |value| of the whole batch (``normalise_by_max`` over
    every axis): ours on that shifted map equals it to 1e-12, and on the map itself it differs
    by less than 1e-5 here (the shift pulls towards uniform, and by how much depends on the batch)."""
    import quantus

    rng = np.random.default_rng(channels)
    x = rng.normal(size=(6, 3, 8, 7))
    a = rng.normal(size=(6, channels, 8, 7)) ** 3
    a[1, :, :3] = 0.0
    kwargs = {"model": None, "x_batch": x, "y_batch": np.zeros(6, dtype=int), "channel_first": True}
    theirs_s = np.array(quantus.Sparseness(disable_warnings=True)(a_batch=a.copy(), **kwargs))
    theirs_c = np.array(quantus.Complexity(disable_warnings=True)(a_batch=a.copy(), **kwargs))
    maps = torch.tensor(a)
    np.testing.assert_allclose(complexity(maps).numpy(), theirs_c, rtol=0, atol=1e-9)
    shifted = maps.abs() / maps.abs().max() + 1e-7
    np.testing.assert_allclose(sparseness(shifted).numpy(), theirs_s, rtol=0, atol=1e-12)
    gap = np.abs(sparseness(maps).numpy() - theirs_s)
    assert 0 < gap.max() < 1e-5


def test_an_all_zero_map_is_undefined_and_left_out():
    maps = torch.randn(4, 5, 5, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    maps[2] = 0.0
    for function, metric in ((sparseness, Sparseness()), (complexity, Complexity())):
        values = function(maps)
        assert values.isnan().tolist() == [False, False, True, False]
        metric.update(None, None, maps[:3])
        metric.update(None, None, maps[3:])
        assert (metric.count.item(), metric.left_out.item()) == (3, 1)
        assert metric.compute().item() == pytest.approx(values[[0, 1, 3]].mean().item(), rel=1e-12)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_map_that_is_not_finite_is_refused_naming_it(bad):
    maps = torch.rand(3, 4)
    maps[1, 2] = bad
    for function in (sparseness, complexity):
        with pytest.raises(InputError, match=r"maps: map 1 has 1 (NaN|infinite) value"):
            function(maps)


def test_the_registry_scores_them_without_a_model_and_checks_maps_against_inputs():
    x = torch.rand(2, 3, 4, 5)
    maps = torch.rand(2, 4, 5)
    assert METRICS["sparseness"].needs == METRICS["complexity"].needs == ("maps",)
    assert METRICS["sparseness"].higher_is_better and not METRICS["complexity"].higher_is_better
    torch.testing.assert_close(score("sparseness", None, x, maps), sparseness(maps), rtol=0, atol=0)
    torch.testing.assert_close(score("complexity", None, x, x), complexity(x), rtol=0, atol=0)  # (C, H, W) maps
    with pytest.raises(InputError, match=r"maps of shape \(2, 5, 4\) for inputs x of shape \(2, 3, 4, 5\)"):
        score("complexity", None, x, maps.transpose(1, 2))
    with pytest.raises(InputError, match=r"maps of shape \(2,\); expected float maps"):
        score("sparseness", None, None, torch.rand(2))
