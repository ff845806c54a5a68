"""Insertion and deletion (Petsiuk et al. 2018, RISE's "causal metrics"), as Mahlau et al.
(2022, §4) score explanation ensembles with them.

A map ranks the input's units (pixels of an image, features of a tabular row) from most
to least important. Insertion starts from a baseline x̃ and puts back the image's top
units; deletion starts from the image x and replaces its top units by the baseline's.
With k_s units moved after step s, the curve is p_s = p(c | x_s), s = 0..S, the softmax
probability of the target class c. A faithful map makes insertion rise and deletion fall
steeply: the insertion AUC is better high, the deletion AUC better low. The AUC is the
trapezoid rule over the fraction of units moved, f_s = k_s / n, which runs from 0 to 1:
AUC = Σ_s (f_s - f_{s-1}) (p_s + p_{s-1}) / 2 (``auc``; RISE's uniform-step formula
when every step moves as many units).

``insertion_deletion_curves(model, x, maps, mode, ...)`` -> (fractions (S+1,), curves (N, S+1)):

* **Units and maps.** Images x (N, C, H, W) take maps (N, H, W): one value per pixel, all
  C channels of a pixel move together (reduce (N, C, H, W) attributions with
  ``foundation.modality.reduce_map`` first). Rows x (N, d) (of a tabular
  ``MLPClassifier``, ``MLPEnsemble`` or any classifier of rows) take maps (N, d). Inputs, maps,
  a baseline tensor, ``stats`` and the model's outputs must be finite: NaN or ±inf is
  refused with one ``InputError`` naming which (``foundation.finite``).
* **Order and ties.** Units are moved in descending order of the map. Ties are broken by a
  seeded random order: each image's units are first put in a random permutation
  (``torch.randperm(n)``, one per image in order, from a CPU ``torch.Generator`` seeded
  with ``seed``), then stably sorted by the map, so tied units keep their random order
  (Mahlau et al. §4.1: a sparse map's zeros are moved "in random order").
* **Steps.** S increments, k_s = ⌊s n / S⌋ units moved after step s (every step moves
  ⌊n/S⌋ or ⌈n/S⌉ units; k_0 = 0, k_S = n). Default S = ⌈n / 50⌉ (50 pixels per step, as
  Mahlau et al.'s 1,000 increments on 224 x 224 images; docs/fidelity_metrics.md) on
  images, S = d on tabular rows; ``steps`` overrides S.
* **Target.** As ``evaluators.metrics.model_scores`` resolves it (default: each image's
  predicted class on the clean input; a tabular model's positive class), scored by its
  probability (``lightning_modules.interface.class_probabilities``).
* **Baselines** (``BASELINES``, or an explicit tensor of x's shape or of one input's):

  - ``"normal"``: Mahlau et al.'s random-normal image, a new value for every pixel drawn
    from N(μ_c, σ_c²) of its channel c: by default the image's own per-channel mean and
    standard deviation (correction 0; why: docs/fidelity_metrics.md); ``stats=(mean, std)``
    gives per-channel (images) or per-feature (tabular rows, which need it) statistics instead.
  - ``"blur"``: RISE's insertion baseline, the image blurred channel by channel with RISE's
    kernel (11 x 11, σ = 5, built as RISE's ``gkern``: docs/fidelity_metrics.md), applied
    with zero padding of 5 pixels as RISE's ``conv2d`` applies it. Images only.
  - ``"zero"``: RISE's deletion baseline, all zeros (the training mean on standardised inputs).
  - a tensor: e.g. the training set's feature means (d,) for tabular rows, as Ley et al.'s
    baseline; broadcast over the N inputs where it has one input's shape.

  The random draws come from one CPU generator seeded with ``seed``, in this order: the N
  tie-breaking permutations, then the normal baseline's noise (x's shape and dtype), so a
  call's result does not depend on the device or on ``max_batch``.
* **Parts of a larger call.** ``offset`` and ``total``: x holds inputs ``offset`` …
  ``offset + N − 1`` of ``total`` inputs; the generator skips the draws the other inputs
  would take (``skip_permutations``, ``skip_normal``), so the parts of a split scored one by
  one give the whole call's curves (``evaluators.inputs.chunks``). The normal noise is drawn
  16 values at a time (torch's ``normal_``): a part must start, and end unless it ends the
  split, at a multiple of 16 values (any chunk of images with H·W a multiple of 16).
* **Batching.** The N (S + 1) perturbed inputs are built chunk by chunk and scored in
  forward passes of at most ``max_batch`` rows (default: ``resolve_max_batch``), mixing images and steps,
  without gradients, in eval mode (the model's previous mode is restored), on the model's
  device (x, maps and the baseline are moved there). Memory beyond the model's own: one
  chunk of ``max_batch`` inputs, the baseline (x's size) and the ranks (N, n) int64. The
  chunks take x's memory format (channels-last: docs/fidelity_metrics.md).

``InsertionAUC`` and ``DeletionAUC`` (torchmetrics ``Metric``s) average the AUC over every
input passed to ``update(model, x, maps, target=None)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn
from torch.nn import functional as F

from foundation.finite import check_finite
from evaluators.metrics.base import MeanOverInputs
from evaluators.metrics.registry import register_variant
from evaluators.metrics.model_scores import check_inputs_and_maps, resolve_targets, target_outputs
from evaluators.metrics.perturbations import tensor_baseline
from foundation.batching import resolve_max_batch
from foundation.devices import model_device
from foundation.errors import InputError
from foundation.modality import Modality
from lightning_modules.interface import eval_mode

MODES = ("insertion", "deletion")
BLUR_KERNEL, BLUR_SIGMA, BLUR_TRUNCATE = 11, 5.0, 4.0  # RISE's gkern(klen=11, nsig=5); scipy's truncate


# --- baselines: (x, stats, generator) -> a tensor of x's shape --------------------------------------
def _normal_baseline(x: torch.Tensor, stats, generator: torch.Generator) -> torch.Tensor:
    noise = torch.randn(x.shape, generator=generator, dtype=x.dtype).to(x.device)
    if stats is not None:
        shape = (1, -1) + (1,) * (x.dim() - 2)  # per channel (N, C, H, W) or per feature (N, d)
        mean, std = (torch.as_tensor(v, dtype=x.dtype, device=x.device).view(shape) for v in stats)
    else:
        mean, std = x.mean((2, 3), keepdim=True), x.std((2, 3), correction=0, keepdim=True)
    return mean + std * noise


def rise_blur_kernel(size: int = BLUR_KERNEL, sigma: float = BLUR_SIGMA) -> torch.Tensor:
    """RISE's 1-D blur kernel (size,) in float64: a centred delta filtered by a Gaussian of
    ``sigma`` truncated at ``BLUR_TRUNCATE`` σ, the taps that fall outside the window folded
    back by reflection (scipy's ``reflect``: d c b a | a b c d | d c b a). RISE's 2-D kernel
    is the outer product of this with itself."""
    radius = int(BLUR_TRUNCATE * sigma + 0.5)
    offsets = torch.arange(-radius, radius + 1)
    weights = torch.exp(-0.5 * (offsets.double() / sigma) ** 2)
    position = (size // 2 + offsets) % (2 * size)
    position = torch.where(position < size, position, 2 * size - 1 - position)
    return torch.zeros(size, dtype=torch.float64).index_add_(0, position, weights / weights.sum())


def _blur_baseline(x: torch.Tensor, stats, generator: torch.Generator) -> torch.Tensor:
    k = rise_blur_kernel().to(x.device, x.dtype)
    channels = x.shape[1]
    kernel = torch.outer(k, k).expand(channels, 1, BLUR_KERNEL, BLUR_KERNEL)
    return F.conv2d(x, kernel, padding=BLUR_KERNEL // 2, groups=channels)


def _zero_baseline(x: torch.Tensor, stats, generator: torch.Generator) -> torch.Tensor:
    return torch.zeros_like(x)


BASELINES: dict[str, Callable[[torch.Tensor, object, torch.Generator], torch.Tensor]] = {
    "normal": _normal_baseline,
    "blur": _blur_baseline,
    "zero": _zero_baseline,
}


# --- the curves -------------------------------------------------------------------------------------
def default_steps(n_units: int, modality: Modality) -> int:
    """S when ``steps`` is None: ⌈n / ``Modality.units_per_step``⌉, one feature per step on
    tabular rows, 50 pixels per step on images (Mahlau et al.: 1,000 increments on 224 x 224 images)."""
    return modality.default_steps(n_units)


def unit_ranks(maps: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """(N, n) rank of every unit (0 = moved first): descending map values, ties in the order
    of a random permutation per row (``torch.randperm`` from ``generator``, row by row)."""
    n_rows, n = maps.shape
    perm = torch.stack([torch.randperm(n, generator=generator) for _ in range(n_rows)]).to(maps.device)
    order = perm.gather(1, maps.gather(1, perm).sort(dim=1, descending=True, stable=True).indices)
    ranks = torch.empty_like(order)
    return ranks.scatter_(1, order, torch.arange(n, device=maps.device).expand(n_rows, n))


def check_part(offset, total, n: int) -> int:
    """``total`` (None: ``offset + n``) once ``offset`` and ``total`` place n inputs within it."""
    total = offset + n if total is None else total
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (offset, total)) or not (
            0 <= offset and offset + n <= total):  # fmt: skip
        raise InputError(f"options offset={offset!r}, total={total!r}; expected integers with 0 <= offset and "
                         f"offset + {n} inputs <= total")  # fmt: skip
    return total


def skip_permutations(generator: torch.Generator, count: int, n: int) -> None:
    """Advance ``generator`` past ``count`` tie-breaking permutations of n units (``unit_ranks``)."""
    for _ in range(count):
        torch.randperm(n, generator=generator)


def skip_normal(generator: torch.Generator, count: int, shape: tuple, dtype: torch.dtype, stop: int,
                total: int) -> None:  # fmt: skip
    """Advance ``generator`` past the normal noise of ``count`` inputs of ``shape`` (one
    ``torch.randn`` over all ``total`` inputs), for a part ending at input ``stop``; in pieces
    of 16 · k inputs, a bounded memory."""
    per_input = math.prod(shape)
    if (count * per_input) % 16 or (stop < total and (stop * per_input) % 16):
        raise InputError(f"a part of inputs {count} … {stop - 1} of {total} with {per_input} values each: the "
                         "normal baseline's noise cannot be replayed; expected parts that start and end at a "
                         "multiple of 16 values (a chunk size that is a multiple of 16)")  # fmt: skip
    piece = 16 * max(1, 2**22 // (16 * per_input))
    while count > 0:
        torch.randn((min(piece, count), *shape), generator=generator, dtype=dtype)
        count -= piece


def _check_inputs(model: nn.Module, x, maps, mode: str, steps) -> tuple[Modality, int, int]:
    """The inputs' modality, the number of units n and the steps S."""
    if mode not in MODES:
        raise InputError(f"option mode={mode!r}; expected one of {list(MODES)}")
    modality, unit_shape = check_inputs_and_maps(model, x, maps)
    n = math.prod(unit_shape)
    if steps is not None and (not isinstance(steps, int) or isinstance(steps, bool) or not 1 <= steps <= n):
        raise InputError(f"option steps={steps!r}; expected None or an integer from 1 to the {n} units per input")
    return modality, n, default_steps(n, modality) if steps is None else steps


def _baseline(x: torch.Tensor, baseline, stats, modality: Modality, generator: torch.Generator) -> torch.Tensor:
    if stats is not None and not (isinstance(baseline, str) and baseline == "normal"):
        raise InputError(f"option stats: only baseline 'normal' uses it; got baseline={baseline!r}")
    if isinstance(baseline, torch.Tensor):
        return tensor_baseline(x, baseline)
    if not isinstance(baseline, str) or baseline not in BASELINES:
        raise InputError(f"option baseline={baseline!r}; expected one of {list(BASELINES)} or a tensor")
    if stats is not None:
        channels = x.shape[1]
        if not isinstance(stats, (tuple, list)) or len(stats) != 2 or any(
                torch.as_tensor(v).numel() != channels for v in stats):  # fmt: skip
            raise InputError(f"option stats: expected (mean, std), each with {channels} values (one per "
                             f"{modality.stat_unit})")  # fmt: skip
        for name, values in zip(("mean", "std"), stats):
            check_finite(torch.as_tensor(values).reshape(-1), f"option stats' {name}", modality.stat_unit)
    elif not modality.own_statistics and baseline == "normal":
        raise InputError("option stats: baseline 'normal' on tabular rows needs stats=(mean, std), the training "
                         "set's feature means and standard deviations")  # fmt: skip
    if not modality.spatial and baseline == "blur":
        raise InputError("option baseline='blur': blurring needs images; expected 'normal', 'zero' or a tensor")
    return BASELINES[baseline](x, stats, generator)


def _channels_last(x: torch.Tensor) -> bool:
    return x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous()


def insertion_deletion_curves(
    model: nn.Module, x: torch.Tensor, maps: torch.Tensor, mode: str, target=None, steps: int | None = None,
    baseline: str | torch.Tensor = "normal", stats=None, seed: int = 0, max_batch: int | None = None,
    offset: int = 0, total: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Insertion or deletion curves (see the module's docstring): fractions (S+1,) of the
    units moved, and curves (N, S+1) of the target's probability after each step, both in
    the probabilities' dtype, on the model's device.

    Args:
        model: a classifier of images (N, C, H, W) -> (N, K) logits, or a tabular model.
        x: images (N, C, H, W) or tabular rows (N, d).
        maps: (N, H, W) per pixel, or (N, d) per feature; larger = moved earlier.
        mode: ``"insertion"`` or ``"deletion"``.
        target: None (the predicted class), an int or a LongTensor (N,); tabular: None or 1.
        steps: S, the number of increments; None: ⌈n / 50⌉ pixels, or one per feature.
        baseline: a name of ``BASELINES`` or a tensor of x's shape or of one input's.
        stats: (mean, std) per channel (per feature) for the ``"normal"`` baseline.
        seed: seeds the tie-breaking permutations and the normal baseline's noise.
        max_batch: the most rows one forward pass sees (None: ``resolve_max_batch``).
        offset, total: x is inputs offset … of a call over ``total`` (None: N) inputs.
    """
    modality, n, steps = _check_inputs(model, x, maps, mode, steps)
    total = check_part(offset, total, len(x))
    with eval_mode(model):
        with torch.no_grad():
            device = model_device(model, x)
            x, maps = x.detach().to(device), maps.detach().to(device)
            max_batch = resolve_max_batch(max_batch, x)
            generator = torch.Generator().manual_seed(seed)
            skip_permutations(generator, offset, n)
            ranks = unit_ranks(maps.reshape(len(x), n), generator)
            if isinstance(baseline, str) and baseline == "normal" and total > len(x):
                skip_permutations(generator, total - offset - len(x), n)
                skip_normal(generator, offset, x.shape[1:], x.dtype, offset + len(x), total)
            base = _baseline(x, baseline, stats, modality, generator)
            target = resolve_targets(model, x, target, max_batch)
            start, end = (base, x) if mode == "insertion" else (x, base)
            counts = torch.arange(steps + 1, device=device) * n // steps  # k_s
            memory_format = torch.channels_last if _channels_last(x) else torch.contiguous_format
            points = []
            for rows in torch.arange(len(x) * (steps + 1), device=device).split(max_batch):
                image, step = rows // (steps + 1), rows % (steps + 1)
                moved = modality.unit_mask((ranks[image] < counts[step, None]).view(-1, *modality.unit_shape(x)))
                rows_in = torch.where(moved, end[image], start[image]).contiguous(memory_format=memory_format)
                points.append(target_outputs(model, rows_in, target[image], "probability"))
            curves = torch.cat(points).view(len(x), steps + 1)
    return counts.to(curves.dtype) / n, curves


def auc(curves: torch.Tensor, fractions: torch.Tensor) -> torch.Tensor:
    """(N,) areas under curves (N, S+1) over the fractions (S+1,) of units moved: the
    trapezoid rule, Σ_s (f_s - f_{s-1}) (p_s + p_{s-1}) / 2. Curves with NaN or ±inf are refused."""
    if curves.dim() != 2 or fractions.shape != curves.shape[1:]:
        raise InputError(f"curves of shape {tuple(curves.shape)} and fractions of shape {tuple(fractions.shape)}; "
                         "expected (N, S+1) and (S+1,)")  # fmt: skip
    check_finite(curves, "curves", "curve")
    return torch.trapezoid(curves, fractions.to(curves), dim=-1)


# --- the Metrics ------------------------------------------------------------------------------------
class _CurveAUC(MeanOverInputs):
    """The mean insertion or deletion AUC over every input scored by ``update``.

    ``update(model, x, maps, target=None)`` scores inputs x with their maps through
    ``insertion_deletion_curves`` with this metric's options (the states, their reduction
    and the random numbers of each update: ``evaluators.metrics.base``).

    Args (those of ``insertion_deletion_curves``): steps, baseline, stats, seed, max_batch.
    """

    mode: str

    def __init__(self, steps: int | None = None, baseline: str | torch.Tensor = "normal", stats=None, seed: int = 0,
                 max_batch: int | None = None, **kwargs) -> None:  # fmt: skip
        if isinstance(baseline, str) and baseline not in BASELINES:
            raise InputError(f"option baseline={baseline!r}; expected one of {list(BASELINES)} or a tensor")
        super().__init__({"steps": steps, "baseline": baseline, "stats": stats, "seed": seed, "max_batch": max_batch},
                         **kwargs)  # fmt: skip

    def scores(self, model: nn.Module, x: torch.Tensor, maps: torch.Tensor, target=None, explain_fn=None):
        fractions, curves = insertion_deletion_curves(model, x, maps, self.mode, target, **self.options)
        return auc(curves, fractions)


@register_variant("insertion", insertion_deletion_curves, higher_is_better=True, mode="insertion")
class InsertionAUC(_CurveAUC):
    """Mean insertion AUC (higher is better); see ``_CurveAUC``."""


@register_variant("deletion", insertion_deletion_curves, higher_is_better=False, mode="deletion")
class DeletionAUC(_CurveAUC):
    """Mean deletion AUC (lower is better); see ``_CurveAUC``."""


# The public, checked entry points (maps with NaN or ±inf refused: tests/faults/test_nonfinite_maps.py);
# the other functions here are steps inside ``insertion_deletion_curves``, which checks their maps once.
__all__ = ["BASELINES", "MODES", "DeletionAUC", "InsertionAUC", "auc", "default_steps", "insertion_deletion_curves",
           "rise_blur_kernel"]
