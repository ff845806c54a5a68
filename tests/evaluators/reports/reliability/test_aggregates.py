"""Aggregates of the explainers' maps: z-scored maps merged by mean and UCB, by hand in numpy
(float64) on tiny image maps; no aggregate with one explainer."""

from __future__ import annotations

import numpy as np
import torch

from evaluators.reports.reliability.aggregates import aggregate_maps, aggregate_section, aggregate_units


def z_scored(m: np.ndarray) -> np.ndarray:
    """Each (H, W) map minus its mean over pixels, over its population std."""
    mu, sd = m.mean((-2, -1), keepdims=True), m.std((-2, -1), keepdims=True)
    return (m - mu) / sd


def test_mean_and_ucb_of_z_scored_maps_by_hand():
    g = torch.Generator().manual_seed(0)
    maps = {e: torch.randn(2, 3, 4, 4, generator=g, dtype=torch.float64) for e in ("saliency", "smoothgrad", "ig")}
    out = aggregate_maps(maps, "z", {"mean": {}, "ucb": {"eps": -0.5}}, map_dims=2)
    stack = np.stack([z_scored(m.numpy()) for m in maps.values()])  # (E, M, N, H, W)
    assert sorted(out) == ["aggregate:mean", "aggregate:ucb"] and out["aggregate:mean"].dtype == torch.float64
    assert np.allclose(out["aggregate:mean"].numpy(), stack.mean(0), atol=1e-12)
    assert np.allclose(out["aggregate:ucb"].numpy(), stack.mean(0) - 0.5 * stack.std(0), atol=1e-12)


def test_rows_are_normalised_over_their_features():
    g = torch.Generator().manual_seed(1)
    maps = {e: torch.randn(2, 3, 5, generator=g, dtype=torch.float64) for e in ("saliency", "input_x_gradient")}
    out = aggregate_maps(maps, "l1", {"mean": {}}, map_dims=1)
    by_hand = np.mean([m.numpy() / np.abs(m.numpy()).sum(-1, keepdims=True) for m in maps.values()], 0)
    assert np.allclose(out["aggregate:mean"].numpy(), by_hand, atol=1e-12)


def test_one_explainer_has_no_aggregate():
    one = {"saliency": {"maps": torch.zeros(3, 2, 4)}}
    assert aggregate_units(None, None, one, {}) == {}
    assert aggregate_section(None, {}, 2, [0, 1, 2], ["saliency"]) == {"available": False,
                                                                       "why": "fewer than two explainers"}
