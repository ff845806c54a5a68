"""Infidelity (Yeh et al. 2019), with the perturbations of Decker et al. (2024, App. C.1).

For an input x, its explained output f (the logit of the target class of an image
classifier, the positive-class ``explained_output`` of a tabular model) and a map φ(x),
Yeh et al.'s infidelity over random perturbations I is

    INFD(φ) = E_I [(Iᵀφ(x) − (f(x) − f(x − I)))²].

Decker et al. use binary I ∈ {0, 1}^d that remove a random 20 % of the input's
superpixels (features), replaced from a blurred copy (the feature means):
Iᵀφ is the attribution summed over the removed units and the output change is
Δf = f(x) − f(h(x, x_b, I)) (``evaluators.metrics.perturbations``). Estimated on n samples
I_1 … I_n, with a_s = I_sᵀφ and Δ_s = Δf_s:

    INFD(φ) = (1/n) Σ_s (β a_s − Δ_s)²,  β = Σ_s a_s Δ_s / Σ_s a_s²,

β being Yeh et al.'s normalisation (their code; Captum's ``infidelity(normalize=True)``):
the least-squares scale of the map, min_β (1/n) Σ_s (β a_s − Δ_s)², so that the score does
not depend on the map's scale (β = 0 where every a_s = 0, as Captum's ``safe_div``).
``normalize=False`` takes β = 1. Lower is better.

``subset_perturbations(model, x, target=None, ...)`` draws the samples (superpixel, pixel or
feature subsets, ``n_samples=200``, Decker et al.'s m_eval) and evaluates the model on the
perturbed inputs: N·n forward rows, ``max_batch`` at a time, without gradients, in eval
mode (the previous mode is restored), on the model's device. ``infidelity(maps, samples)``
scores maps on those samples, so that several maps of the same inputs (every explainer,
every aggregate) are scored on the same samples. Maps, and NaN or ±inf refused (also in a
baseline tensor): as ``evaluators.metrics.model_scores`` says.

``Infidelity`` (a ``Metric``, ``SubsetMetric``) averages INFD over the inputs of its updates.
"""

from __future__ import annotations

import torch
from torch import nn

from foundation.finite import check_finite
from evaluators.metrics.base import MeanOverInputs
from evaluators.metrics.registry import METRICS
from evaluators.metrics.model_scores import check_inputs, explained_scores, resolve_targets
from evaluators.metrics.perturbations import (
    BLUR_SIGMA,
    COMPACTNESS,
    N_SEGMENTS,
    SHARE,
    SubsetSamples,
    feature_groups,
    gaussian_blur,
    pixel_groups,
    subset_choices,
    superpixels,
    tensor_baseline,
    unit_masks,
)
from foundation.batching import resolve_max_batch
from foundation.devices import model_device
from foundation.errors import InputError
from foundation.modality import Modality
from lightning_modules.interface import eval_mode

M_EVAL = 200  # Decker et al.: every metric on 200 fresh samples
UNITS = ("superpixels", "pixels")


def _replacement(x: torch.Tensor, baseline, blur_sigma: float, modality: Modality) -> torch.Tensor:
    if isinstance(baseline, torch.Tensor):
        return tensor_baseline(x, baseline)
    if baseline is not None:
        raise InputError(f"option baseline={baseline!r}; expected None (a blurred copy of each image) or a tensor")
    if not modality.spatial:
        raise InputError(f"option baseline: {modality.kind} {modality.noun} need the replacement values, a tensor of "
                         f"the training set's {modality.unit} means (one per {modality.unit})")  # fmt: skip
    return gaussian_blur(x, blur_sigma)


def subset_perturbations(
    model: nn.Module, x: torch.Tensor, target=None, n_samples: int = M_EVAL, share: float = SHARE,
    baseline: torch.Tensor | None = None, blur_sigma: float = BLUR_SIGMA, n_segments: int = N_SEGMENTS,
    compactness: float = COMPACTNESS, seed: int = 0, stream: str = "evaluation", max_batch: int | None = None,
    units: str = "superpixels", offset: int = 0,
) -> SubsetSamples:
    """Decker et al.'s infidelity perturbations of x and the model's response (see the
    module's docstring and ``evaluators.metrics.perturbations``).

    Args:
        model: an image classifier (N, C, H, W) -> (N, K) logits, or a tabular model.
        x: images (N, C, H, W) or rows (N, d).
        target: None (the predicted class), an int or N labels; tabular: None or 1.
        n_samples: samples per input.
        share: the share of groups (superpixels, features) each sample removes.
        baseline: the replacement values, a tensor of x's shape or one input's; None: each
            image blurred with ``blur_sigma`` (tabular rows need a tensor: feature means).
        n_segments, compactness: SLIC's options (images).
        seed, stream: the draws (``perturbations.sample_generator``); ``offset``: the index of x's
            first input (its draws those of index offset + i), so a split drawn in parts draws as at once.
        max_batch: the most rows one forward pass sees (None: ``resolve_max_batch``).
        units: the groups of an image's pixels that samples remove (``UNITS``): ``"superpixels"``
            (Decker et al.) or ``"pixels"`` (each pixel its own group); tabular rows: features.
    """
    modality = check_inputs(model, x)
    if units not in UNITS:
        raise InputError(f"option units={units!r}; expected one of {list(UNITS)}")
    with eval_mode(model):
        with torch.no_grad():
            x = x.detach().to(model_device(model, x))
            max_batch = resolve_max_batch(max_batch, x)
            target = resolve_targets(model, x, target, max_batch)
            base = _replacement(x, baseline, blur_sigma, modality)
            if modality.spatial:
                groups = superpixels(x, n_segments, compactness) if units == "superpixels" else pixel_groups(x)
            else:
                groups = feature_groups(x)
            chosen = subset_choices(groups, n_samples, share, seed, stream, offset)
            n_samples = chosen.shape[1]
            clean = explained_scores(model, x, target)
            outputs = []
            for rows in torch.arange(len(x) * n_samples, device=x.device).split(max_batch):
                i, s = rows // n_samples, rows % n_samples
                removed = unit_masks(groups[i], chosen[i, s])
                removed = modality.unit_mask(removed)  # all channels of a pixel
                perturbed = torch.where(removed, base[i], x[i])
                outputs.append(explained_scores(model, perturbed, target[i]))
            deltas = clean[:, None] - torch.cat(outputs).view(len(x), n_samples)
    return SubsetSamples(groups, chosen, deltas)


def check_maps(maps, samples: SubsetSamples) -> None:
    shape = tuple(samples.groups.shape)
    if not isinstance(maps, torch.Tensor) or tuple(maps.shape) != shape or not maps.is_floating_point():
        raise InputError(f"maps of shape {tuple(getattr(maps, 'shape', ()))}; expected float maps {shape}, one "
                         "value per pixel (reduce (N, C, H, W) maps with reduce_map) or per feature")  # fmt: skip
    check_finite(maps, "maps", "map")


def least_squares_scale(sums: torch.Tensor, deltas: torch.Tensor) -> torch.Tensor:
    """Yeh et al.'s β per input (and per trailing column): Σ_s a_s Δ_s / Σ_s a_s² over the
    samples (dim 1) of ``sums`` (N, n, ...) and ``deltas`` (N, n); 0 where Σ_s a_s² = 0."""
    deltas = deltas.view(*deltas.shape, *(1,) * (sums.dim() - 2))
    numerator, denominator = (sums * deltas).sum(1), (sums * sums).sum(1)
    positive = denominator > 0
    return torch.where(positive, numerator / torch.where(positive, denominator, 1), 0)


def infidelity(maps: torch.Tensor, samples: SubsetSamples, normalize: bool = True) -> torch.Tensor:
    """(N,) infidelity of ``maps`` (N, *S) on ``samples`` (from ``subset_perturbations``),
    in the maps' and deltas' common dtype: (1/n) Σ_s (β a_s − Δ_s)² (β = 1 unless ``normalize``)."""
    check_maps(maps, samples)
    deltas = samples.deltas.to(maps.device)
    dtype = torch.promote_types(maps.dtype, deltas.dtype)
    sums = samples.attribution_sums(maps.to(dtype))
    deltas = deltas.to(dtype)
    beta = least_squares_scale(sums, deltas)[:, None] if normalize else 1
    return (beta * sums - deltas).pow(2).mean(1)


class SubsetMetric(MeanOverInputs):
    """The mean over inputs of ``score(maps, samples)`` (N,), the maps scored on
    ``subset_perturbations`` drawn with this metric's options (n_samples, share, baseline,
    blur_sigma, n_segments, compactness, units, seed, max_batch) by every ``update(model, x,
    maps, target=None)`` (the states and their reduction: ``evaluators.metrics.base``)."""

    def __init__(self, n_samples: int = M_EVAL, share: float = SHARE, baseline: torch.Tensor | None = None,
                 blur_sigma: float = BLUR_SIGMA, n_segments: int = N_SEGMENTS, compactness: float = COMPACTNESS,
                 units: str = "superpixels", seed: int = 0, max_batch: int | None = None,
                 **kwargs) -> None:  # fmt: skip
        super().__init__({"n_samples": n_samples, "share": share, "baseline": baseline, "blur_sigma": blur_sigma,
                          "n_segments": n_segments, "compactness": compactness, "units": units, "seed": seed,
                          "max_batch": max_batch}, **kwargs)  # fmt: skip

    def scores(self, model: nn.Module, x: torch.Tensor, maps: torch.Tensor, target=None, explain_fn=None):
        samples = subset_perturbations(model, x, target, **self.options)
        return self.score(maps.to(samples.deltas.device), samples)


@METRICS.register("infidelity", needs=("model", "maps"), higher_is_better=False, function=infidelity)
class Infidelity(SubsetMetric):
    """The mean infidelity (lower is better); args: ``normalize`` and those of ``SubsetMetric``."""

    higher_is_better = False

    def __init__(self, normalize: bool = True, **options) -> None:
        super().__init__(**options)
        self.normalize = normalize

    def score(self, maps: torch.Tensor, samples: SubsetSamples) -> torch.Tensor:
        return infidelity(maps, samples, self.normalize)
