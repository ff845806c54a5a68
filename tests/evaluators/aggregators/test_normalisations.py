"""Normalisations of explanation maps (evaluators/aggregators/normalisations.py; Mahlau & Nolde
2022, eqs. 1-4, and Decker et al.'s absmax) against a direct float64 NumPy computation map by map,
in float32 too; constant, zero and tied maps by hand. Maps with NaN or ±inf:
tests/faults/test_nonfinite.py."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from evaluators.aggregators.normalisations import NORMALISATIONS, normalise
from foundation.errors import InputError
from tests.evaluators.aggregators.test_pixel_aggregators import SHAPES


def reference_normalise(maps: np.ndarray, how: str, map_dims: int) -> np.ndarray:
    rows = maps.reshape(-1, math.prod(maps.shape[-map_dims:]))
    out = np.zeros_like(rows)
    for r, e in enumerate(rows):
        if how == "linear" and e.max() > e.min():
            out[r] = (e - e.min()) / (e.max() - e.min())
        elif how == "z" and e.max() > e.min():
            out[r] = (e - e.mean()) / np.std(e)
        elif how == "l1" and np.abs(e).sum() > 0:
            out[r] = e / np.abs(e).sum()
        elif how == "l2" and np.linalg.norm(e) > 0:
            out[r] = e / np.linalg.norm(e)
        elif how == "absmax" and np.abs(e).max() > 0:
            out[r] = np.abs(e) / np.abs(e).max()
        elif how == "none":
            out[r] = e
    return out.reshape(maps.shape)


@pytest.mark.parametrize("map_dims", [2, 1])
@pytest.mark.parametrize("how", list(NORMALISATIONS))
def test_normalisations_match_reference(how, map_dims):
    rng = np.random.default_rng(1)
    maps = rng.normal(size=(2,) + SHAPES[map_dims]) * 3 + 1
    maps[0, 0] = 2.5  # a constant map
    maps[1, 1] = 0.0  # the zero map
    maps[1, 2] = np.round(maps[1, 2])  # ties
    out = normalise(torch.from_numpy(maps), how, map_dims)
    assert out.shape == maps.shape and out.dtype == torch.float64 and torch.isfinite(out).all()
    np.testing.assert_allclose(out.numpy(), reference_normalise(maps, how, map_dims), rtol=1e-12, atol=1e-14)
    out32 = normalise(torch.from_numpy(maps).float(), how, map_dims)
    assert out32.dtype == torch.float32
    np.testing.assert_allclose(out32.numpy(), out.numpy(), rtol=1e-5, atol=1e-6)


def test_normalisation_ranges_and_constant_maps():
    maps = torch.tensor([[[4.0, 4.0], [4.0, 4.0]], [[-3.0, 1.0], [0.0, 2.0]]], dtype=torch.float64)
    assert torch.equal(normalise(maps, "linear")[0], torch.zeros(2, 2, dtype=torch.float64))
    assert torch.equal(normalise(maps, "z")[0], torch.zeros(2, 2, dtype=torch.float64))
    assert normalise(maps, "linear")[1].tolist() == [[0.0, 0.8], [0.6, 1.0]]  # hand: (e + 3) / 5
    assert normalise(maps, "absmax")[1].tolist() == [[1.0, 1 / 3], [0.0, 2 / 3]]
    assert normalise(maps, "l1")[0].tolist() == [[0.25, 0.25], [0.25, 0.25]]  # a nonzero constant is a map for l1
    z = normalise(maps, "z")[1]
    assert z.mean().abs() < 1e-15 and abs(z.std(correction=0).item() - 1) < 1e-15


def test_bad_options_are_named():
    maps = torch.zeros(2, 3, 3)
    for call, message in ((lambda: normalise(maps, "max"), "option how='max'"),
                          (lambda: normalise(maps, "z", map_dims=0), "option map_dims=0"),
                          (lambda: normalise(maps.long(), "z"), "maps of type torch.int64"),
                          (lambda: normalise(torch.zeros(3), "z"), r"maps of shape \(3,\) with map_dims=2"),
                          ):  # fmt: skip
        with pytest.raises(InputError, match=message):
            call()
