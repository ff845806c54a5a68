"""``evaluate.py optimised`` against the ground truth (docs/ground_truth.md): on a planted-pattern
run and a synthetic-table run the truth columns of each explainer and of AGG_mean equal the
localisation metrics computed by hand on the saved post-processed maps and the datamodule's
masks and true attributions, with the protocol's mean ± s.e.; a chunked run gives the same
columns; a population gives them a seed-level interval and ranking stability; a run on data
without a truth has none (tests/evaluators/protocols/test_optimised_aggregation.py)."""

from __future__ import annotations

import json
import math

import pytest
import torch

import evaluate
from evaluators.metrics.ground_truth import IMAGE_METRICS, ROW_METRICS
from tests.support.helpers import assert_same_columns, assert_truth_columns, truth_of_inputs


def run_optimised(tmp_path, run, explainers: dict, **extra) -> tuple[dict, object]:
    cfg = {"run": str(run), "n_inputs": 4, "explainers": explainers, "m_agg": 4, "m_eval": 6, "m_sens": 3,
           "stability_samples": 3, "log_to": "none", "device": "cpu", "output_dir": str(tmp_path / "out"), **extra}
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "opt.yaml").write_text(json.dumps(cfg))
    summary = evaluate.main(["optimised", "--config", str(tmp_path / "opt.yaml")])
    (folder,) = (tmp_path / "out").iterdir()
    return summary, folder


def saved_rows(folder, explainers: list[str]) -> dict[str, torch.Tensor]:
    """Each explainer's and AGG_mean's maps from the saved post-processed maps (N, k, *S)."""
    stack = torch.load(folder / "maps.pt", weights_only=True)["maps"].double()
    return {name: stack[:, i] for i, name in enumerate(explainers)} | {"agg_mean": stack.mean(1)}


def test_planted_patterns_truth_columns_equal_the_metrics_by_hand_and_chunks_agree(planted_run, tmp_path):
    explainers = {"saliency": {}, "input_x_gradient": {}}
    summary, folder = run_optimised(tmp_path / "whole", planted_run, explainers)
    assert summary["truth_metrics"] == list(IMAGE_METRICS)
    mask, _ = truth_of_inputs(planted_run, 4)
    assert_truth_columns(summary, saved_rows(folder, list(explainers)), mask, None, IMAGE_METRICS, "se", 1.0)
    assert set(summary["rows"]) == {*explainers, "agg_mean", "agg_var", "agg_robust", "agg_faith", "agg_opt"}
    assert all(set(IMAGE_METRICS) <= set(row) for row in summary["rows"].values())
    header = (folder / "optimised_aggregation.csv").read_text().splitlines()[0].split(",")
    assert header[-8:] == [f"{m}{s}" for m in IMAGE_METRICS for s in ("", "_se")]
    assert "| relevance_rank_accuracy ↑ | relevance_mass_accuracy ↑ |" in (folder / "table.md").read_text()
    chunked, _ = run_optimised(tmp_path / "chunked", planted_run, explainers, chunk_size=3)
    assert_same_columns(chunked, summary, IMAGE_METRICS, "se")


def test_synthetic_table_truth_columns_equal_the_metrics_by_hand_and_chunks_agree(synthetic_table_run, tmp_path):
    explainers = {"saliency": {}, "input_x_gradient": {}}
    summary, folder = run_optimised(tmp_path / "whole", synthetic_table_run, explainers)
    assert summary["truth_metrics"] == list(ROW_METRICS)
    mask, attributions = truth_of_inputs(synthetic_table_run, 4)
    assert_truth_columns(summary, saved_rows(folder, list(explainers)), mask, attributions, ROW_METRICS, "se", 1.0)
    chunked, _ = run_optimised(tmp_path / "chunked", synthetic_table_run, explainers, chunk_size=3)
    assert_same_columns(chunked, summary, ROW_METRICS, "se")


def test_a_population_gives_the_truth_columns_a_seed_level_interval_and_ranking_stability(synthetic_table_population,
                                                                                          tmp_path):  # fmt: skip
    summary, folder = run_optimised(tmp_path, synthetic_table_population, {"saliency": {}, "input_x_gradient": {}},
                                    n_inputs=3)  # fmt: skip
    names, member_rows = summary["members"], summary["member_rows"]
    assert summary["truth_metrics"] == list(ROW_METRICS)
    for metric in ROW_METRICS:
        v = torch.tensor([member_rows[n]["agg_opt"][metric]["mean"] for n in names], dtype=torch.float64)
        got = summary["rows"]["agg_opt"][metric]
        assert got["mean"] == pytest.approx(v.mean().item(), abs=1e-12)
        assert got["ci95"] == pytest.approx(4.302652729749464 * v.std().item() / math.sqrt(3), abs=1e-12)  # t(2)
        tables = {r["table"] for r in summary["robustness"] if r["metric"] == metric}
        assert tables == {"explainers", "aggregators", "all"}
    assert "| ground_truth_agreement ↑ |" in (folder / "table.md").read_text()
