"""What the metrics that read a model share: the checks of the inputs (and maps) they
score, the class each input is scored on, and the scalar outputs they read.

* **Inputs and maps** (``check_inputs``, ``check_inputs_and_maps``): images x
  (N, C, H, W) take one map value per pixel, maps (N, H, W) (reduce (N, C, H, W)
  attributions with ``evaluators.maps.image_explainers.reduce_map`` first); rows x (N, d)
  (the only inputs of a tabular model) take maps (N, d), one value per feature.
  Inputs, maps and the model's outputs must be finite: NaN or ±inf is refused with one
  ``InputError`` naming the input, map or output row (``foundation.finite.check_finite``).
* **Target** (``resolve_targets``, ``interface.default_targets``): a LongTensor (N,):
  ``None`` scores each input's default target (the predicted class on the clean input, the
  argmax of its class probabilities; a binary tabular model's positive class,
  ``POSITIVE_CLASS``), else an int for all or a LongTensor of N labels.
* **Outputs** (``explained_scores``, ``target_outputs``, ``OUTPUTS``): ``"logit"``, the
  explained output (``interface.explained_output``): the target's raw logit, or for a model
  built to explain its probability (a tabular ``explain_output="probability"``) that
  probability; ``"probability"``, the target's probability from ``class_probabilities``
  (the softmax of the logits; an ensemble's own mean probabilities).
"""

from __future__ import annotations

import torch
from torch import nn

from foundation.finite import check_finite
from foundation.batching import resolve_max_batch
from foundation.errors import InputError
from foundation.modality import MODALITIES, Modality, modality_of
from lightning_modules.interface import (
    check_classes, class_probabilities, default_targets, explained_output, fixed_target, output_kind,
)  # fmt: skip

OUTPUTS = ("logit", "probability")
MODEL_OUTPUT = "the model's output on the inputs scored (clean or perturbed)"


def check_inputs(model: nn.Module, x) -> Modality:
    """The modality of x (``foundation.modality``); InputError unless x is finite (N, d) rows
    (the only inputs of a tabular model, one with a fixed class) or (N, C, H, W) images."""
    fixed = fixed_target(model) is not None
    accepted = [m for m in MODALITIES.values() if m.fixed_class or not fixed]
    expected = " or ".join(f"{m.shape} float {m.noun}" for m in accepted) + (" for a model with a fixed class" * fixed)
    if (not any(m.recognises(x) for m in accepted) or len(x) == 0 or not x.is_floating_point()):  # fmt: skip
        raise InputError(f"inputs x of shape {tuple(getattr(x, 'shape', ()))}; expected {expected}")
    check_finite(x, "inputs x", "input")
    return modality_of(x)


def check_inputs_and_maps(model: nn.Module, x, maps) -> tuple[Modality, tuple[int, ...]]:
    """``check_inputs``, and finite maps of one value per unit: the inputs' modality and the
    shape of one input's units (``Modality.unit_shape``: (H, W) or (d,))."""
    modality = check_inputs(model, x)
    unit_shape = modality.unit_shape(x)
    if not isinstance(maps, torch.Tensor) or tuple(maps.shape) != (len(x), *unit_shape):
        raise InputError(
            f"maps of shape {tuple(getattr(maps, 'shape', ()))}; expected {(len(x), *unit_shape)}, one value per "
            + modality.unit
            + ("" if modality.reduced_dim is None else f" (reduce {modality.shape} maps: Modality.reduce, reduce_map)")
        )
    check_finite(maps, "maps", "map")
    return modality, unit_shape


def resolve_targets(model: nn.Module, x: torch.Tensor, target, max_batch: int | None = None) -> torch.Tensor:
    """The class each input's explained output is of, a LongTensor (N,) (``default_targets``:
    None -> the predicted class, ``max_batch`` inputs at a time, or a tabular model's positive class)."""
    return default_targets(model, x, target, resolve_max_batch(max_batch, x))


def finite_outputs(outputs: torch.Tensor) -> torch.Tensor:
    """``outputs`` (rows, ...) of the model, after ``check_finite`` (a row with NaN or ±inf
    is refused, not averaged away)."""
    check_finite(outputs, MODEL_OUTPUT, "row")
    return outputs


def _one_per_row(scores: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    if scores.shape != (len(x),):
        raise InputError(f"the model's scores have shape {tuple(scores.shape)}; expected ({len(x)},): score a "
                         "population's members one at a time")  # fmt: skip
    return finite_outputs(scores)


def explained_scores(model: nn.Module, x: torch.Tensor, target: torch.Tensor | None = None) -> torch.Tensor:
    """(N,) the explained output of ``target`` (N,) (None: the default, ``default_targets``)
    (``interface.explained_output``: the raw logit, as Decker et al.'s reference code's Δf,
    or a tabular model's probability where it explains that)."""
    target = default_targets(model, x) if target is None else target
    return _one_per_row(explained_output(model, x, target, output_kind(model)), x)


def target_outputs(model: nn.Module, x: torch.Tensor, target: torch.Tensor | None, output: str) -> torch.Tensor:
    """(N,) the ``output`` (``OUTPUTS``) of each row's target (None: the default, ``default_targets``)."""
    target = default_targets(model, x) if target is None else target
    if output == "logit":
        return explained_scores(model, x, target)
    probabilities = class_probabilities(model, x)
    if probabilities.dim() != 2:
        return _one_per_row(probabilities, x)
    check_classes(target, probabilities.shape[1])
    return finite_outputs(probabilities.gather(1, target[:, None])[:, 0])
