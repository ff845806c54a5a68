"""``evaluate.py optimised`` against the ground truth (docs/ground_truth.md): on a planted-pattern
run and a synthetic-table run the truth columns of each explainer and of AGG_mean equal the
localisation metrics computed by hand on the saved post-processed maps and the datamodule's
masks and true attributions, with the protocol's mean ± s.e.; a chunked run gives the same
columns; a population gives them a seed-level interval and ranking stability; a run on data
without a truth has none (tests/evaluators/protocols/test_optimised_aggregation.py)."""

from __future__ import annotations


import torch

from foundation.modality import IMAGES, ROWS
from tests.support.helpers import (
    assert_member_interval, assert_same_columns, assert_truth_columns, run_protocol_config, truth_of_inputs,
)  # fmt: skip


def run_optimised(tmp_path, run, explainers: dict, **extra) -> tuple[dict, object]:
    return run_protocol_config("optimised", tmp_path, {
        "run": str(run), "n_inputs": 4, "explainers": explainers, "m_agg": 4, "m_eval": 6, "m_sens": 3,
        "stability_samples": 3, "log_to": "none", "device": "cpu", "output_dir": str(tmp_path / "out"), **extra})


def saved_rows(folder, explainers: list[str]) -> dict[str, torch.Tensor]:
    """Each explainer's and AGG_mean's maps from the saved post-processed maps (N, k, *S)."""
    stack = torch.load(folder / "maps.pt", weights_only=True)["maps"].double()
    return {name: stack[:, i] for i, name in enumerate(explainers)} | {"agg_mean": stack.mean(1)}


def whole_and_chunked(tmp_path, run, metrics) -> tuple[dict, object]:
    """The optimised protocol on ``run``'s 4 inputs: its truth columns against the metrics by hand, and
    a run of chunks of 3 giving the same columns."""
    explainers = {"saliency": {}, "input_x_gradient": {}}
    summary, folder = run_optimised(tmp_path / "whole", run, explainers)
    assert summary["truth_metrics"] == list(metrics)
    mask, attributions = truth_of_inputs(run, 4)
    assert_truth_columns(summary, saved_rows(folder, list(explainers)), mask, attributions, metrics, "se", 1.0)
    chunked, _ = run_optimised(tmp_path / "chunked", run, explainers, chunk_size=3)
    assert_same_columns(chunked, summary, metrics, "se")
    return summary, folder


def test_planted_patterns_truth_columns_equal_the_metrics_by_hand_and_chunks_agree(planted_run, tmp_path):
    summary, folder = whole_and_chunked(tmp_path, planted_run, IMAGES.truth_metrics)
    assert set(summary["rows"]) == {"saliency", "input_x_gradient", "agg_mean", "agg_var", "agg_robust", "agg_faith",
                                    "agg_opt"}  # fmt: skip
    assert all(set(IMAGES.truth_metrics) <= set(row) for row in summary["rows"].values())
    header = (folder / "optimised_aggregation.csv").read_text().splitlines()[0].split(",")
    assert header[-8:] == [f"{m}{s}" for m in IMAGES.truth_metrics for s in ("", "_se")]
    assert "| relevance_rank_accuracy ↑ | relevance_mass_accuracy ↑ |" in (folder / "table.md").read_text()


def test_synthetic_table_truth_columns_equal_the_metrics_by_hand_and_chunks_agree(synthetic_table_run, tmp_path):
    whole_and_chunked(tmp_path, synthetic_table_run, ROWS.truth_metrics)


def test_a_population_gives_the_truth_columns_a_seed_level_interval_and_ranking_stability(synthetic_table_population,
                                                                                          tmp_path):  # fmt: skip
    summary, folder = run_optimised(tmp_path, synthetic_table_population, {"saliency": {}, "input_x_gradient": {}},
                                    n_inputs=3)  # fmt: skip
    assert summary["truth_metrics"] == list(ROWS.truth_metrics)
    for metric in ROWS.truth_metrics:
        assert_member_interval(summary, "agg_opt", metric)
        tables = {r["table"] for r in summary["robustness"] if r["metric"] == metric}
        assert tables == {"explainers", "aggregators", "all"}
    assert "| ground_truth_agreement ↑ |" in (folder / "table.md").read_text()
