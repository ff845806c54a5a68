"""Hedström et al. (2023)'s efficient model parameter randomisation test (eMPRT), for any
classifier and any explainers of the registry (docs/sanity_checks.md#definitions).

Where the MPRT compares a map with its randomised model's map layer by layer, the eMPRT asks
one question of two model states, the original f and the fully randomised f̂ (every layer of
``evaluators.sanity.layers`` re-initialised): how much more complex does the explanation
become? Per input x with map e = e(f, x) and ê = e(f̂, x),

    eMPRT(x) = (H(ê) − H(e)) / H(e),

H the discrete entropy (nats) of the map's values: the Shannon entropy of their histogram in
``n_bins`` equal-width bins between the map's least and largest value (``discrete_entropy``).
Higher is better: an explainer that follows the model gives noisier, higher-entropy maps for a
random model. A map whose values all fall in one bin (a constant map) has H(e) = 0 and a NaN
score (the similarity measures' convention for constant maps, counted apart by ``mean``).

Both maps explain the same class (the labels given, or the original model's predicted class)
with the same draws (``seed``); image maps are reduced over channels by ``reduction``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import scipy.stats
import torch
from torch import nn

from evaluators.sanity.layers import randomised_models
from evaluators.sanity.maps import maps_of, prepared
from foundation.errors import InputError
from foundation.finite import check_finite, finite_mean
from foundation.seeds import check_seed

N_BINS = 100  # Quantus 0.6's default (``n_bins_default``, no binning rule)


def discrete_entropy(maps: torch.Tensor, n_bins: int = N_BINS, what: str = "maps") -> torch.Tensor:
    """(N,) float64: per map (N, ...), the entropy −Σ_b p_b ln p_b of the shares p_b of its
    values in ``n_bins`` equal-width bins spanning [min, max] (NumPy's ``histogram``; a
    constant map's one value falls in one bin of [v − 0.5, v + 0.5]). NumPy and SciPy compute
    it (``np.histogram``, ``scipy.stats.entropy``) row by row: a histogram of a few thousand
    values costs microseconds beside the maps' own gradients."""
    if isinstance(n_bins, bool) or not isinstance(n_bins, int) or n_bins < 1:
        raise InputError(f"option n_bins={n_bins!r}; expected a positive integer (histogram bins)")
    if not isinstance(maps, torch.Tensor) or maps.dim() < 2 or maps.shape[1:].numel() == 0:
        raise InputError(f"{what}: expected a tensor of maps (N, ...) with values; got "
                         f"{type(maps).__name__} of shape {tuple(getattr(maps, 'shape', ()))}")  # fmt: skip
    check_finite(maps, what)
    rows = maps.detach().flatten(1).cpu().numpy()
    return torch.tensor([scipy.stats.entropy(np.histogram(row, bins=n_bins)[0]) for row in rows],
                        dtype=torch.float64)  # fmt: skip


@dataclass(frozen=True)
class EfficientScores:
    """Per explainer ``explainers[e]`` and input i: ``entropy[e, i]`` H(e) of the original
    model's map, ``randomised_entropy[e, i]`` H(ê) of the fully randomised model's (every layer
    of ``layers``), ``scores[e, i]`` = (H(ê) − H(e)) / H(e) (NaN where H(e) = 0); float64."""

    layers: list[str]
    explainers: list[str]
    entropy: torch.Tensor
    randomised_entropy: torch.Tensor
    scores: torch.Tensor

    def mean(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The mean over inputs (E,) of the finite scores, and how many were finite."""
        return finite_mean(self.scores)


def efficient_mprt(model: nn.Module, x: torch.Tensor, target: torch.Tensor | int | None,
                   explainers: Sequence[str] | Mapping[str, Mapping], seed: int = 0, n_bins: int = N_BINS,
                   reduction: str = "sum", same_seed: bool = False) -> EfficientScores:  # fmt: skip
    """The eMPRT of the module docstring; ``explainers`` names (or ``{name: options}``), the
    randomised weights drawn as ``randomised_models`` draws them (``seed``, ``same_seed``:
    Quantus 0.6's seed s is ours s + 1 with ``same_seed=True``)."""
    check_seed(seed)
    options, _, x, target = prepared(model, x, target, explainers, None, reduction)
    steps = list(randomised_models(model, "bottom_up", seed, same_seed))
    layers, randomised = [name for name, _ in steps], steps[-1][1]  # one copy, every layer randomised by now
    entropy, randomised_entropy = [], []
    for name, opts in options.items():
        for net, out, state in ((model, entropy, "original"), (randomised, randomised_entropy, "fully randomised")):
            maps = maps_of(net, x, target, name, opts, seed, reduction)
            out.append(discrete_entropy(maps, n_bins, f"explainer {name!r} of the {state} model"))
    entropy, randomised_entropy = torch.stack(entropy), torch.stack(randomised_entropy)
    scores = torch.where(entropy > 0, (randomised_entropy - entropy) / entropy, float("nan"))
    return EfficientScores(layers, list(options), entropy, randomised_entropy, scores)


__all__ = ["EfficientScores", "N_BINS", "discrete_entropy", "efficient_mprt"]
