"""The maps the sanity checks compare: the project's explainer registry (``evaluators.maps.explain``)
on all inputs at once, image maps reduced over channels (``reduce_map``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import nn

from evaluators.maps import EXPLAINERS, explain
from foundation.modality import REDUCTIONS, reduce_map
from evaluators.metrics.similarity import MEASURES
from foundation.devices import model_device
from foundation.errors import InputError
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


def check_measures(measures: Sequence[str]) -> list[str]:
    if isinstance(measures, str) or not measures or any(m not in MEASURES for m in measures):
        raise InputError(f"option measures={measures!r}; expected a non-empty list from {list(MEASURES)}")
    return list(measures)


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


__all__ = ["check_measures", "check_reduction", "explainer_options", "maps_of"]


def prepared(model: nn.Module, x: torch.Tensor, target, explainers: Sequence[str] | Mapping[str, Mapping],
             measures: Sequence[str], reduction: str) -> tuple[dict[str, dict], list[str], torch.Tensor, torch.Tensor]:
    """The checked ``{explainer: options}`` and measures, ``x`` on the model's device and the
    explained class per input (``default_targets``: the predicted class where ``target`` is None)."""
    check_reduction(reduction)
    options = explainer_options(explainers)
    measures = check_measures(measures)
    x = x.detach().to(model_device(model, x))
    with torch.no_grad():
        target = default_targets(model, x, target)
    return options, measures, x, target
