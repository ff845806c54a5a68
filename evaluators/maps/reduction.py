"""Image maps (N, C, H, W) reduced over their channels to per-pixel maps (N, H, W): :func:`reduce_map`."""

from __future__ import annotations

import torch

from foundation.errors import InputError

REDUCTIONS = ("sum", "abs_sum", "max_abs")


def reduce_map(maps: torch.Tensor, how: str = "abs_sum") -> torch.Tensor:
    """(N, C, H, W) maps to (N, H, W) over channels: ``sum``, ``abs_sum`` (sum of
    absolute values) or ``max_abs`` (largest absolute value)."""
    if how not in REDUCTIONS:
        raise InputError(f"option how={how!r}; expected one of {list(REDUCTIONS)}")
    if maps.dim() != 4:
        raise InputError(f"maps of shape {tuple(maps.shape)}; expected (N, C, H, W)")
    if how == "sum":
        return maps.sum(1)
    return maps.abs().sum(1) if how == "abs_sum" else maps.abs().amax(1)


__all__ = ["REDUCTIONS", "reduce_map"]
