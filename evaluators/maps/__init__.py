"""What makes explanation maps: the explainer registry ``EXPLAINERS`` (``maps.registry``; one
function per method, ``maps.gradients`` and ``maps.perturbations``) and
``explain(model, x, method, target=None, seed=0, index=None, max_batch=None, **options)`` for
any classifier of the model contract (``lightning_modules.interface``; docs/explainers.md).

Every model kind is explained by the same definition of each method: the model adapters
(``maps.adapters``) show it as a function of its inputs to class scores (N, K) (a model with a
default class through its explained output, a population as a batch or member by member, an
ensemble in chunks of members); each input's draws come from its own seed, ``derived_seed(seed,
index[i])``, so an input's map depends only on the model, the input, its index and the seed.
"""

from __future__ import annotations

import torch
from torch import nn

from evaluators.maps import gradients, perturbations, relevance  # noqa: F401  (they fill the registry)
from evaluators.maps.adapters import explain_model
from evaluators.maps.registry import EXPLAINERS
from foundation.errors import InputError
from foundation.modality import MODALITIES, REDUCTIONS, IMAGES, ROWS, modality_of, reduce_map
from foundation.seeds import check_seed, input_seeds
from lightning_modules.interface import default_class


def input_kind(x: torch.Tensor) -> str | None:
    """The name of the modality whose inputs ``x`` are (``foundation.modality``: ``"rows"`` (N, d),
    ``"images"`` (N, C, H, W)), or None (other shapes: only methods for every modality take them)."""
    return next((m.name for m in MODALITIES.values() if m.recognises(x)), None)


def _takes(entry, kind: str | None) -> bool:
    return entry.applies_to(kind) if kind is not None else set(MODALITIES) <= set(entry.modalities)


def _model_modality(model: nn.Module) -> str:
    """The modality ``model`` declares (``foundation.modality.modality_of``); a model that declares
    none (a user's module): images where it has an ``nn.Conv2d`` and no default class, else rows."""
    try:
        return modality_of(model).name
    except InputError:
        images = default_class(model) is None and any(isinstance(m, nn.Conv2d) for m in model.modules())
        return (IMAGES if images else ROWS).name


def explainer_names(model: nn.Module, x: torch.Tensor | None = None) -> list[str]:
    """The registry names ``explain`` accepts for ``model`` and inputs like ``x`` (None: inputs of
    the model's modality)."""
    kind = _model_modality(model) if x is None else input_kind(x)
    return sorted(name for name, entry in EXPLAINERS.items() if _takes(entry, kind))


def explain(model: nn.Module, x: torch.Tensor, method: str, target=None, seed: int = 0, index=None,
            max_batch: int | None = None, **options) -> torch.Tensor:  # fmt: skip
    """Attributions of ``model``'s explained output for inputs ``x`` by explainer ``method``, shaped
    like ``x`` ((M, N, ...) for a population): of class ``target`` per input (an int or N labels;
    None: the model's default, ``interface.default_targets``). Random draws come from ``seed``
    and the inputs' indices in their split ``index`` (None: 0 … N − 1), input i's from
    ``derived_seed(seed, index[i])`` (``seeds.input_seeds``). ``max_batch``: rows per forward pass
    (``foundation.batching.resolve_max_batch``)."""
    entry = EXPLAINERS[method]
    if not isinstance(x, torch.Tensor) or x.dim() < 2 or not _takes(entry, input_kind(x)):
        takes = " or ".join(f"{MODALITIES[m].noun} {MODALITIES[m].shape}" for m in entry.modalities) if (
            set(entry.modalities) != set(MODALITIES)) else "inputs (N, ...)"  # fmt: skip
        raise InputError(f"explainer {method!r} takes {takes}; got inputs of shape {tuple(getattr(x, 'shape', ()))}")
    check_seed(seed)
    for need in entry.needs:
        if not isinstance(options.get(need), torch.Tensor):
            raise InputError(f"explainer {method!r} needs option {need}: a tensor of inputs (B, "
                             f"{', '.join(map(str, x.shape[1:]))}) (docs/explainers.md)")  # fmt: skip
    return explain_model(model, x, method, entry, target, input_seeds(seed, index, len(x)), seed, max_batch, options)


__all__ = ["EXPLAINERS", "REDUCTIONS", "explain", "explainer_names", "input_kind", "reduce_map"]
