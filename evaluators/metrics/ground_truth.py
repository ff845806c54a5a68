"""The localisation metrics (``evaluators.metrics.localisation``) against the ground truth a
datamodule knows (``probe_truth``: ``SyntheticTableDataModule``, ``PlantedPatternDataModule``;
docs/ground_truth.md), as the reliability report's truth section and the aggregation and
optimised protocols take them: per input, on |map| (the report, whose maps are the explainers'
own) or on the map as the protocols' fidelity metrics read it (signed: larger is more
important, as insertion and deletion remove units; a z-normalised aggregate's far-negative pixel
is its least important, not, as |map| would have it, one of its most), shifted per input by its
minimum to the non-negative φ − min φ: the same order of units, and a relevance mass above the
least important unit.

A truth is ``probe_truth``'s mapping for N inputs: ``mask`` (N, H, W) or (N, d) boolean, the
planted region or the relevant features, and ``attributions`` (N, d) the true contributions
(rows only; None for images). The metrics, each modality's ``truth_metrics``
(``foundation.modality``):

* rows: ``ground_truth_agreement``, the share of the k largest |φ| among the
  k largest |t| (t the true attributions), then ``relevance_rank_accuracy`` and
  ``localisation_auc`` of |φ| against the relevant features (the protocols' k:
  ``evaluators.metrics.agreement.default_k`` of d, the report's: its option ``k``);
* images: ``relevance_rank_accuracy``, ``relevance_mass_accuracy``,
  ``pointing_game`` and ``localisation_auc`` of |φ| against the planted region.

All are higher-is-better; a map without mass (all zero) has no relevance mass accuracy (NaN,
left out of a mean over inputs).
"""

from __future__ import annotations

import torch

from evaluators.metrics.agreement import default_k
from evaluators.metrics.registry import score
from foundation.modality import Modality


def truth_scores(maps: torch.Tensor, truth: dict, metric: str, k: int) -> torch.Tensor:
    """(N,) float64 on the CPU: ``metric`` per input of |maps| (N, ...) against the inputs'
    ``truth``, k the top-k size of ``ground_truth_agreement``."""
    given = truth["attributions"] if metric == "ground_truth_agreement" else truth["mask"]
    options = {"k": k} if metric == "ground_truth_agreement" else {"abs": True}
    return score(metric, None, None, maps, truth=given.to(maps.device), **options).double().cpu()


def scores_against_truth(maps: torch.Tensor, truth: dict, modality: Modality) -> dict[str, torch.Tensor]:
    """Metric -> (N,) ``truth_scores`` of the protocols' rows, maps (N, ...) of ``modality``'s
    inputs read signed (each less its minimum, φ − min φ: non-negative, in the order of φ), for
    each of ``modality.truth_metrics``, k = ``default_k`` of the entries of one map."""
    k = default_k(maps[0].numel())
    maps = maps - maps.flatten(1).amin(1).view(-1, *[1] * (maps.dim() - 1))
    return {metric: truth_scores(maps, truth, metric, k) for metric in modality.truth_metrics}
