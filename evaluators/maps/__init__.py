"""What makes explanation maps: explainers (and the aggregators built on them).

``explain(model, x, method, target=None, **options)`` explains any model this framework
trains (the interface is in ``lightning_modules.interface``):

* a tabular model (``MLPClassifier``, ``PopulationMLP``, ``MLPEnsemble``) -> its
  positive-class output, through ``tabular_explainers`` (``TABULAR_EXPLAINERS``; batched
  populations, chunked ensembles, the fast paths Table 1 depends on); ``target`` is
  ``None`` or 1;
* any other classifier of images (N, C, H, W) -> (N, K) logits -> the logit of
  ``target`` (default: the predicted class), through ``image_explainers``
  (``IMAGE_EXPLAINERS``; chunked over images on the model's device).

Both registries are string-keyed; ``explainer_names(model)`` lists the names a model takes.
"""

from __future__ import annotations

import torch
from torch import nn

from datamodules.errors import InputError
from evaluators.maps.image_explainers import IMAGE_EXPLAINERS, explain_image
from evaluators.maps.seeds import call_seed
from evaluators.maps.tabular_explainers import TABULAR_EXPLAINERS, explain_tabular
from lightning_modules.interface import POSITIVE_CLASS, is_tabular


def explainer_names(model: nn.Module) -> list[str]:
    """The registry names ``explain`` accepts for ``model``."""
    return sorted(TABULAR_EXPLAINERS if is_tabular(model) else IMAGE_EXPLAINERS)


def explain(model: nn.Module, x: torch.Tensor, method: str, target=None, seed: int = 0, index=None,
            **options) -> torch.Tensor:  # fmt: skip
    """Attributions of ``model``'s explained output for inputs ``x``, shaped like ``x``
    ((M, N, d) for a population): see the module docstring for which output and the
    registries for the methods and their options. Random draws come from ``seed`` and the
    inputs' indices in their split ``index`` (None: 0 … N − 1): per image for images
    (``seeds.image_seeds``), per call for tabular models (``seeds.call_seed``: a chunk of
    a split draws from (seed, its first index))."""
    if not is_tabular(model):
        return explain_image(model, x, method, target=target, seed=seed, index=index, **options)
    if target is not None and target != POSITIVE_CLASS:
        raise InputError(f"option target={target!r}: a tabular model explains its positive class ({POSITIVE_CLASS})")
    return explain_tabular(model, x, method, seed=call_seed(seed, index), **options)


__all__ = ["IMAGE_EXPLAINERS", "TABULAR_EXPLAINERS", "explain", "explainer_names"]
