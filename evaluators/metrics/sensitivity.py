"""Average- and Max-Sensitivity of an explanation method (Yeh et al. 2019; Bhatt et al.
2020), as Decker et al. (2024, App. C.1) evaluate them.

For an explanation method e (``explain_fn``), an input x with map e(x) and n perturbed
inputs x + ε_s, ε_s ~ U[−r, r] per element (r = 0.1, ``perturbations.uniform_noise``):

    d_s = ‖e(x + ε_s) − e(x)‖₂ / ‖e(x)‖₂   (``relative=True``, the default)
    d_s = ‖e(x + ε_s) − e(x)‖₂             (``relative=False``)

with ‖·‖₂ the Euclidean (Frobenius) norm over all of a map's entries, and

    SENS_AVG = (1/n) Σ_s d_s,   SENS_MAX = max_s d_s.

Lower is better. The division is Quantus's and Captum's (docs/fidelity_metrics.md).

``explain_fn(x_rows, target_rows) -> maps`` explains a batch of perturbed inputs: rows of
x's shape, and ``target_rows`` the targets expanded to the rows (None stays None, an int
stays an int, a LongTensor (N,) is repeated n times per input), so that e(x + ε) explains
the same class as e(x) when the caller passes the targets e(x) was made for. Its maps must
have ``maps``' shape per row. The N·n perturbed rows go to ``explain_fn`` in calls of
whole inputs, max(1, ⌊max_batch / n⌋) inputs (all their samples) per call.

``sensitivities(explain_fn, x, maps, ...)`` -> (N, n) distances; ``AverageSensitivity`` and
``MaxSensitivity`` (torchmetrics ``Metric``s) average SENS_AVG and SENS_MAX over every input
passed to ``update(model, x, maps, target=None, explain_fn=...)``; every update draws its noise from
``seed`` afresh (input i of each update has the noise of index i). Inputs and maps (also
``explain_fn``'s) with NaN or ±inf are refused with one ``InputError`` naming which.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from foundation.finite import check_finite
from evaluators.metrics.base import MeanOverInputs, require_explain_fn
from evaluators.metrics.registry import METRICS
from evaluators.metrics.infidelity import M_EVAL
from evaluators.metrics.perturbations import RADIUS, check_count, uniform_noise
from foundation.batching import resolve_max_batch
from foundation.errors import InputError


def _rows_target(target, inputs: slice, n_samples: int):
    if isinstance(target, torch.Tensor):
        return target[inputs].repeat_interleave(n_samples)
    return target


def _check(x, maps, target) -> None:
    if not isinstance(x, torch.Tensor) or x.dim() < 2 or len(x) == 0 or not x.is_floating_point():
        raise InputError(f"inputs x of shape {tuple(getattr(x, 'shape', ()))}; expected a float batch (N, ...)")
    if not isinstance(maps, torch.Tensor) or maps.dim() < 2 or len(maps) != len(x) or not maps.is_floating_point():
        raise InputError(f"maps of shape {tuple(getattr(maps, 'shape', ()))}; expected float maps (N, ...) of the "
                         f"{len(x)} inputs")  # fmt: skip
    if isinstance(target, torch.Tensor) and (target.shape != (len(x),) or target.is_floating_point()):
        raise InputError(f"option target of shape {tuple(target.shape)}; expected None, an int or a LongTensor "
                         f"of {len(x)} labels")  # fmt: skip
    check_finite(x, "inputs x", "input")
    check_finite(maps, "maps", "map")


def map_distances(noisy_maps: torch.Tensor, maps: torch.Tensor, relative: bool = True) -> torch.Tensor:
    """(N, n) distances ‖e(x + ε_s) − e(x)‖ between the maps (N, *S) and their inputs' n noisy
    copies' maps (N·n, *S, each input's n consecutive), in ``maps``' dtype; divided by
    ‖e(x)‖ if ``relative`` (1 where it is 0). Maps with NaN or ±inf are refused."""
    check_finite(maps, "maps", "map")
    check_finite(noisy_maps, "the maps of the noisy copies", "row")
    flat = maps.detach().flatten(1)
    difference = noisy_maps.detach().to(flat).view(len(flat), -1, flat.shape[1]) - flat[:, None]
    distances = torch.linalg.vector_norm(difference, dim=2)
    if not relative:
        return distances
    norms = torch.linalg.vector_norm(flat, dim=1)
    return distances / torch.where(norms > 0, norms, 1)[:, None]


def sensitivities(explain_fn: Callable, x: torch.Tensor, maps: torch.Tensor, target=None, n_samples: int = M_EVAL,
                  radius: float = RADIUS, relative: bool = True, seed: int = 0, stream: str = "evaluation",
                  max_batch: int | None = None, offset: int = 0) -> torch.Tensor:  # fmt: skip
    """(N, n) distances d_s between each input's map and the maps at its n noisy copies (see
    the module's docstring), on the maps' device, in their dtype.

    Args:
        explain_fn: (x_rows, target_rows) -> maps of those rows.
        x: the inputs (N, ...); maps: e(x), (N, ...).
        target: what ``maps`` explain, passed on expanded to the rows.
        n_samples, radius: the noise; seed, stream: its draws (``perturbations``); ``offset``: the
            index of x's first input (its noise that of index offset + i).
        relative: divide by ‖e(x)‖ (1 where it is 0).
        max_batch: rows per ``explain_fn`` call (at least one input's n samples; None:
            ``resolve_max_batch``).
    """
    _check(x, maps, target)
    n_samples, max_batch = check_count("n_samples", n_samples), resolve_max_batch(max_batch, x)
    per_call = max(1, max_batch // n_samples)
    distances = []
    for start in range(0, len(x), per_call):
        inputs = slice(start, min(start + per_call, len(x)))
        noisy = uniform_noise(x[inputs].detach(), n_samples, radius, seed, stream, offset=offset + start)
        noisy = noisy.flatten(0, 1)
        explained = explain_fn(noisy, _rows_target(target, inputs, n_samples))
        if not isinstance(explained, torch.Tensor) or explained.shape[1:] != maps.shape[1:]:
            raise InputError(f"explain_fn returned maps of shape {tuple(getattr(explained, 'shape', ()))}; expected "
                             f"({len(noisy)}, {', '.join(map(str, maps.shape[1:]))})")  # fmt: skip
        distances.append(map_distances(explained, maps[inputs], relative))
    return torch.cat(distances)


class _Sensitivity(MeanOverInputs):
    """The mean of SENS_AVG or SENS_MAX over every input scored by
    ``update(model, x, maps, target=None, explain_fn=...)`` (``sensitivities`` with this
    metric's options; the model is not read and may be None; the states and their
    reduction: ``evaluators.metrics.base``). Lower is better.

    Args (those of ``sensitivities``): n_samples, radius, relative, seed, max_batch.
    """

    higher_is_better = False

    def __init__(self, n_samples: int = M_EVAL, radius: float = RADIUS, relative: bool = True, seed: int = 0,
                 max_batch: int | None = None, **kwargs) -> None:  # fmt: skip
        super().__init__({"n_samples": n_samples, "radius": radius, "relative": relative, "seed": seed,
                          "max_batch": max_batch}, **kwargs)  # fmt: skip

    statistic: str  # the torch reduction over the samples: "mean" or "amax"

    def scores(self, model, x: torch.Tensor, maps: torch.Tensor, target=None, explain_fn: Callable | None = None):
        with torch.enable_grad():  # torchmetrics runs update without gradients; explainers need them
            distances = sensitivities(require_explain_fn(explain_fn, self), x, maps, target, **self.options)
        return getattr(distances, self.statistic)(1)


@METRICS.register("sens_avg", needs=("maps", "explain_fn"), higher_is_better=False, function=sensitivities)
class AverageSensitivity(_Sensitivity):
    """Mean over inputs of SENS_AVG = (1/n) Σ_s d_s; see ``_Sensitivity``."""

    statistic = "mean"


@METRICS.register("sens_max", needs=("maps", "explain_fn"), higher_is_better=False, function=sensitivities)
class MaxSensitivity(_Sensitivity):
    """Mean over inputs of SENS_MAX = max_s d_s; see ``_Sensitivity``."""

    statistic = "amax"
