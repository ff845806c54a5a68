"""``evaluate.py aggregation`` against the ground truth (docs/ground_truth.md): on a planted-pattern
run and a synthetic-table run every row's truth columns equal the localisation metrics computed
by hand on the saved base maps (normalised and aggregated as the rows are) and the datamodule's
masks and true attributions; a chunked run gives the same columns; a population gives them a
seed-level interval and ranking stability; a run on data without a truth has none."""

from __future__ import annotations

import json

import torch

from evaluators.aggregators.normalisations import normalise
from foundation.modality import IMAGES, ROWS
from tests.support.helpers import (
    assert_member_interval, assert_same_columns, assert_truth_columns, run_protocol_config, truth_of_inputs,
)  # fmt: skip

Z95 = 1.959964


def run_aggregation(tmp_path, run, explainers: dict, **extra) -> tuple[dict, object]:
    return run_protocol_config("aggregation", tmp_path, {
        "run": str(run), "n_inputs": 4, "explainers": explainers, "aggregators": {"mean": {}, "ucb": {}},
        "normalisations": ["z"], "sweeps": {}, "steps": 4, "log_to": "none", "device": "cpu", "n_grid": 2,
        "output_dir": str(tmp_path / "out"), **extra})


def rows_by_hand(folder, explainers: list[str]) -> dict[str, torch.Tensor]:
    """base/<name> (each saved base map z-normalised) and agg/mean (their mean) by hand."""
    z = {}
    for name in explainers:
        m = torch.load(folder / "maps" / f"{name}.pt", weights_only=True)["maps"].double()
        flat = m.flatten(1)
        sigma = flat.std(1, correction=0, keepdim=True)  # Mahlau & Nolde's eq. 2; a constant map: zeros
        z[f"base/{name}"] = torch.where(sigma > 0, (flat - flat.mean(1, keepdim=True)) / sigma, 0.0).view_as(m)
    return {**z, "agg/mean": torch.stack(list(z.values())).mean(0)}


def test_planted_patterns_truth_columns_equal_the_metrics_by_hand_and_chunks_agree(planted_run, tmp_path):
    explainers = {"saliency": {}, "gradcam": {}}
    summary, folder = run_aggregation(tmp_path / "whole", planted_run, explainers)
    assert summary["truth_metrics"] == list(IMAGES.truth_metrics)
    mask, _ = truth_of_inputs(planted_run, 4)
    rows = rows_by_hand(folder, list(explainers))
    torch.testing.assert_close(rows["base/saliency"].float(), normalise(torch.load(
        folder / "maps" / "saliency.pt", weights_only=True)["maps"], "z"), rtol=1e-5, atol=1e-5)  # fmt: skip
    assert_truth_columns(summary, rows, mask, None, IMAGES.truth_metrics, "ci95", Z95)
    header = (folder / "aggregation.csv").read_text().splitlines()[0].split(",")
    assert header[-8:] == [f"{m}{s}" for m in IMAGES.truth_metrics for s in ("", "_ci95")]
    table = (folder / "table.md").read_text()
    assert "| pointing_game ↑ | localisation_auc ↑ |" in table
    assert json.loads((folder / "aggregation.json").read_text())["truth_metrics"] == list(IMAGES.truth_metrics)
    chunked, _ = run_aggregation(tmp_path / "chunked", planted_run, explainers, chunk_size=3)
    assert_same_columns(chunked, summary, IMAGES.truth_metrics, "ci95")


def test_synthetic_table_truth_columns_equal_the_metrics_by_hand(synthetic_table_run, tmp_path):
    explainers = {"saliency": {}, "input_x_gradient": {}}
    summary, folder = run_aggregation(tmp_path, synthetic_table_run, explainers)
    assert summary["truth_metrics"] == list(ROWS.truth_metrics)
    mask, attributions = truth_of_inputs(synthetic_table_run, 4)
    assert_truth_columns(summary, rows_by_hand(folder, list(explainers)), mask, attributions, ROWS.truth_metrics,
                         "ci95", Z95)  # fmt: skip


def test_a_population_gives_the_truth_columns_a_seed_level_interval_and_ranking_stability(synthetic_table_population,
                                                                                          tmp_path):  # fmt: skip
    summary, folder = run_aggregation(tmp_path, synthetic_table_population, {"saliency": {}, "input_x_gradient": {}})
    assert summary["truth_metrics"] == list(ROWS.truth_metrics)
    for metric in ROWS.truth_metrics:
        assert_member_interval(summary, "agg/mean", metric)
        assert {r["table"] for r in summary["robustness"] if r["metric"] == metric} == {"explainers", "aggregators"}
    assert "localisation_auc ↑" in (folder / "table.md").read_text()
    assert "ground_truth_agreement_ci95_members" in (folder / "seed_table.csv").read_text()
