"""How concentrated a map is, read from the map alone (no model): sparseness (Chalasani et
al. 2020, "Concise explanations of neural networks using adversarial training", ICML) and
complexity (Bhatt, Weller & Moura 2020, IJCAI), as Quantus's ``Sparseness`` and ``Complexity``.

A map φ of one input has d entries (every value of an (H, W) or (C, H, W) image map, the d
features of a row); a = |φ| flattened, a_(1) ≤ … ≤ a_(d) its values sorted ascending and
p_i = a_i / Σ_j a_j the normalised absolute map. Then

    Sparseness(φ) = Σ_{i=1..d} (2i − d − 1) a_(i) / (d Σ_j a_j)     (the Gini index of a)
    Complexity(φ) = −Σ_i p_i ln p_i                                (entropy in nats, 0 ln 0 = 0)

Sparseness lies in [0, 1 − 1/d]: 0 for a uniform |φ|, 1 − 1/d when one entry holds all the
mass; higher is sparser, which Chalasani et al. (and Quantus) read as better. Complexity
lies in [0, ln d]: 0 for one entry, ln d for a uniform |φ|; lower is better. Both are
invariant to φ's scale and sign. An all-zero map has no mass to distribute: both are
undefined there (NaN), and their Metrics count such inputs in ``left_out`` rather than
score them 0 (Quantus adds 1e-7 to every entry and calls that map uniform: Sparseness 0;
docs/fidelity_metrics.md). Maps with NaN or ±inf are refused with one ``InputError`` naming
the first such map. ``sparseness(maps)`` and ``complexity(maps)`` take maps (N, ...) and
return (N,) in the maps' dtype; ``Sparseness`` and ``Complexity`` average them over inputs.
"""

from __future__ import annotations

import torch

from foundation.finite import check_finite
from evaluators.metrics.base import MeanOverInputs
from evaluators.metrics.registry import METRICS
from foundation.errors import InputError


def check_maps(maps, x: torch.Tensor | None = None) -> torch.Tensor:
    """``maps`` (N, d), (N, H, W) or (N, C, H, W), finite, flattened to (N, D) absolute values;
    with inputs ``x``, one map per input, of x's shape per input or per unit ((H, W) of images)."""
    if (not isinstance(maps, torch.Tensor) or maps.dim() not in (2, 3, 4) or len(maps) == 0
            or not maps.is_floating_point()):  # fmt: skip
        raise InputError(f"maps of shape {tuple(getattr(maps, 'shape', ()))}; expected float maps (N, d), "
                         "(N, H, W) or (N, C, H, W)")  # fmt: skip
    if x is not None and (len(maps) != len(x) or maps.shape[1:] not in (x.shape[1:], x.shape[2:])):
        raise InputError(f"maps of shape {tuple(maps.shape)} for inputs x of shape {tuple(x.shape)}; expected one "
                         "map per input, of the input's shape or one value per pixel")  # fmt: skip
    check_finite(maps, "maps", "map")
    return maps.flatten(1).abs()


def _undefined_where_empty(values: torch.Tensor, mass: torch.Tensor) -> torch.Tensor:
    return torch.where(mass > 0, values, torch.nan)


def sparseness(maps: torch.Tensor) -> torch.Tensor:
    """(N,) Gini index of each map's absolute values; NaN for an all-zero map."""
    a = check_maps(maps).sort(dim=1).values
    d = a.shape[1]
    weights = 2 * torch.arange(1, d + 1, device=a.device, dtype=a.dtype) - d - 1
    mass = a.sum(1)
    return _undefined_where_empty((a * weights).sum(1) / (d * mass), mass)


def complexity(maps: torch.Tensor) -> torch.Tensor:
    """(N,) entropy (nats) of each map's normalised absolute values; NaN for an all-zero map."""
    a = check_maps(maps)
    mass = a.sum(1, keepdim=True)
    p = a / mass
    return _undefined_where_empty(-torch.xlogy(p, p).sum(1), mass[:, 0])


class _MapMetric(MeanOverInputs):
    """A mean over inputs of a score of the maps alone: ``update(model, x, maps)`` reads
    neither the model nor ``explain_fn`` (either may be None) and x only to check the maps'
    shape (None: unchecked). Inputs whose map is all zero are counted in ``left_out``."""

    leaves_out_undefined = True

    def __init__(self, **kwargs) -> None:
        super().__init__({}, **kwargs)

    def scores(self, model, x, maps, target, explain_fn) -> torch.Tensor:
        check_maps(maps, x)
        return self.function(maps)


@METRICS.register("sparseness", needs=("maps",), higher_is_better=True, function=sparseness)
class Sparseness(_MapMetric):
    """The mean Gini index of the absolute maps (higher: sparser, better)."""

    higher_is_better = True
    function = staticmethod(sparseness)


@METRICS.register("complexity", needs=("maps",), higher_is_better=False, function=complexity)
class Complexity(_MapMetric):
    """The mean entropy of the normalised absolute maps (lower: less complex, better)."""

    higher_is_better = False
    function = staticmethod(complexity)
