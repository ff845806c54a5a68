"""The one interface every explained model meets, and the functions that read it.

A classifier here is an ``nn.Module`` whose ``forward`` maps a batch of inputs (N, ...)
to class scores (N, K): logits for a single model (``MLPClassifier``,
``ImageClassifier``, any torchvision or timm network), the members' mean probability
for an ``MLPEnsemble`` (vote shares for ``majority``), the members' mean logit for an
``ImageEnsemble`` (whose predictions come from its ``probabilities``). A ``PopulationMLP`` maps to
(M, N, K), one block per member.

Tabular models (``MLPClassifier``, ``PopulationMLP``, ``MLPEnsemble``) also have
``explained_output``: the positive-class scalar (logit or probability, as trained)
that explainers differentiate. For every other classifier the explained scalar is the
logit of a target class, chosen per input.
"""

from __future__ import annotations

import torch
from torch import nn

from lightning_modules.ensembles import MLPEnsemble
from lightning_modules.image_ensembles import ImageEnsemble

POSITIVE_CLASS = 1  # the class a tabular model explains (Ley et al.: label 1)


def is_tabular(model: nn.Module) -> bool:
    """Whether ``model`` explains a fixed positive-class output (``explained_output``)."""
    return callable(getattr(model, "explained_output", None))


def class_probabilities(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Class probabilities (N, K) of any classifier ((M, N, K) for a population): the
    softmax of its logits, or an ensemble's own mean probabilities (vote shares)."""
    if isinstance(model, ImageEnsemble):
        return model.probabilities(x)
    scores = model(x)
    return scores if isinstance(model, MLPEnsemble) else scores.softmax(-1)
