"""Explanation agreement as torchmetrics ``Metric``s (functional core: ``agreement_functional``).

``PairwiseAgreement(name, k)`` accumulates, over batches of individuals, the mean
and spread of a pairwise agreement score across all model pairs and individuals
(states summed under DDP: ``evaluators.metrics.base``). Explanations with NaN or ±inf are
refused (``InputError``, by the scores' functions), and so is a mean over no defined score
(``compute``); the scores of pairs where a metric is undefined (the rank
correlation of a constant map) are counted in ``left_out``, not averaged.
"""

from __future__ import annotations

import torch

from evaluators.metrics.agreement_functional import AGREEMENTS, RANK_AGREEMENTS, angular_difference
from evaluators.metrics.base import MeanOverInputs, finite_result
from foundation.errors import InputError

AGREEMENT_METRICS = (*AGREEMENTS, "angular", *RANK_AGREEMENTS)
K_SHARE, K_MAX = 0.25, 10  # k chosen from the data: a quarter of the features, at most 10 (at least 1)


def default_k(n_features: int) -> int:
    """Top-k size of SA/SSA/CDC (and of the ground-truth agreement) for maps of ``n_features``
    features (an image's: pixels): ``min(K_MAX, max(1, round(K_SHARE · d)))``."""
    return min(K_MAX, max(1, round(K_SHARE * n_features)))


class PairwiseAgreement(MeanOverInputs):
    """Mean (and std) over model pairs and individuals of one agreement score (the
    states ``total`` and ``count`` of ``evaluators.metrics.base``, and ``total_sq``).

    Args:
        name: ``sa``, ``ssa``, ``cdc``, ``feature``, ``rank``, ``signed_rank``, ``angular``,
            ``rc`` (rank correlation) or ``pra`` (pairwise rank agreement).
        k: top-k size; for ``cdc`` None means all features (CDC@d); unused by ``angular``,
            ``rc`` and ``pra`` (over all features).
    """

    higher_is_better = None  # True for agreements, False for the angular difference

    def __init__(self, name: str = "sa", k: int | None = 5, **kwargs) -> None:
        super().__init__({"k": k}, **kwargs)
        if name not in AGREEMENT_METRICS:
            raise InputError(f"unknown agreement metric {name!r}; expected one of {list(AGREEMENT_METRICS)}")
        if name not in ("cdc", "angular", *RANK_AGREEMENTS) and k is None:
            raise InputError(f"agreement metric {name!r} needs k")
        self.name, self.k = name, k
        self.add_state("total_sq", torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")

    def scores(self, explanations: torch.Tensor) -> torch.Tensor:
        """(P, N) scores of explanations (M, N, d)."""
        if self.name == "angular":
            return angular_difference(explanations)
        if self.name in RANK_AGREEMENTS:
            return RANK_AGREEMENTS[self.name](explanations)
        return AGREEMENTS[self.name](explanations, self.k)

    def update(self, explanations: torch.Tensor) -> None:
        if explanations.dim() != 3 or explanations.shape[0] < 2:
            raise InputError(f"explanations of shape {tuple(explanations.shape)}; expected (models >= 2, N, d)")
        values = self.scores(explanations).double()
        defined = ~values.isnan()
        self.left_out += int((~defined).sum())
        values = values[defined]
        self.total += values.sum()
        self.total_sq += (values**2).sum()
        self.count += values.numel()

    def compute(self) -> dict[str, torch.Tensor]:
        finite_result(self, self.total / self.count, self.name)
        mean = self.total / self.count
        std = (self.total_sq / self.count - mean**2).clamp(min=0).sqrt()
        return {"mean": mean, "std": std}
