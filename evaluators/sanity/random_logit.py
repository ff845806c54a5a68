"""The random-logit test (Sixt et al. 2020, "When explanations lie", as Quantus 0.6's
``RandomLogit``; docs/sanity_checks.md#definitions): each input's map of a class drawn at random
among the other classes, compared with its map of ``target`` (the labels; None: the predicted
class) by the similarity measures. An explainer whose maps hardly depend on the class explained
scores near 1.

The other class of input i is ``other[i] = j + (j >= target[i])`` with ``j`` drawn uniformly
from 0 … K − 2 (K the model's classes), the draws ``numpy.random.RandomState(seed).randint(0, K
- 1, N)``: Quantus's draws for the same seed when its batch holds all N inputs (Quantus reseeds
NumPy's global generator per batch; ours leaves it alone). Maps and channel reduction as in
``model_randomisation``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch
from torch import nn

from evaluators.metrics.similarity import similarity
from evaluators.sanity.maps import maps_of, prepared
from foundation.errors import InputError
from foundation.seeds import check_seed


def other_classes(target: torch.Tensor, num_classes: int, seed: int) -> torch.Tensor:
    """A class other than ``target[i]`` for every input, drawn as the module docstring says."""
    if num_classes < 2:
        raise InputError(f"the random-logit test needs a model of at least 2 classes; got {num_classes}")
    draws = np.random.RandomState(check_seed(seed)).randint(0, num_classes - 1, len(target))
    j = torch.from_numpy(draws).to(target.device)
    return j + (j >= target).long()


def random_logit(model: nn.Module, x: torch.Tensor, target: torch.Tensor | int | None,
                 explainers: Sequence[str] | Mapping[str, Mapping], measures: Sequence[str] = ("ssim",),
                 seed: int = 0, reduction: str = "sum") -> dict[str, dict[str, torch.Tensor]]:  # fmt: skip
    """``{explainer: {measure: scores (N,) float64}}``: similarity of each input's map of a random
    other class (``other_classes(target, K, seed)``) to its map of ``target``."""
    options, measures, x, target = prepared(model, x, target, explainers, measures, reduction)
    with torch.no_grad():
        num_classes = model(x[:1]).shape[-1]
    if bool((target < 0).any()) or bool((target >= num_classes).any()):
        raise InputError(f"option target: labels {sorted(set(target.tolist()))}; expected classes 0 … "
                         f"{num_classes - 1}")
    other = other_classes(target, num_classes, seed)
    scores = {}
    for name, opts in options.items():
        true_maps = maps_of(model, x, target, name, opts, seed, reduction)
        other_maps = maps_of(model, x, other, name, opts, seed, reduction)
        names = (f"explainer {name!r} of the target class", f"explainer {name!r} of a random other class")
        scores[name] = {m: similarity(true_maps, other_maps, m, names) for m in measures}
    return scores


__all__ = ["other_classes", "random_logit"]
