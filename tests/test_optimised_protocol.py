"""``evaluate.py optimised`` (Decker et al.'s evaluation) on a tiny image run: every number
equals the public functions called directly."""

from __future__ import annotations

import json

import pytest
import torch

import evaluate
from evaluators.maps.image_explainers import predicted_class
from evaluators.maps.optimised_aggregators import explainer_maps, optimised_aggregation
from evaluators.metrics.faithfulness_correlation import faithfulness_correlation
from evaluators.metrics.infidelity import infidelity, subset_perturbations
from evaluators.metrics.road import road_curves
from evaluators.metrics.sensitivity import sensitivities
from evaluators.run_inputs import load_run, spread_images

EXPLAINERS = {"saliency": {}, "integrated_gradients": {"n_steps": 4}, "input_x_gradient": {}}


def config(tmp_path, run) -> str:
    cfg = {"run": str(run), "n_inputs": 3, "explainers": EXPLAINERS, "m_agg": 4, "m_eval": 6, "m_sens": 3,
           "log_to": "none", "device": "cpu", "output_dir": str(tmp_path / "out")}  # fmt: skip
    path = tmp_path / "optimised.yaml"
    path.write_text(json.dumps(cfg))
    return str(path)


def test_rows_equal_the_aggregators_and_metrics_called_directly(tiny_run, tmp_path):
    summary = evaluate.main(["optimised", "--config", config(tmp_path, tiny_run)])
    (folder,) = (tmp_path / "out").iterdir()
    for name in ("optimised_aggregation.json", "optimised_aggregation.csv", "table.md", "weights.png",
                 "maps.pt", "weights.pt", "scores.pt", "road.pt"):  # fmt: skip
        assert (folder / name).is_file(), name
    assert list(summary["rows"]) == [*EXPLAINERS, "agg_mean", "agg_var", "agg_robust", "agg_faith", "agg_opt"]
    model, data, _ = load_run(tiny_run)
    data.setup("test")
    x, _ = spread_images(data, 3, "test")
    target = predicted_class(model, x)
    for method in ("agg_robust", "agg_faith", "agg_opt"):
        _, weights = optimised_aggregation(model, x, method, EXPLAINERS, n_samples=4)
        torch.testing.assert_close(torch.tensor(summary["weights"][method], dtype=torch.float64), weights.cpu(),
                                   rtol=1e-6, atol=1e-8)  # fmt: skip
    maps = explainer_maps(model, x, target, {"saliency": {}})[:, 0]
    samples = subset_perturbations(model, x, target, n_samples=6)
    expected = infidelity(maps, samples).double()
    row = summary["rows"]["saliency"]
    assert row["infidelity"]["mean"] == pytest.approx(expected.mean().item(), rel=1e-6)
    assert row["infidelity"]["se"] == pytest.approx(expected.std().item() / 3**0.5, rel=1e-6)
    distances = sensitivities(lambda rows, t: explainer_maps(model, rows, t, {"saliency": {}})[:, 0], x, maps, target,
                              n_samples=3).double()  # fmt: skip
    assert row["sens_avg"]["mean"] == pytest.approx(distances.mean(1).mean().item(), rel=1e-6)
    assert row["sens_max"]["mean"] == pytest.approx(distances.amax(1).mean().item(), rel=1e-6)
    assert "| agg_faith |" in (folder / "table.md").read_text() and "3.342" in (folder / "table.md").read_text()
    _, morf = road_curves(model, x, maps, "morf", target=target, difference=True)
    assert row["road_morf"]["mean"] == pytest.approx(morf.double().mean().item(), rel=1e-6, abs=1e-9)
    fcor = faithfulness_correlation(maps, samples).double()
    assert row["fcor"]["mean"] == pytest.approx(fcor[~fcor.isnan()].mean().item(), rel=1e-6)
    # Decker's Theorem 4.2 on the fitting samples does not bind fresh samples; the report says which row is best
    assert set(summary["findings"]["best"]) == {"infidelity", "fcor", "sens_avg", "sens_max", "road_morf", "road_lerf"}
