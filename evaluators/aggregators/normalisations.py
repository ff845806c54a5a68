"""Normalisations of explanation maps before they are aggregated (Mahlau & Nolde 2022, §3.1).

Each map e is put on a common scale before an ensemble of maps is merged
(``evaluators.aggregators.pixel_aggregators``). Every statistic below is taken per map, over
its last ``map_dims`` dims: 2 for pixel maps (..., H, W), 1 for tabular feature maps
(..., d); any leading dims are a batch of maps.

* ``linear``, eq. 1: ẽ = (e − min e) / (max e − min e), min-max to [0, 1];
* ``z``, eq. 2: ẽ = (e − μ(e)) / σ(e), with μ(e) and σ(e) the mean and the population
  standard deviation (divisor P, the number of pixels) of the map's values;
* ``l1``, eq. 3: ẽ = e / ‖e‖₁;
* ``l2``, eq. 4: ẽ = e / ‖e‖₂;
* ``absmax``: ẽ = |e| / max |e|, to [0, 1] (Decker et al. 2024's normalisation: absolute
  values rescaled by their maximum);
* ``none``: ẽ = e.

A constant map (max e = min e, hence σ(e) = 0) ranks no pixel above another: ``linear``
and ``z`` map it to zeros, and so do ``l1``, ``l2`` and ``absmax`` for the all-zero map
(norm 0; a nonzero constant map is an ordinary map for them). No normalisation
returns NaN. Constancy is tested exactly (max = min). A map holding NaN or ±inf has no
min, max, σ or norm: ``normalise`` refuses it (``InputError`` naming the map).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from foundation.finite import check_finite
from foundation.errors import InputError


def _flat(maps: torch.Tensor, map_dims: int) -> torch.Tensor:
    """(..., P): each map's values in one dim."""
    return maps.flatten(-map_dims)


def _divide(numerator: torch.Tensor, denominator: torch.Tensor) -> torch.Tensor:
    """numerator / denominator where the denominator is positive, else 0."""
    positive = denominator > 0
    return torch.where(positive, numerator / torch.where(positive, denominator, 1), 0)


def linear(maps: torch.Tensor, map_dims: int = 2) -> torch.Tensor:
    """Eq. 1: (e − min e) / (max e − min e); a constant map gives zeros."""
    flat = _flat(maps, map_dims)
    low, high = flat.amin(-1, keepdim=True), flat.amax(-1, keepdim=True)
    return _divide(flat - low, high - low).reshape(maps.shape)


def z(maps: torch.Tensor, map_dims: int = 2) -> torch.Tensor:
    """Eq. 2: (e − μ(e)) / σ(e), σ the population std over the map; a constant map gives zeros."""
    flat = _flat(maps, map_dims)
    mu = flat.mean(-1, keepdim=True)
    sigma = flat.std(-1, correction=0, keepdim=True)
    sigma = torch.where(flat.amax(-1, keepdim=True) > flat.amin(-1, keepdim=True), sigma, 0)
    return _divide(flat - mu, sigma).reshape(maps.shape)


def l1(maps: torch.Tensor, map_dims: int = 2) -> torch.Tensor:
    """Eq. 3: e / ‖e‖₁; the all-zero map stays zero."""
    flat = _flat(maps, map_dims)
    return _divide(flat, flat.abs().sum(-1, keepdim=True)).reshape(maps.shape)


def l2(maps: torch.Tensor, map_dims: int = 2) -> torch.Tensor:
    """Eq. 4: e / ‖e‖₂; the all-zero map stays zero."""
    flat = _flat(maps, map_dims)
    return _divide(flat, torch.linalg.vector_norm(flat, dim=-1, keepdim=True)).reshape(maps.shape)


def absmax(maps: torch.Tensor, map_dims: int = 2) -> torch.Tensor:
    """|e| / max |e| (Decker et al.), in [0, 1]; the all-zero map stays zero."""
    flat = _flat(maps, map_dims).abs()
    return _divide(flat, flat.amax(-1, keepdim=True)).reshape(maps.shape)


def none(maps: torch.Tensor, map_dims: int = 2) -> torch.Tensor:
    """The maps as they are."""
    return maps


NORMALISATIONS: dict[str, Callable[[torch.Tensor, int], torch.Tensor]] = {
    "linear": linear,
    "z": z,
    "l1": l1,
    "l2": l2,
    "absmax": absmax,
    "none": none,
}


def check_maps(maps: torch.Tensor, map_dims: int, leading: int, shape: str) -> None:
    """InputError unless ``maps`` is a floating tensor with at least ``leading`` dims
    before its last ``map_dims`` (a positive int); ``shape`` names the expected shape."""
    if isinstance(map_dims, bool) or not isinstance(map_dims, int) or map_dims < 1:
        raise InputError(f"option map_dims={map_dims!r}; expected a positive integer (2 for (H, W) maps, 1 for (d,))")
    if not isinstance(maps, torch.Tensor) or not maps.is_floating_point():
        raise InputError(f"maps of type {getattr(maps, 'dtype', type(maps))}; expected a floating-point tensor")
    if maps.dim() < map_dims + leading or 0 in maps.shape:
        raise InputError(f"maps of shape {tuple(maps.shape)} with map_dims={map_dims}; expected {shape}, none empty")


def normalise(maps: torch.Tensor, how: str, map_dims: int = 2, label: str = "maps") -> torch.Tensor:
    """``maps`` (..., *S), S their last ``map_dims`` dims, each map normalised by
    ``NORMALISATIONS[how]`` (see the module's docstring); same shape, dtype and device.
    Maps with NaN or ±inf are refused, the error naming ``label`` (e.g. the explainer)
    and the map (its index over the leading dims, flattened)."""
    if how not in NORMALISATIONS:
        raise InputError(f"option how={how!r}; expected one of {list(NORMALISATIONS)}")
    check_maps(maps, map_dims, 0, "(..., *S) with S the last map_dims dims")
    check_finite(maps, label, "map", map_dims)
    return NORMALISATIONS[how](maps, map_dims)


# The public, checked entry points (maps with NaN or ±inf refused: tests/faults/test_nonfinite_maps.py);
# the other functions here are steps inside ``normalise``, which checks their maps once.
__all__ = ["NORMALISATIONS", "normalise"]
