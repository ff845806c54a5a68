"""The one check that a tensor holds finite numbers only, shared by the map normalisations
and aggregators (``evaluators.maps``) and the fidelity metrics (``evaluators.metrics``):
a map, an input or a model's output with NaN or ±inf is refused with one ``InputError``
that names it, never turned into a number (a "denominator > 0" guard is false for NaN)."""

from __future__ import annotations

import math

import torch

from foundation.errors import InputError


def check_finite(values: torch.Tensor, what: str, unit: str = "map", unit_dims: int | None = None,
                 stacked: bool = False, numbers: torch.Tensor | None = None) -> None:  # fmt: skip
    """InputError unless every value of ``values`` is finite.

    ``what`` names the tensor (``"explainer 'gradcam'"``, ``"inputs x"``) and ``unit`` what
    one of its units is: the units are the slices along dim 0 (``unit_dims`` None) or the
    blocks of the last ``unit_dims`` dims, any leading dims flattened. The error names the
    first unit that holds NaN or ±inf, its counts of each, and how many units do.
    ``stacked``: ``values`` is a stack (k, ...) of k such tensors, and the error names the
    entry, ``what[j]``, before the unit within it. ``numbers``: each unit's number in the error
    (e.g. an example's index in its split; default 0, 1, …). When all is finite the cost is one sum
    of ``values`` (NaN or ±inf anywhere makes it NaN or ±inf; docs/fidelity_metrics.md);
    the element-wise test only runs where the sum is not finite (a bad value, or finite
    values whose sum overflows), and the counting on the error path only.
    """
    if bool(torch.isfinite(values.sum())) or bool(torch.isfinite(values).all()):
        return
    if stacked:
        for j, entry in enumerate(values):
            check_finite(entry, f"{what}[{j}]", unit, unit_dims)
    values = values.detach()
    if unit_dims is None:
        rows = values.reshape(len(values) if values.dim() else 1, -1)
    else:
        rows = values.reshape(-1, math.prod(values.shape[values.dim() - unit_dims:]))
    nan, inf = rows.isnan().sum(1), rows.isinf().sum(1)
    bad = (nan + inf).nonzero()[:, 0]
    first = int(bad[0])
    counts = " and ".join(f"{int(n[first])} {kind} value(s)" for n, kind in ((nan, "NaN"), (inf, "infinite"))
                          if n[first])  # fmt: skip
    number = first if numbers is None else int(numbers[first])
    raise InputError(f"{what}: {unit} {number} has {counts} ({len(bad)} of {len(rows)} {unit}s not finite); "
                     "expected finite values")  # fmt: skip


def finite_mean(scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The mean over the last dim of the finite values of ``scores`` (NaN where none is: a
    score left undefined, e.g. the rank correlation of a constant map), and how many were finite."""
    finite = scores.isfinite()
    count = finite.sum(-1)
    total = torch.where(finite, scores, 0.0).sum(-1)
    return total / count.clamp_min(1) + torch.where(count > 0, 0.0, float("nan")), count
