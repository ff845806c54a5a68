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

from evaluators.maps import gradients, perturbations  # noqa: F401  (they fill the registry)
from evaluators.maps.adapters import explain_model
from evaluators.maps.reduction import REDUCTIONS, reduce_map
from evaluators.maps.registry import EXPLAINERS
from foundation.errors import InputError
from foundation.registry import ALL_MODALITIES
from foundation.seeds import check_seed, input_seeds
from lightning_modules.interface import default_class

INPUT_DIMS = {"rows": 2, "images": 4}
TAKES = {"rows": "rows (N, d)", "images": "images (N, C, H, W)"}


def input_kind(x: torch.Tensor) -> str | None:
    """``"rows"`` (N, d), ``"images"`` (N, C, H, W), or None (other shapes: only methods for every
    modality take them)."""
    return next((kind for kind, dims in INPUT_DIMS.items() if x.dim() == dims), None)


def _takes(entry, kind: str | None) -> bool:
    return entry.applies_to(kind) if kind is not None else set(ALL_MODALITIES) <= set(entry.modalities)


def explainer_names(model: nn.Module, x: torch.Tensor | None = None) -> list[str]:
    """The registry names ``explain`` accepts for ``model`` and inputs like ``x`` (None: images
    for a model with an ``nn.Conv2d`` and no default class, else rows)."""
    images = default_class(model) is None and any(isinstance(m, nn.Conv2d) for m in model.modules())
    kind = ("images" if images else "rows") if x is None else input_kind(x)
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
        takes = " or ".join(TAKES[m] for m in entry.modalities) if set(entry.modalities) != set(ALL_MODALITIES) else (
            "inputs (N, ...)")  # fmt: skip
        raise InputError(f"explainer {method!r} takes {takes}; got inputs of shape {tuple(getattr(x, 'shape', ()))}")
    check_seed(seed)
    for need in entry.needs:
        if not isinstance(options.get(need), torch.Tensor):
            raise InputError(f"explainer {method!r} needs option {need}: a tensor of inputs (B, "
                             f"{', '.join(map(str, x.shape[1:]))}) (docs/explainers.md)")  # fmt: skip
    return explain_model(model, x, method, entry, target, input_seeds(seed, index, len(x)), seed, max_batch, options)


__all__ = ["EXPLAINERS", "REDUCTIONS", "explain", "explainer_names", "input_kind", "reduce_map"]
