"""The maps the sanity checks compare: the project's explainer registry (``evaluators.maps.explain``)
on all inputs at once, image maps reduced over channels (``reduce_map``); denoised maps of the
smooth MPRT (Hedström et al. 2023, ``smoothed_maps``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import nn

from evaluators.maps import EXPLAINERS, explain
from evaluators.maps.batches import normal
from foundation.modality import REDUCTIONS, reduce_map
from evaluators.metrics.similarity import checked_measures
from foundation.devices import model_device
from foundation.errors import InputError
from foundation.seeds import derived_seed
from lightning_modules.interface import default_targets


def explainer_options(explainers: Sequence[str] | Mapping[str, Mapping]) -> dict[str, dict]:
    """``{name: options}`` from a list of registry names or such a mapping (options passed to
    ``explain``, e.g. ``{"integrated_gradients": {"n_steps": 20}}``)."""
    if isinstance(explainers, str) or not isinstance(explainers, (Sequence, Mapping)) or not explainers:
        raise InputError(f"option explainers={explainers!r}; expected a non-empty list of explainer names "
                         f"or a mapping name -> options, names from {sorted(EXPLAINERS)}")  # fmt: skip
    named = dict(explainers) if isinstance(explainers, Mapping) else {name: {} for name in explainers}
    for name, options in named.items():
        if name not in EXPLAINERS:
            raise InputError(f"unknown explainer {name!r}; expected one of {sorted(EXPLAINERS)}")
        if not isinstance(options, Mapping):
            raise InputError(f"explainer {name!r}: options {options!r}; expected a mapping")
    return {name: dict(options) for name, options in named.items()}


def check_reduction(reduction: str) -> None:
    if reduction not in REDUCTIONS:
        raise InputError(f"option reduction={reduction!r}; expected one of {list(REDUCTIONS)}")


def maps_of(model: nn.Module, x: torch.Tensor, target: torch.Tensor, name: str, options: dict, seed: int,
            reduction: str) -> torch.Tensor:  # fmt: skip
    """Maps of ``target`` (N,) by explainer ``name``: (N, H, W) for images (channels reduced by
    ``reduction``), (N, d) for rows; every input's random draws from ``seed`` (the same draws for
    every model compared)."""
    maps = explain(model, x, name, target=target, seed=seed, **options)
    if maps.dim() not in (2, 4) or len(maps) != len(x):
        raise InputError(f"explainer {name!r} gave maps of shape {tuple(maps.shape)} for inputs of shape "
                         f"{tuple(x.shape)}; the sanity checks take images (N, C, H, W) or rows (N, d) of one model")
    return reduce_map(maps, reduction) if maps.dim() == 4 else maps


NOISE_KEY = 1  # input i's denoising noise: derived_seed(seed, i, NOISE_KEY), apart from its explainer draws


def smoothed_maps(model: nn.Module, x: torch.Tensor, target: torch.Tensor, name: str, options: dict, seed: int,
                  reduction: str, n_samples: int = 1, noise_magnitude: float = 0.0,
                  noise: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
    """The smooth MPRT's denoised maps (Hedström et al. 2023, §4.1):
    ē(x_i) = 1/S · Σ_{s<S} e(x_i + ε_{s,i}), with ε_{s,i} = z_{s,i} · σ · (max x_i − min x_i),
    z ~ N(0, 1) for s < S − 1 and ε_{S−1,i} = 0, so ``n_samples`` S = 1 gives ``maps_of``'s
    maps unchanged. ``noise_magnitude`` σ scales the noise to each input's value range
    (Quantus's ``SmoothMPRT``: ``noise_magnitude``, ``nr_samples``). Input i's z are drawn from
    ``derived_seed(seed, i, NOISE_KEY)`` (the same for every model compared); ``noise``
    (S − 1, N, ...) gives them instead. Each noisy input is formed and the mean accumulated in
    float64 (the inputs cast back to ``x``'s dtype before explaining): float64 maps (N, ...)
    when S > 1."""
    if isinstance(n_samples, bool) or not isinstance(n_samples, int) or n_samples < 1:
        raise InputError(f"option n_samples={n_samples!r}; expected a positive integer (noisy copies per input)")
    if isinstance(noise_magnitude, bool) or not isinstance(noise_magnitude, (int, float)) \
            or not 0 <= noise_magnitude < float("inf"):
        raise InputError(f"option noise_magnitude={noise_magnitude!r}; expected a non-negative number (the "
                         "noise's std as a share of each input's value range)")  # fmt: skip
    if n_samples == 1:
        return maps_of(model, x, target, name, options, seed, reduction)
    if noise is None:
        noise = torch.stack([normal((n_samples - 1, *x.shape[1:]), 1.0, derived_seed(seed, i, NOISE_KEY), x.device)
                             for i in range(len(x))], 1)  # fmt: skip
    if noise.shape != (n_samples - 1, *x.shape):
        raise InputError(f"noise of shape {tuple(noise.shape)}; expected {(n_samples - 1, *x.shape)} "
                         "(n_samples - 1 standard-normal draws per input)")  # fmt: skip
    flat = x.double().flatten(1)
    scale = (noise_magnitude * (flat.amax(1) - flat.amin(1))).view(-1, *[1] * (x.dim() - 1))
    total = None
    for s in range(n_samples):
        noisy = x if s == n_samples - 1 else (x.double() + noise[s].to(x.device).double() * scale).to(x.dtype)
        maps = maps_of(model, noisy, target, name, options, seed, reduction).double() / n_samples
        total = maps if total is None else total + maps
    return total


__all__ = ["NOISE_KEY", "check_reduction", "explainer_options", "maps_of", "smoothed_maps"]


def prepared(model: nn.Module, x: torch.Tensor, target, explainers: Sequence[str] | Mapping[str, Mapping],
             measures: Sequence[str] | None,
             reduction: str) -> tuple[dict[str, dict], list[str] | None, torch.Tensor, torch.Tensor]:  # fmt: skip
    """The checked ``{explainer: options}`` and measures (None: none to check), ``x`` on the
    model's device and the explained class per input (``default_targets``: the predicted class
    where ``target`` is None)."""
    check_reduction(reduction)
    options = explainer_options(explainers)
    measures = None if measures is None else checked_measures(measures)
    x = x.detach().to(model_device(model, x))
    with torch.no_grad():
        target = default_targets(model, x, target)
    return options, measures, x, target
