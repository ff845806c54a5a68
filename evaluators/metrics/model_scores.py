"""What the metrics that read a model share: the checks of the inputs (and maps) they
score, the class each input is scored on, and the scalar outputs they read.

* **Inputs and maps** (``check_inputs``, ``check_inputs_and_maps``): images x
  (N, C, H, W) take one map value per pixel, maps (N, H, W) (reduce (N, C, H, W)
  attributions with ``evaluators.maps.image_explainers.reduce_map`` first); a tabular
  model (``is_tabular``) takes rows x (N, d) and maps (N, d), one value per feature.
  Inputs, maps and the model's outputs must be finite: NaN or ±inf is refused with one
  ``InputError`` naming the input, map or output row (``evaluators.inputs.finite.check_finite``).
* **Target** (``resolve_targets``): for images ``None`` scores each image's predicted
  class on the clean input (the argmax of its logits), else an int for all or a
  LongTensor of N labels; a tabular model is scored on its positive class
  (``POSITIVE_CLASS``), its target resolved to None.
* **Outputs** (``explained_scores``, ``target_outputs``, ``OUTPUTS``): ``"logit"``, the
  explained output: the target's raw logit of an image classifier, a tabular model's
  ``explained_output`` (the positive-class scalar its explainers differentiate: a logit
  unless the model was built to explain its probability); ``"probability"``, the target's
  probability from ``class_probabilities`` (the softmax of the logits; an
  ``MLPEnsemble``'s own mean probabilities).
"""

from __future__ import annotations

import torch
from torch import nn

from datamodules.errors import InputError
from evaluators.inputs.finite import check_finite
from evaluators.maps.image_explainers import image_targets
from lightning_modules.interface import POSITIVE_CLASS, class_probabilities, is_tabular

OUTPUTS = ("logit", "probability")
MODEL_OUTPUT = "the model's output on the inputs scored (clean or perturbed)"


def model_device(model: nn.Module, x: torch.Tensor) -> torch.device:
    """The device of the model's parameters (x's device for a model without any)."""
    parameter = next(model.parameters(), None)
    return x.device if parameter is None else parameter.device


def check_inputs(model: nn.Module, x) -> bool:
    """Whether the model is tabular; InputError unless x is finite (N, d) rows for a
    tabular model, (N, C, H, W) images for any other."""
    tabular = is_tabular(model)
    expected = "(N, d) float rows for a tabular model" if tabular else "(N, C, H, W) float images"
    if (not isinstance(x, torch.Tensor) or x.dim() != (2 if tabular else 4) or len(x) == 0
            or not x.is_floating_point()):  # fmt: skip
        raise InputError(f"inputs x of shape {tuple(getattr(x, 'shape', ()))}; expected {expected}")
    check_finite(x, "inputs x", "input")
    return tabular


def check_inputs_and_maps(model: nn.Module, x, maps) -> tuple[bool, tuple[int, ...]]:
    """``check_inputs``, and finite maps of one value per unit: whether the model is
    tabular and the shape of one input's units ((H, W) or (d,))."""
    tabular = check_inputs(model, x)
    unit_shape = tuple(x.shape[1:]) if tabular else tuple(x.shape[2:])
    if not isinstance(maps, torch.Tensor) or tuple(maps.shape) != (len(x), *unit_shape):
        raise InputError(
            f"maps of shape {tuple(getattr(maps, 'shape', ()))}; expected {(len(x), *unit_shape)}, one value per "
            + ("feature" if tabular else "pixel (reduce (N, C, H, W) maps with reduce_map)")
        )
    check_finite(maps, "maps", "map")
    return tabular, unit_shape


def resolve_targets(model: nn.Module, x: torch.Tensor, target, max_batch: int | None = None) -> torch.Tensor | None:
    """The class each input's explained output is of: None for a tabular model (its
    positive class; ``target`` must be None or 1); for images a LongTensor (N,): the
    predicted class where ``target`` is None, else an int for all or N labels."""
    if is_tabular(model):
        if target is not None and not (isinstance(target, int) and target == POSITIVE_CLASS):
            raise InputError(f"option target={target!r}: a tabular model explains its positive class "
                             f"({POSITIVE_CLASS})")  # fmt: skip
        return None
    return image_targets(model, x, target, max_batch)


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


def explained_scores(model: nn.Module, x: torch.Tensor, target: torch.Tensor | None) -> torch.Tensor:
    """(N,) the explained output: a tabular model's ``explained_output``, else the raw
    logit of ``target`` (N,) (as Decker et al.'s reference code's Δf)."""
    if target is None:
        return _one_per_row(model.explained_output(x), x)
    logits = model(x)
    return _one_per_row(logits.gather(1, target[:, None])[:, 0] if logits.dim() == 2 else logits, x)


def target_outputs(model: nn.Module, x: torch.Tensor, target: torch.Tensor | None, output: str) -> torch.Tensor:
    """(N,) the ``output`` (``OUTPUTS``) of each row's target (None: the positive class of a
    tabular model)."""
    if output == "logit":
        return explained_scores(model, x, target)
    probabilities = class_probabilities(model, x)
    if probabilities.dim() != 2:
        return _one_per_row(probabilities, x)
    column = torch.full((len(x), 1), POSITIVE_CLASS, device=x.device) if target is None else target[:, None]
    return finite_outputs(probabilities.gather(1, column)[:, 0])
