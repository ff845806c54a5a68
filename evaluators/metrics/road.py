"""ROAD, RemOve And Debias (Rong, Leemann, Borisov, Kasneci & Kasneci 2022, "A
consistent and efficient evaluation strategy for attribution methods", ICML), as Decker
et al. (2024, §5.2, Table 3 and App. D.1, Table 4) score aggregated explanations with it.

ROAD removes a share p of an input's units in the order of the map and reads the model
on the result, without retraining: MoRF removes the most relevant units first (a
faithful map makes the output fall fast: lower is better), LeRF the least relevant
first (the output should hold: higher is better). Removed pixels are not set to a
constant, whose pattern the model could read, but imputed by **noisy linear
imputation** (Rong et al.): every removed pixel i takes the weighted mean of its 8
neighbours j,

    s_i u_i − Σ_{j removed} w_ij u_j = Σ_{j kept} w_ij x_j,   s_i = Σ_{j in the image} w_ij,

with w = 1/6 for the 4 direct and 1/12 for the 4 diagonal neighbours (neighbours off
the image are dropped, so s_i < 1 on the border), one linear system per image and
channel over the removed pixels, and then Gaussian noise N(0, noise²) is added to every
imputed value (``noise`` = 0.01, Rong et al.'s and pytorch-grad-cam's default; in input
units: standardised units for this framework's images). ``linear_imputation`` solves the
systems (how: docs/fidelity_metrics.md). Tabular rows have no neighbours: a removed
feature takes the training set's mean (``feature_means``) plus the same noise.

``road_curves(model, x, maps, order, percentages, ...)`` -> (percentages (P,), curves (N, P)):

* **Units, maps, target**: as ``evaluators.metrics.model_scores`` says (all channels of a
  pixel removed together; NaN or ±inf in ``feature_means`` refused too).
* **Percentages**: after removing p % of the n units, ⌊n p / 100⌋ of them (as Quantus),
  for each p in ``percentages`` (0 <= p < 100; 0 scores the clean input). Default 10, 20,
  ..., 90 (pytorch-grad-cam's ``ROAD*Average``, Decker et al.'s Table 4). Ties in the map
  are broken by a seeded random order (``insertion_deletion.unit_ranks``; LeRF ranks the negated map).
* **Output** (``output``, ``ROAD_OUTPUTS``): ``"probability"`` (default), the target's
  probability on each imputed input; ``"logit"``, its logit (a tabular model's
  ``explained_output``); ``"accuracy"``, 1 where the imputed input's predicted class is
  the target, else 0 (Rong et al. plot test accuracy: pass the labels as ``target``).
  ``difference=True`` subtracts the clean input's output (as pytorch-grad-cam; which
  output Decker et al. read: docs/fidelity_metrics.md).
* **Randomness**: one CPU ``torch.Generator`` seeded with ``seed`` draws, in this order,
  the N tie-breaking permutations, then each row's noise (``torch.randn`` of one input's
  shape in x's dtype, rows in the order input-major, percentage-minor), so a call's
  result does not depend on the device or on ``max_batch``. ``offset`` and ``total``: x holds
  inputs ``offset`` … of ``total``, the generator skipping the other inputs' draws
  (as ``insertion_deletion``'s), so a split scored in parts gives the whole call's curves.
* **Batching**: the N P imputed inputs are built, solved and scored in chunks of at most
  ``max_batch`` rows, without gradients, in eval mode (restored afterwards), on the
  model's device. The solve holds about six float64 copies of a chunk.

Where this departs from pytorch-grad-cam and Quantus: docs/fidelity_metrics.md.

``ROADMoRF`` and ``ROADLeRF`` (torchmetrics ``Metric``s) average the curves over every
input passed to ``update(model, x, maps, target=None)``: ``compute()`` is the mean curve
(P,), and its mean over the percentages the AUC-like summary (Decker et al.'s "Average"
column).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

import torch
from torch import nn
from torch.nn import functional as F

from foundation.finite import check_finite
from evaluators.metrics.base import MeanOverInputs
from evaluators.metrics.registry import register_variant
from evaluators.metrics.insertion_deletion import check_part, skip_permutations, unit_ranks
from evaluators.metrics.model_scores import (
    OUTPUTS, check_inputs_and_maps, finite_outputs, resolve_targets, target_outputs,
)  # fmt: skip
from foundation.batching import resolve_max_batch
from foundation.devices import model_device
from foundation.errors import InputError
from foundation.modality import Modality
from lightning_modules.interface import class_probabilities, eval_mode

ORDERS = ("morf", "lerf")
ROAD_OUTPUTS = OUTPUTS + ("accuracy",)
PERCENTAGES = (10, 20, 30, 40, 50, 60, 70, 80, 90)  # pytorch-grad-cam; Decker et al. Table 4
NOISE = 0.01  # Rong et al.'s NoisyLinearImputer default
DIRECT, DIAGONAL = 1 / 6, 1 / 12  # neighbour weights (Rong et al.)
RTOL = 1e-12  # relative residual at which the conjugate gradients stop


def neighbour_sum(v: torch.Tensor) -> torch.Tensor:
    """Σ_j w_ij v_j over the 8 neighbours j of every pixel i of v (..., H, W), zero off the
    image: 8 shifted copies of the zero-padded grid (on a CPU in float64 about 2.5x faster
    than a 3 x 3 convolution)."""
    p = F.pad(v, (1, 1, 1, 1))
    direct = p[..., :-2, 1:-1] + p[..., 2:, 1:-1] + p[..., 1:-1, :-2] + p[..., 1:-1, 2:]
    diagonal = p[..., :-2, :-2] + p[..., :-2, 2:] + p[..., 2:, :-2] + p[..., 2:, 2:]
    return DIRECT * direct + DIAGONAL * diagonal


def linear_imputation(x: torch.Tensor, removed: torch.Tensor, rtol: float = RTOL) -> torch.Tensor:
    """Images x (R, C, H, W) whose ``removed`` pixels (R, H, W) bool take the solution u of
    s_i u_i − Σ_{j removed} w_ij u_j = Σ_{j kept} w_ij x_j, channel by channel (see the
    module's docstring; no noise). Every image must keep at least one pixel. Solved by
    conjugate gradients preconditioned with D_s, in float64, for all R C systems at once,
    until each residual is within ``rtol`` of its right-hand side; the converged systems
    leave the working set once they are an eighth of it. Returned in x's dtype."""
    rows, channels, height, width = x.shape
    values = x.to(torch.float64).reshape(rows * channels, height, width)  # one system per image and channel
    mask = removed.repeat_interleave(channels, 0)
    inside = mask.to(torch.float64)
    weight_sum = neighbour_sum(torch.ones(height, width, dtype=torch.float64, device=x.device))  # s

    def system(v: torch.Tensor, inside: torch.Tensor) -> torch.Tensor:  # A v, v zero off the removed pixels
        return (weight_sum * v - neighbour_sum(v)) * inside

    def dot(a: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return (a * c).sum((1, 2))

    b = neighbour_sum(values * (1 - inside)) * inside
    solution = b / weight_sum  # the start; each system's solution once it converges
    active, u = torch.arange(len(values), device=x.device), solution.clone()
    residual = b - system(u, inside)
    direction = residual / weight_sum
    rz, limit = dot(residual, direction), rtol**2 * dot(b, b)
    for _ in range(height * width):
        done = dot(residual, residual) <= limit
        finished = int(done.sum())
        if finished == len(active):
            break
        if 8 * finished >= len(active):
            solution[active[done]] = u[done]
            keep = ~done
            active, u, residual, direction, rz, limit, inside = (
                t[keep] for t in (active, u, residual, direction, rz, limit, inside))  # fmt: skip
        step = system(direction, inside)
        curvature = dot(direction, step)
        alpha = torch.where(curvature > 0, rz / curvature, 0.0)[:, None, None]
        u = u + alpha * direction
        residual = residual - alpha * step
        z = residual / weight_sum
        rz_next = dot(residual, z)
        direction = z + torch.where(rz > 0, rz_next / rz, 0.0)[:, None, None] * direction
        rz = rz_next
    else:
        warnings.warn(f"linear_imputation: conjugate gradients stopped after {height * width} iterations above the "
                      f"relative residual {rtol}")  # fmt: skip
    solution[active] = u
    return torch.where(mask, solution, values).view(x.shape).to(x.dtype)


def _check_percentages(percentages) -> tuple[float, ...]:
    ok = isinstance(percentages, Sequence) and len(percentages) > 0 and all(
        isinstance(p, (int, float)) and not isinstance(p, bool) and 0 <= p < 100 for p in percentages)  # fmt: skip
    if not ok:
        raise InputError(f"option percentages={percentages!r}; expected a non-empty list of shares of the units to "
                         "remove, each from 0 to below 100")  # fmt: skip
    return tuple(percentages)


def _check_options(order, output, noise) -> None:
    if order not in ORDERS:
        raise InputError(f"option order={order!r}; expected one of {list(ORDERS)}")
    if output not in ROAD_OUTPUTS:
        raise InputError(f"option output={output!r}; expected one of {list(ROAD_OUTPUTS)}")
    if not isinstance(noise, (int, float)) or isinstance(noise, bool) or not noise >= 0:
        raise InputError(f"option noise={noise!r}; expected a standard deviation >= 0 (Rong et al.: 0.01)")


def _feature_means(x: torch.Tensor, feature_means, modality: Modality) -> torch.Tensor | None:
    if modality.spatial:
        if feature_means is not None:
            raise InputError("option feature_means: images are imputed from their neighbours; expected None")
        return None
    if not isinstance(feature_means, torch.Tensor) or feature_means.shape != x.shape[1:]:
        raise InputError(f"option feature_means: tabular rows need the training set's feature means, a tensor of "
                         f"shape {tuple(x.shape[1:])}; got {tuple(getattr(feature_means, 'shape', ())) or None}")
    check_finite(feature_means, "option feature_means", "feature", 0)
    return feature_means.to(x.device, x.dtype)


def road_curves(
    model: nn.Module, x: torch.Tensor, maps: torch.Tensor, order: str = "morf",
    percentages: Sequence[float] = PERCENTAGES, target=None, output: str = "probability", difference: bool = False,
    noise: float = NOISE, feature_means: torch.Tensor | None = None, seed: int = 0, max_batch: int | None = None,
    offset: int = 0, total: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """MoRF or LeRF curves (see the module's docstring): the percentages (P,) and the
    output on each input after each removal, curves (N, P), in the outputs' dtype (float
    0/1 for accuracy), on the model's device.

    Args:
        model: a classifier of images (N, C, H, W) -> (N, K) logits, or a tabular model.
        x: images (N, C, H, W) or tabular rows (N, d).
        maps: (N, H, W) per pixel, or (N, d) per feature; larger = more relevant.
        order: ``"morf"`` (most relevant removed first) or ``"lerf"``.
        percentages: shares of the units removed, each in [0, 100).
        target: None (the predicted class), an int or a LongTensor (N,); tabular: None or 1.
        output: ``"probability"``, ``"logit"`` or ``"accuracy"`` (``ROAD_OUTPUTS``).
        difference: subtract the clean input's output (pytorch-grad-cam, Decker et al.).
        noise: standard deviation of the Gaussian noise added to every imputed value.
        feature_means: tabular rows only, (d,): the training set's feature means.
        seed: seeds the tie-breaking order and the noise.
        max_batch: the most rows one solve and one forward pass see (None: ``resolve_max_batch``).
        offset, total: x is inputs offset … of a call over ``total`` (None: N) inputs.
    """
    modality, unit_shape = check_inputs_and_maps(model, x, maps)
    total = check_part(offset, total, len(x))
    _check_options(order, output, noise)
    percentages = _check_percentages(percentages)
    n = math.prod(unit_shape)
    with eval_mode(model):
        with torch.no_grad():
            device = model_device(model, x)
            x, maps = x.detach().to(device), maps.detach().to(device)
            max_batch = resolve_max_batch(max_batch, x)
            means = _feature_means(x, feature_means, modality)
            generator = torch.Generator().manual_seed(seed)
            flat = maps.reshape(len(x), n)
            skip_permutations(generator, offset, n)
            ranks = unit_ranks(flat if order == "morf" else -flat, generator)
            skip_permutations(generator, total - offset - len(x), n)
            for _ in range(offset * len(percentages)):  # the noise of the inputs before x
                torch.randn(x.shape[1:], generator=generator, dtype=x.dtype)
            target = resolve_targets(model, x, target, max_batch)
            counts = torch.tensor([math.floor(n * p / 100) for p in percentages], device=device)
            steps = len(percentages)
            points = []
            for rows in torch.arange(len(x) * steps, device=device).split(max_batch):
                image, step = rows // steps, rows % steps
                removed = (ranks[image] < counts[step, None]).view(-1, *unit_shape)
                draws = torch.stack([torch.randn(x.shape[1:], generator=generator, dtype=x.dtype) for _ in rows])
                if modality.spatial:  # imputed from the neighbours
                    filled = linear_imputation(x[image], removed)
                else:
                    filled = means.expand(len(rows), -1)
                removed = modality.unit_mask(removed)
                imputed = torch.where(removed, filled + noise * draws.to(device), x[image])
                points.append(_outputs(model, imputed, target[image], output))
            curves = torch.cat(points).view(len(x), steps)
            if difference:
                clean = torch.cat([_outputs(model, x[rows], target[rows], output)
                                   for rows in torch.arange(len(x), device=device).split(max_batch)])  # fmt: skip
                curves = curves - clean[:, None]
    return torch.tensor(percentages, dtype=curves.dtype, device=device), curves


def _outputs(model: nn.Module, x: torch.Tensor, target: torch.Tensor, output: str) -> torch.Tensor:
    if output == "accuracy":
        probabilities = finite_outputs(class_probabilities(model, x))
        return (probabilities.argmax(-1) == target).to(probabilities.dtype)
    return target_outputs(model, x, target, output)


class _ROAD(MeanOverInputs):
    """The mean ROAD curve over every input scored by ``update``.

    ``update(model, x, maps, target=None)`` scores inputs x with their maps through
    ``road_curves`` with this metric's options (the states, their reduction and the random
    numbers of each update: ``evaluators.metrics.base``). ``compute()`` is the mean curve
    (P,) over the inputs, at ``self.percentages``; its ``.mean()`` is the AUC-like summary.

    Args (those of ``road_curves``): percentages, output, difference, noise,
    feature_means, seed, max_batch.
    """

    order: str

    def __init__(self, percentages: Sequence[float] = PERCENTAGES, output: str = "probability",
                 difference: bool = False, noise: float = NOISE, feature_means: torch.Tensor | None = None,
                 seed: int = 0, max_batch: int | None = None, **kwargs) -> None:  # fmt: skip
        _check_options(self.order, output, noise)
        percentages = _check_percentages(percentages)
        super().__init__({"percentages": percentages, "output": output, "difference": difference, "noise": noise,
                          "feature_means": feature_means, "seed": seed, "max_batch": max_batch},
                         (len(percentages),), **kwargs)  # fmt: skip
        self.percentages = percentages

    def scores(self, model: nn.Module, x: torch.Tensor, maps: torch.Tensor, target=None, explain_fn=None):
        return road_curves(model, x, maps, self.order, target=target, **self.options)[1]


@register_variant("road_morf", road_curves, higher_is_better=False, order="morf")
class ROADMoRF(_ROAD):
    """Mean MoRF curve (lower is better); see ``_ROAD``."""


@register_variant("road_lerf", road_curves, higher_is_better=True, order="lerf")
class ROADLeRF(_ROAD):
    """Mean LeRF curve (higher is better); see ``_ROAD``."""
