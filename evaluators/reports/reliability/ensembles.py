"""Agreement between average ensembles of members (Ley et al.'s "average" strategy), beside the
single members' agreement: how much ensembling lifts agreement across seeds.

With K members and ensembles of n members (``ensemble_size``; None: ``default_size(K)``), the
members are split into E = ⌊K / n⌋ disjoint sets of n drawn at random from ``seed``
(``lightning_modules.ensembles.disjoint_sets``, as the consistency protocol draws its sets). The average
ensemble of a set S (``lightning_modules.ensembles``' ``average``: the members' mean logit is
what an explainer differentiates) has, for an explainer linear in the explained function (the
explainer registry's ``linear`` trait: saliency, Input × Gradient, Integrated Gradients,
SmoothGrad with the same draws, ...), the map

    φ_S = (1/n) Σ_{m ∈ S} φ_m,

the mean of its members' maps, so the ensembles' maps come from the members' maps already
computed, with no model explained again; an explainer that is not linear (DeepLift, Guided
Backprop, ...) is left out and named. The E ensembles' maps then go through the agreement
section's SA@k, SSA@k and CDC@k (``sections.agreement``, Watson's C left out): per ensemble
the mean over the pairs it is in, and their mean with the 95 % t-interval over ensembles.

The section needs at least ``MIN_ENSEMBLES`` (3) ensembles, so that their interval exists:
K ≥ 3 n (``default_size``: n = max(2, ⌊K / 3⌋), so a population of 6 or more members has
ensembles; fewer: the section says why there are none).
"""

from __future__ import annotations

import torch

from evaluators.maps import EXPLAINERS
from lightning_modules.ensembles import disjoint_sets
from evaluators.reports.reliability.sections import agreement

MIN_ENSEMBLES = 3


def default_size(n_members: int) -> int:
    """Members per ensemble: max(2, ⌊K / 3⌋) (at least ``MIN_ENSEMBLES`` ensembles where K ≥ 6)."""
    return max(2, n_members // MIN_ENSEMBLES)


def ensemble_agreement(units: dict[str, dict], k: int, size: int | None, seed: int) -> dict:
    """The ensembles' agreement (the module docstring): the size, the sets, the explainers left
    out, and per linear explainer SA/SSA/CDC@k over ensembles; ``available`` False (with
    ``why``) where the population has fewer than ``MIN_ENSEMBLES`` · n members."""
    n_members = next(iter(units.values()))["maps"].shape[0]
    n = size or default_size(n_members)
    out = {"strategy": "average", "size": n, "k": k}
    if n_members < MIN_ENSEMBLES * n:
        return out | {"available": False, "why": f"{n_members} members: {MIN_ENSEMBLES} disjoint ensembles of {n} "
                                                 f"need {MIN_ENSEMBLES * n}"}  # fmt: skip
    linear = [name for name in units if name in EXPLAINERS.names(linear=True)]
    if not linear:
        return out | {"available": False, "why": "no explainer linear in the explained function"}
    sets = disjoint_sets(n_members, n, n_members // n, seed)
    maps = {name: {"maps": units[name]["maps"][torch.tensor(sets)].mean(1)} for name in linear}  # (E, N, ...)
    return out | {"available": True, "n_ensembles": len(sets), "sets": sets,
                  "left_out": [name for name in units if name not in linear],
                  "explainers": agreement(maps, k, False, seed)["explainers"]}  # fmt: skip
