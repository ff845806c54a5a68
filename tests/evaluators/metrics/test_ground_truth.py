"""The localisation metrics against a ground truth as the report and the protocols take them
(``evaluators.metrics.ground_truth``): per input on |map| (the report) or on the signed map less its
minimum (the protocols), equal to a loop over inputs by hand (the ROC AUC by scikit-learn), k of
the ground-truth agreement chosen from the maps' size."""

from __future__ import annotations

import pytest
import torch

from evaluators.metrics.ground_truth import scores_against_truth, truth_scores
from evaluators.metrics.registry import METRICS
from foundation.modality import IMAGES, ROWS
from tests.support.helpers import truth_by_hand

IMAGE_METRICS = ("relevance_rank_accuracy", "relevance_mass_accuracy", "pointing_game", "localisation_auc")
ROW_METRICS = ("ground_truth_agreement", "relevance_rank_accuracy", "localisation_auc")  # the primary first


def test_image_maps_against_a_planted_region_equal_a_loop_by_hand():
    g = torch.Generator().manual_seed(0)
    maps = torch.randn(5, 6, 6, generator=g)  # signed, as a z-normalised aggregate
    mask = torch.zeros(5, 6, 6, dtype=torch.bool)
    for i in range(5):
        mask[i, i:i + 2, 1:4] = True
    maps[0, 0, 1] = 9.0  # input 0's largest value inside its region: a pointing-game hit
    maps[1, 1, 1] = -9.0  # input 1's least important pixel, inside its region: |map| would point at it
    truth = {"mask": mask, "attributions": None}
    got = scores_against_truth(maps, truth, IMAGES)
    assert tuple(got) == IMAGE_METRICS
    expected = truth_by_hand(maps, mask, signed=True)
    for metric in IMAGE_METRICS:
        assert got[metric].dtype == torch.float64 and got[metric].shape == (5,)
        torch.testing.assert_close(got[metric], torch.tensor(expected[metric], dtype=torch.float64),
                                   rtol=1e-6, atol=1e-6)  # fmt: skip
    assert got["pointing_game"][0] == 1.0 and got["pointing_game"][1] == 0.0
    on_abs = {metric: truth_scores(maps, truth, metric, 3) for metric in IMAGE_METRICS}  # the report's reading
    for metric, values in truth_by_hand(maps, mask).items():
        if metric in IMAGE_METRICS:
            torch.testing.assert_close(on_abs[metric], torch.tensor(values, dtype=torch.float64), rtol=1e-6, atol=1e-6)
    assert on_abs["pointing_game"][1] == 1.0


def test_row_maps_against_true_attributions_take_k_from_the_number_of_features():
    g = torch.Generator().manual_seed(1)
    maps = torch.randn(6, 12, generator=g, dtype=torch.float64)
    attributions = torch.randn(6, 12, generator=g, dtype=torch.float64)
    mask = torch.zeros(6, 12, dtype=torch.bool)
    mask[:, :5] = True
    truth = {"mask": mask, "attributions": attributions}
    got = scores_against_truth(maps, truth, ROWS)
    assert tuple(got) == ROW_METRICS
    expected = truth_by_hand(maps, mask, attributions, k=3, signed=True)  # default_k(12) = round(0.25 · 12) = 3
    for metric in ROW_METRICS:
        torch.testing.assert_close(got[metric], torch.tensor(expected[metric], dtype=torch.float64))
    on_abs = truth_by_hand(maps, mask, attributions, k=3)
    by_k = [truth_scores(maps, truth, "ground_truth_agreement", k).mean().item() for k in (1, 3, 12)]
    assert by_k[2] == 1.0 and by_k[1] == pytest.approx(sum(on_abs["ground_truth_agreement"]) / 6)


def test_each_modalitys_truth_metrics_are_registered_metrics_of_a_truth_that_take_its_maps():
    assert ROWS.truth_metrics[0] == "ground_truth_agreement"  # the primary: the true attributions' top k
    for modality in (ROWS, IMAGES):
        assert modality.truth_metrics, modality.name
        for name in modality.truth_metrics:
            entry = METRICS[name]
            assert "truth" in entry.needs and entry.higher_is_better and entry.applies_to(modality.name), name
