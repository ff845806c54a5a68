"""The contract every explained classifier meets, and the functions that read it (docs/explainers.md).

A classifier is an ``nn.Module`` whose ``forward`` maps inputs (N, ...) to class logits
(N, K) (an ensemble's: its members' mean logit; a ``PopulationMLP``'s: (M, N, K)); any
``nn.Module`` meets it with no wrapper. A model may also define ``probabilities(x)``
(where they are not the softmax of its logits), ``member_logits(x)`` (M, N, K),
``explained_class`` (the class its explanations are of by default: an int, or ``PREDICTED``; such a
model is explained through its class scores, ``evaluators.maps.adapters``) and ``explain_output`` (``"logit"`` or
``"probability"``, the output explained).
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from torch import nn

from foundation.batching import resolve_max_batch
from foundation.errors import InputError

POSITIVE_CLASS = 1  # the class a binary tabular model explains by default (Ley et al.: label 1)
PREDICTED = "predicted"  # the default of a multi-class tabular model: each input's predicted class


def tabular_class(num_classes: int) -> int | str:
    """The ``explained_class`` of a tabular model of ``num_classes`` classes: ``POSITIVE_CLASS``
    for two (Ley et al.), else ``PREDICTED`` (a multi-class table has no positive class)."""
    return POSITIVE_CLASS if num_classes == 2 else PREDICTED


def check_num_classes(num_classes: int) -> None:
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 2:
        raise InputError(f"option num_classes={num_classes!r}; expected an integer of at least 2")


def class_probabilities(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Class probabilities (N, K) ((M, N, K) for a population): ``probabilities``, else the softmax of the logits."""
    own = getattr(model, "probabilities", None)
    return own(x) if callable(own) else model(x).softmax(-1)


def default_class(model: nn.Module) -> int | str | None:
    """The class a model's explanations are of by default (``explained_class``): an int (every
    input's) or ``PREDICTED``; None for a classifier without one (by default each input's
    predicted class, of its logits)."""
    return getattr(model, "explained_class", None)


def output_kind(model: nn.Module) -> str:
    """The output ``model``'s explanations differentiate: ``"logit"`` or ``"probability"``
    (its ``explain_output``, as an attribute or a hyperparameter)."""
    return getattr(model, "explain_output", None) or getattr(getattr(model, "hparams", None), "explain_output", "logit")


@contextmanager
def eval_mode(model: nn.Module):
    """``model`` in eval mode for the block, its previous mode restored afterwards."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


def predicted_class(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The argmax of ``class_probabilities`` (N,); a population's ((M, N, K)): of its members' mean."""
    probabilities = class_probabilities(model, x)
    return (probabilities.mean(0) if probabilities.dim() == 3 else probabilities).argmax(-1)


def default_classes(model: nn.Module, x: torch.Tensor, max_batch: int | None = None) -> torch.Tensor:
    """The explained class per input by default (:func:`default_targets`: the model's
    ``explained_class`` where it is an int, else the argmax of the class probabilities), (N,),
    in chunks of ``max_batch`` inputs (``foundation.batching.resolve_max_batch``)."""
    return default_targets(model, x, None, resolve_max_batch(max_batch, x))


def default_targets(model: nn.Module, x: torch.Tensor, target=None, rows: int | None = None) -> torch.Tensor:
    """The explained class per input, a LongTensor (N,) on x's device: ``target`` (an int or N
    labels), else the model's ``explained_class`` where it is an int, else its predicted class
    (``predicted_class``, ``rows`` inputs at a time, without gradients)."""
    fixed = default_class(model)
    if target is None and fixed in (None, PREDICTED):
        with torch.no_grad():
            return torch.cat([predicted_class(model, part) for part in x.split(rows or len(x) or 1)])
    target = fixed if target is None else target
    if isinstance(target, int) and not isinstance(target, bool):
        target = torch.full((len(x),), target, dtype=torch.long, device=x.device)
    if not isinstance(target, torch.Tensor) or target.shape != (len(x),) or target.is_floating_point():
        raise InputError(f"option target={target!r}; expected None (the model's default), an int or a LongTensor "
                         f"of {len(x)} labels")  # fmt: skip
    return target.to(x.device, torch.long)


def default_output(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``explained_output`` of the model's default class (``default_targets``) and output kind."""
    return explained_output(model, x, uniform(default_targets(model, x)), output_kind(model))


def uniform(target):
    """``target`` as one int where every input has the same class (a single index is cheaper
    than a gather, and gives a binary model's default the computation it always had)."""
    if isinstance(target, torch.Tensor) and len(target) and bool(target.min() == target.max()):
        return int(target[0])
    return target


def check_classes(target, classes: int) -> None:
    """An ``InputError`` unless every class of ``target`` (an int or labels) is one of 0 .. classes - 1."""
    values = [target] if isinstance(target, int) else torch.stack([target.min(), target.max()]).tolist()
    bad = [v for v in values if not 0 <= v < classes]
    if bad:
        raise InputError(f"option target={bad[0]}: no such class; expected classes 0 .. {classes - 1} of this model")


def _pick(scores: torch.Tensor, target) -> torch.Tensor:
    """Column ``target`` of ``scores`` (..., N, K): one index where every input has the same class."""
    target = uniform(target)
    if isinstance(target, int) or len(target):
        check_classes(target, scores.shape[-1])
    if isinstance(target, int):
        return scores[..., target]
    return scores.gather(-1, target.view(-1, 1).expand(*scores.shape[:-1], 1))[..., 0]


def explained_output(model: nn.Module, x: torch.Tensor, target, output: str = "logit") -> torch.Tensor:
    """The scalar (N,) ((M, N) for a population) an explanation of ``target`` (an int or N
    labels) differentiates: its logit or (``output="probability"``) its softmax probability;
    with ``member_logits``, the members' mean of theirs."""
    members = getattr(model, "member_logits", None)
    logits = members(x) if callable(members) else model(x)
    scores = _pick(logits.softmax(-1) if output == "probability" else logits, target)
    return scores.mean(0) if callable(members) else scores


def class_scores(model: nn.Module, x: torch.Tensor, output: str = "logit") -> torch.Tensor:
    """Every class's ``explained_output`` at once, (N, K) ((M, N, K) for a population), for an
    explainer that picks each input's column itself (Captum's ``target``)."""
    members = getattr(model, "member_logits", None)
    logits = members(x) if callable(members) else model(x)
    scores = logits.softmax(-1) if output == "probability" else logits
    return scores.mean(0) if callable(members) else scores
