"""The fidelity metrics' shared helpers (a smooth tiny CNN, inputs and maps, one input's output
and units replaced by hand) and their bad input, each refusal naming its option: faithfulness
correlation (its tests: test_faithfulness_correlation.py), ROAD (test_road.py) and relative
stability (test_relative_stability.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from evaluators.metrics.faithfulness_correlation import FaithfulnessCorrelation, faithfulness_correlation
from evaluators.metrics.infidelity import subset_perturbations
from evaluators.metrics.relative_stability import RelativeStability, relative_stability
from evaluators.metrics.road import ROADLeRF, road_curves
from foundation.errors import InputError
from tests.support.tiny_models import tiny_conv_net, tiny_mlp


def tiny_cnn(**options) -> nn.Module:
    """:func:`tiny_conv_net` with Softplus, so that the model is smooth."""
    return tiny_conv_net(activation=nn.Softplus, **options)


def data(shape, seed: int, maps_shape=None):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=gen, dtype=torch.float64)
    maps_shape = maps_shape or ((shape[0], *shape[2:]) if len(shape) == 4 else shape)
    return x, torch.randn(*maps_shape, generator=gen, dtype=torch.float64)


def scalar_output(model, single: np.ndarray, target: int, output: str) -> float:
    """f of one input, by hand: the target's logit (a tabular model's explained output) or
    its softmax probability computed here."""
    batch = torch.from_numpy(single)[None]
    if output == "logit" and hasattr(model, "explained_output"):
        return model.explained_output(batch).item()
    logits = model(batch).detach().numpy()[0]
    if output == "logit":
        return float(logits[target])
    e = np.exp(logits - logits.max())
    return float(e[target] / e.sum())


def replace_units(single: np.ndarray, units, values: np.ndarray) -> np.ndarray:
    """``single`` with the given flat units (pixels: all channels; features) taken from ``values``."""
    out = single.copy()
    for u in units:
        if single.ndim == 1:
            out[u] = values[u]
        else:
            r, c = divmod(int(u), single.shape[2])
            out[:, r, c] = values[:, r, c]
    return out


class LinearScore(nn.Module):
    """Logits (0, Σ w x) of one-channel images: removing S (to 0) drops the logit by Σ_S w x."""

    def __init__(self, w: torch.Tensor) -> None:
        super().__init__()
        self.w = nn.Parameter(w)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        score = (x[:, 0] * self.w).sum((1, 2))
        return torch.stack([torch.zeros_like(score), score], -1)


def _explain(v, t):
    return v.sum(1)


def _fcor(m, x, a, target=None, **options):
    metric = FaithfulnessCorrelation(n_samples=3, **options)
    metric.update(m, x, a, target)


@pytest.mark.parametrize("call, option", [
    (lambda m, x, a: _fcor(m, x, a, share=1.5), "option share"),
    (lambda m, x, a: _fcor(m, x, a, units="patches"), "units="),
    (lambda m, x, a: _fcor(m, x, a[:, :4]), "maps of shape"),
    (lambda m, x, a: faithfulness_correlation(a[:, None], subset_perturbations(m, x, n_samples=2)), "maps of shape"),
    (lambda m, x, a: road_curves(m, x, a, "top"), "order="),
    (lambda m, x, a: road_curves(m, x, a, percentages=(10, 100)), "percentages="),
    (lambda m, x, a: road_curves(m, x, a, percentages=()), "percentages="),
    (lambda m, x, a: road_curves(m, x, a, output="auc"), "output="),
    (lambda m, x, a: road_curves(m, x, a, noise=-1.0), "noise="),
    (lambda m, x, a: road_curves(m, x, a, feature_means=torch.zeros(2)), "feature_means"),
    (lambda m, x, a: road_curves(m, x, a, target=[0, 1, 2]), "target="),
    (lambda m, x, a: road_curves(m, x, a * float("nan")), "NaN"),
    (lambda m, x, a: ROADLeRF(percentages=[120]), "percentages="),
    (lambda m, x, a: relative_stability(m, x, a, _explain, n_samples=0), "n_samples="),
    (lambda m, x, a: relative_stability(m, x, a, _explain, radius=0), "radius="),
    (lambda m, x, a: relative_stability(m, x, a, _explain, p=0.5), "p="),
    (lambda m, x, a: relative_stability(m, x, a, _explain, change="log"), "change="),
    (lambda m, x, a: relative_stability(m, x, a, _explain, layer="fc9"), "layer="),
    (lambda m, x, a: relative_stability(m, x, a, _explain, ros_output="probabilities"), "ros_output="),
    (lambda m, x, a: relative_stability(m, x, a, None), "explain_fn="),
    (lambda m, x, a: relative_stability(m, x, a, lambda v, t: v, n_samples=2), "explain_fn returned"),
    (lambda m, x, a: relative_stability(m, x, a, _explain, perturbed=x), "perturbed"),
    (lambda m, x, a: RelativeStability(eps_min=0.0), "eps_min="),
])  # fmt: skip
def test_bad_input_raises_input_error_naming_the_option(call, option):
    x = torch.randn(3, 2, 5, 6, dtype=torch.float64)
    with pytest.raises(InputError, match=option):
        call(tiny_cnn(), x, torch.rand(3, 5, 6, dtype=torch.float64))


@pytest.mark.parametrize("call, option", [
    (lambda m, x, a: _fcor(m, x, a), "feature means"),
    (lambda m, x, a: _fcor(m, x, a, baseline=torch.zeros(6), target=7), "target="),  # no class 7
    (lambda m, x, a: road_curves(m, x, a), "feature_means"),
    (lambda m, x, a: road_curves(m, x, a, feature_means=torch.zeros(5)), "feature_means"),
])  # fmt: skip
def test_bad_tabular_input_raises_input_error_naming_the_option(call, option):
    x = torch.randn(3, 6, dtype=torch.float64)
    with pytest.raises(InputError, match=option):
        call(tiny_mlp(), x, torch.rand(3, 6, dtype=torch.float64))
