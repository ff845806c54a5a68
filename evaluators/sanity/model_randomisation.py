"""Adebayo et al.'s model parameter randomisation test (NeurIPS 2018, §3.1) for any classifier
and any explainers of the registry (docs/sanity_checks.md#definitions).

``model_randomisation(model, x, target, explainers, mode, measures, seed)``: for every layer of
:func:`evaluators.sanity.layers.randomised_models` (top layer first; ``mode`` ``"cascading"`` or
``"independent"``), every explainer and every similarity measure
(``evaluators.metrics.similarity``), the similarity of each input's map under the randomised
model to its map under the original model, both of the same class ``target`` (the labels; None:
the original model's predicted class) with the same random draws (``seed``). All inputs are
explained at once on the model's device (the registry's batching); the layers follow one
another, each a different network. Image maps are reduced over channels by ``reduction``
(``reduce_map``; ``"sum"``: signed maps, as Quantus's Captum explanations), so ``"spearman"``
compares signed and ``"spearman_abs"`` absolute maps. A score is NaN where a map is constant
(``similarity``'s convention). Returns a :class:`RandomisationScores`.

Hedström et al. (2023)'s smooth MPRT is this test on denoised maps (``n_samples`` > 1,
``noise_magnitude``: ``maps.smoothed_maps``), layers randomised bottom up (``mode="bottom_up"``);
their efficient MPRT is ``evaluators.sanity.efficient_mprt``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from evaluators.metrics.similarity import MEASURES, similarity
from evaluators.sanity.layers import check_mode, randomised_models
from evaluators.sanity.maps import prepared, smoothed_maps
from foundation.finite import finite_mean
from foundation.seeds import check_seed


@dataclass(frozen=True)
class RandomisationScores:
    """``scores[l, e, s, i]`` (float64): similarity by ``measures[s]`` of input i's map by
    ``explainers[e]`` after randomising ``layers[l]`` (cascading: and every layer above it) to
    its map under the original model. ``itself[e, s, i]``: the original map against itself (1,
    or NaN where the measure is undefined for it: a constant map), the stage before any
    randomisation. ``maps`` (with ``keep_maps``): ``maps[e][0]`` the original model's maps,
    ``maps[e][1 + l]`` those after step l, of every input or of the inputs ``keep_maps`` names."""

    mode: str
    layers: list[str]
    explainers: list[str]
    measures: list[str]
    scores: torch.Tensor
    maps: dict[str, torch.Tensor] | None = None
    itself: torch.Tensor | None = None

    def mean(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The mean over inputs (L, E, S) of the finite scores, and how many were finite."""
        return finite_mean(self.scores)


def model_randomisation(model: nn.Module, x: torch.Tensor, target: torch.Tensor | int | None,
                        explainers: Sequence[str] | Mapping[str, Mapping], mode: str = "cascading",
                        measures: Sequence[str] = MEASURES, seed: int = 0, reduction: str = "sum",
                        keep_maps: bool | torch.Tensor = False,
                        same_seed: bool = False, n_samples: int = 1,
                        noise_magnitude: float = 0.0,
                        noise: torch.Tensor | None = None) -> RandomisationScores:  # fmt: skip
    """The test of the module docstring; ``explainers`` names (or ``{name: options}``),
    ``same_seed`` as in ``randomised_models``; ``n_samples``, ``noise_magnitude``: every map
    denoised as ``smoothed_maps`` does (1: the plain maps; ``noise``: its draws, the same at
    every stage, as they are when drawn from ``seed``); ``keep_maps``: True keeps every input's maps of
    every stage, a tensor of input indices only those inputs' (a figure's few: memory for
    L + 1 stages of a few maps, not of all N)."""
    check_mode(mode)
    check_seed(seed)
    options, measures, x, target = prepared(model, x, target, explainers, measures, reduction)

    def maps_of(net: nn.Module, name: str, opts: dict) -> torch.Tensor:
        return smoothed_maps(net, x, target, name, opts, seed, reduction, n_samples, noise_magnitude, noise)

    original = {name: maps_of(model, name, opts) for name, opts in options.items()}
    itself = torch.stack([torch.stack([similarity(m, m, measure, (f"explainer {name!r}",) * 2) for measure in measures])
                          for name, m in original.items()])  # fmt: skip
    keep = None if isinstance(keep_maps, bool) else torch.as_tensor(keep_maps, dtype=torch.long)
    kept = {name: [m if keep is None else m[keep.to(m.device)]] for name, m in original.items()}
    layers, scores = [], []
    for layer, randomised in randomised_models(model, mode, seed, same_seed):
        layers.append(layer)
        per_explainer = []
        for name, opts in options.items():
            maps = maps_of(randomised, name, opts)
            names = (f"explainer {name!r} after randomising {layer!r}", f"explainer {name!r} of the original model")
            per_explainer.append(torch.stack([similarity(maps, original[name], m, names) for m in measures]))
            if keep is not None or keep_maps:
                kept[name].append(maps if keep is None else maps[keep.to(maps.device)])
        scores.append(torch.stack(per_explainer))
    kept_maps = {name: torch.stack(m) for name, m in kept.items()} if keep is not None or keep_maps else None
    return RandomisationScores(mode, layers, list(options), measures, torch.stack(scores), kept_maps, itself)


__all__ = ["RandomisationScores", "model_randomisation"]
