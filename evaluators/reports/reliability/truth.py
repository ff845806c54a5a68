"""The report's ground-truth section, where the data know what decides the label (a datamodule
with ``probe_truth``: ``SyntheticTableDataModule``, ``PlantedPatternDataModule``;
docs/ground_truth.md).

Per candidate (explainer or aggregate) and localisation metric (``evaluators.metrics.localisation``,
on |map|): each member's mean score over the inputs, their seed-level mean ± 95 % t-interval
(``seed_robustness.member_interval``) and the stability of the members' rankings of the
candidates (``ranking_stability``). Then the question the truth answers about the truth-free
scores: does the faithfulness section's primary metric rank the candidates as the truth does?
Kendall's τ_b between the candidates' seed-level means under the truth's first metric and under
the faithfulness metric (both oriented so that larger is better), and whether the two name the
same best candidate.

Metrics: the modality's ``truth_metrics`` (``evaluators.metrics.ground_truth``; rows:
``ground_truth_agreement`` with the report's k, ``relevance_rank_accuracy``, ``localisation_auc``;
images: ``relevance_rank_accuracy``, ``relevance_mass_accuracy``, ``pointing_game``,
``localisation_auc``), as the aggregation and optimised protocols take them.
"""

from __future__ import annotations

import torch
from scipy.stats import kendalltau

from evaluators.metrics.ground_truth import truth_scores
from evaluators.metrics.registry import METRICS
from evaluators.metrics.seed_robustness import member_interval, ranking_stability
from foundation.modality import Modality


def member_scores(maps: torch.Tensor, truth: dict, metric: str, k: int) -> torch.Tensor:
    """(M,) float64: each member's mean over inputs of ``metric`` for maps (M, N, ...)."""
    return torch.stack([truth_scores(member, truth, metric, k).nanmean() for member in maps])


def truth_section(candidates: dict[str, dict], truth: dict | None, modality: Modality, k: int,
                  faithfulness: dict) -> dict:  # fmt: skip
    """The section of the module docstring for maps of ``modality``'s inputs; ``{"available":
    False}`` without a truth."""
    if truth is None:
        return {"available": False, "why": "the data know no ground truth (docs/ground_truth.md)"}
    metrics = modality.truth_metrics
    names = list(candidates)
    by_metric = {}
    for metric in metrics:
        scores = torch.stack([member_scores(candidates[n]["maps"], truth, metric, k) for n in names], 1)  # (M, C)
        entry = {"candidates": {n: member_interval(scores[:, c], f"{n}: {metric}") for c, n in enumerate(names)}}
        if len(names) > 1:
            stability = ranking_stability(scores, True, f"metric {metric}")
            entry["ranking"] = {key: value for key, value in stability.items() if key != "best"}
        by_metric[metric] = entry
    primary, faithful = metrics[0], faithfulness["primary"]
    truth_means = [by_metric[primary]["candidates"][n]["mean"] for n in names]
    sign = 1.0 if METRICS[faithful].higher_is_better else -1.0
    free_means = [sign * faithfulness["by_metric"][faithful]["explainers"][n]["mean"] for n in names]
    tau = kendalltau(truth_means, free_means).statistic if len(names) > 1 else float("nan")
    best_truth, best_free = (names[int(torch.tensor(means).argmax())] for means in (truth_means, free_means))
    return {"available": True, "metrics": list(metrics), "primary": primary, "k": k, "by_metric": by_metric,
            "against_faithfulness": {"metric": faithful, "kendall_tau": float(tau), "best_by_truth": best_truth,
                                     "best_by_faithfulness": best_free, "same_best": best_truth == best_free}}
