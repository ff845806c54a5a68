"""``evaluate.py optimised`` (Decker et al.'s evaluation) on a tiny image run: every number
equals the public functions called directly."""

from __future__ import annotations

import dataclasses
import json
import os
import random

import numpy as np
import pytest
import torch
import yaml

import evaluate
from evaluators.aggregators.optimised_aggregators import combine, explainer_maps, optimised_aggregation
from lightning_modules.interface import default_classes
from evaluators.protocols import optimised_aggregation as protocol
from evaluators.inputs.runs import load_run
from evaluators.metrics.faithfulness_correlation import faithfulness_correlation
from evaluators.metrics.infidelity import infidelity, subset_perturbations
from evaluators.metrics.relative_stability import relative_stability
from evaluators.metrics.road import road_curves
from evaluators.metrics.sensitivity import sensitivities
from tests.support.wandb_runs import assert_logged

EXPLAINERS = {"saliency": {}, "integrated_gradients": {"n_steps": 4}, "input_x_gradient": {}}
STABILITY = {"stability_samples": 4, "stability_radius": 0.2, "stability_layer": "net.fc"}
CACHES = ("maps.pt", "weights.pt", "scores.pt", "road.pt", "stability.pt")


def config(tmp_path, run, **extra) -> str:
    cfg = {"run": str(run), "n_inputs": 3, "explainers": EXPLAINERS, "m_agg": 4, "m_eval": 6, "m_sens": 3,
           "log_to": "none", "device": "cpu", "output_dir": str(tmp_path / "out"), **STABILITY, **extra}  # fmt: skip
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "optimised.yaml"
    path.write_text(json.dumps(cfg))
    return str(path)


def test_rows_equal_the_aggregators_and_metrics_called_directly(tiny_run, tmp_path):
    summary = evaluate.main(["optimised", "--config", config(tmp_path, tiny_run, log_to="wandb_offline")])
    (folder,) = (tmp_path / "out").iterdir()
    assert_logged(folder, "optimised_aggregation", tiny_run, {"optimised_aggregation/saliency/infidelity": summary[
        "rows"]["saliency"]["infidelity"]["mean"]}, ["optimised_aggregation"], ["weights"])  # fmt: skip
    for name in ("optimised_aggregation.json", "optimised_aggregation.csv", "table.md", "weights.png", *CACHES):
        assert (folder / name).is_file(), name
    assert list(summary["rows"]) == [*EXPLAINERS, "agg_mean", "agg_var", "agg_robust", "agg_faith", "agg_opt"]
    model, data, _ = load_run(tiny_run)
    data.setup("test")
    x, _ = data.probe(3, "test")
    target = default_classes(model, x)
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
    table = (folder / "table.md").read_text()
    assert summary["dataset"] == "tiny" and "| agg_faith |" in table and "paper" not in table  # not CIFAR-10
    assert summary["blank_maps"] == {name: {"all_zero": 0, "constant": 0} for name in EXPLAINERS}
    cifar = protocol.markdown_table({**summary, "dataset": "cifar10-jpeg"})
    assert "| INFD ↓ | paper, CIFAR-10 | FCOR ↑ | paper, CIFAR-10 |" in cifar and "3.342" in cifar
    assert "| INFD ↓ | FCOR ↑ | SENS_AVG ↓ |" in table
    _, morf = road_curves(model, x, maps, "morf", target=target, difference=True)
    assert row["road_morf"]["mean"] == pytest.approx(morf.double().mean().item(), rel=1e-6, abs=1e-9)
    fcor = faithfulness_correlation(maps, samples).double()
    assert row["fcor"]["mean"] == pytest.approx(fcor[~fcor.isnan()].mean().item(), rel=1e-6)
    # Decker's Theorem 4.2 on the fitting samples does not bind fresh samples; the report says which row is best
    assert set(summary["findings"]["best"]) == {"infidelity", "fcor", "sens_avg", "sens_max", "road_morf", "road_lerf",
                                                "ris", "rrs", "ros"}  # fmt: skip
    header = (folder / "optimised_aggregation.csv").read_text().splitlines()[0].split(",")
    assert header[-6:] == ["ris", "ris_se", "rrs", "rrs_se", "ros", "ros_se"]
    assert "truth_metrics" not in summary  # an image folder knows no ground truth (test_optimised_truth.py)
    assert "| RIS ↓ | RRS ↓ | ROS ↓ |" in (folder / "table.md").read_text()
    check_stability_columns(summary, model, x, target)


def test_blank_maps_are_counted_in_the_json_and_named_under_the_table(tiny_run, tmp_path, monkeypatch):
    from evaluators.aggregators import optimised_aggregators

    explain = optimised_aggregators.explain

    def with_blanks(model, x, name, **options):
        maps = explain(model, x, name, **options)
        if name == "saliency" and len(x) == 3:  # the inputs' own maps, not their noisy copies
            maps[0] = 0.0
        return maps

    monkeypatch.setattr(optimised_aggregators, "explain", with_blanks)
    summary = evaluate.main(["optimised", "--config", config(tmp_path, tiny_run)])
    assert summary["blank_maps"]["saliency"] == {"all_zero": 1, "constant": 0}
    assert summary["blank_maps"]["input_x_gradient"] == {"all_zero": 0, "constant": 0}
    (folder,) = (tmp_path / "out").iterdir()
    assert "blank maps (of 3 per explainer): saliency 1 all zero" in (folder / "table.md").read_text()
    saved = json.loads((folder / "optimised_aggregation.json").read_text())
    assert saved["blank_maps"] == summary["blank_maps"]


def stability_options() -> dict:
    return {"n_samples": STABILITY["stability_samples"], "radius": STABILITY["stability_radius"],
            "layer": STABILITY["stability_layer"], "change": "norm"}  # fmt: skip


def check_stability_columns(summary, model, x, target):
    """RIS, RRS, ROS of an explainer's row and of an optimised aggregator's row (its weights
    fitted at x, applied to the explainers' maps at each noisy copy) are the metric's own
    values on the same maps, its noise drawn by itself for all inputs in one call."""
    stack = explainer_maps(model, x, target, EXPLAINERS)
    weights = torch.tensor(summary["weights"]["agg_robust"], dtype=torch.float64)
    n = STABILITY["stability_samples"]
    rows = {
        "saliency": (stack[:, 0], lambda v, t: explainer_maps(model, v, t, {"saliency": {}})[:, 0]),
        "agg_robust": (combine(stack, weights),
                       lambda v, t: combine(explainer_maps(model, v, t, EXPLAINERS), weights.repeat_interleave(n, 0))),
    }  # fmt: skip
    for row, (maps, explain_fn) in rows.items():
        expected = relative_stability(model, x, maps, explain_fn, target, **stability_options())
        assert (expected["kept"] > 0).all()
        for name in ("ris", "rrs", "ros"):
            values = expected[name].double()
            assert summary["rows"][row][name]["mean"] == pytest.approx(values.mean().item(), rel=1e-6), (row, name)
            assert summary["rows"][row][name]["se"] == pytest.approx(values.std().item() / 3**0.5, rel=1e-5)
    assert summary["rows"]["agg_robust"]["ris"]["mean"] != summary["rows"]["saliency"]["ris"]["mean"]


def test_resume_of_a_report_without_stability_adds_only_those_columns(tiny_run, tmp_path, monkeypatch):
    """A finished report of before the stability columns (its caches without stability.pt,
    its config.yaml without stability_layer and stability_change) resumes into the same
    numbers plus RIS, RRS, ROS, with no weight, infidelity, sensitivity or ROAD computed
    again and its caches untouched."""
    first = evaluate.main(["optimised", "--config", config(tmp_path, tiny_run)])
    (folder,) = (tmp_path / "out").iterdir()
    old = tmp_path / "old"
    old.mkdir()
    cfg = yaml.safe_load((folder / "config.yaml").read_text())
    for key in ("stability_layer", "stability_change"):  # an old folder has none; samples and radius keep it short
        del cfg[key]
    (old / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    for name in CACHES[:-1]:
        (old / name).write_bytes((folder / name).read_bytes())
        os.utime(old / name, (0, 0))

    def recomputed(*args, **kwargs):
        raise AssertionError("a cached column group was computed again")

    for name in ("subset_perturbations", "fit_weights", "map_distances"):
        monkeypatch.setattr(protocol, name, recomputed)
    monkeypatch.setattr(protocol.METRICS, "_entries", dict(protocol.METRICS._entries))  # restored after the test
    for name in ("road_morf", "road_lerf"):  # the protocol reads ROAD from the metric registry
        entry = protocol.METRICS[name]
        protocol.METRICS._entries[name] = dataclasses.replace(entry, extra={**entry.extra, "function": recomputed})
    resumed = evaluate.main(["optimised", "--resume", str(old)])
    assert all((old / name).stat().st_mtime == 0 for name in CACHES[:-1])
    assert (old / "stability.pt").is_file()
    for row, values in first["rows"].items():
        for metric in ("infidelity", "fcor", "sens_avg", "sens_max", "road_morf", "road_lerf"):
            assert resumed["rows"][row][metric] == values[metric], (row, metric)
    # the resumed folder's layer is the default (the logits), so RRS differs from the first run's net.fc
    for name in ("ris", "ros"):
        assert resumed["rows"]["agg_opt"][name]["mean"] == pytest.approx(first["rows"]["agg_opt"][name]["mean"])
    assert resumed["config"]["stability_layer"] is None


def test_sampling_explainers_resume_and_rechunk_into_the_same_numbers(tiny_run, tmp_path, monkeypatch):
    """SmoothGrad and Expected Gradients draw from the run's seed and each row's index: a run
    stopped after its maps and resumed from other global generator states, and a run with
    another max_batch, give an uninterrupted run's weights and scores."""
    explainers = {"saliency": {}, "smoothgrad": {"nt_samples": 3},
                  "gradient_shap": {"n_samples": 3, "baselines": "training"}}  # fmt: skip
    fresh = evaluate.main(["optimised", "--config", config(tmp_path / "a", tiny_run, explainers=explainers)])
    fit_weights = protocol.fit_weights

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(protocol, "fit_weights", stopped)
    with pytest.raises(SystemExit):
        evaluate.main(["optimised", "--config", config(tmp_path / "b", tiny_run, explainers=explainers)])
    (folder,) = (tmp_path / "b" / "out").iterdir()
    assert (folder / "maps.pt").is_file() and not (folder / "weights.pt").exists()
    monkeypatch.setattr(protocol, "fit_weights", fit_weights)
    torch.manual_seed(123)  # other global generator states than the first run's
    np.random.seed(123)
    random.seed(123)
    resumed = evaluate.main(["optimised", "--resume", str(folder)])
    assert resumed["rows"] == fresh["rows"] and resumed["weights"] == fresh["weights"]
    rechunked = evaluate.main(["optimised", "--config", config(tmp_path / "c", tiny_run, explainers=explainers,
                                                               max_batch=2)])  # fmt: skip
    for row, values in fresh["rows"].items():
        for metric, value in values.items():
            assert rechunked["rows"][row][metric]["mean"] == pytest.approx(value["mean"], rel=1e-4, abs=1e-5), (
                row, metric)


def test_absolute_false_keeps_the_signs_in_weights_and_scores(tiny_run, tmp_path):
    summary = evaluate.main(["optimised", "--config", config(tmp_path, tiny_run, absolute=False)])
    model, data, _ = load_run(tiny_run)
    data.setup("test")
    x, _ = data.probe(3, "test")
    target = default_classes(model, x)
    for method in ("agg_robust", "agg_faith"):
        _, signed = optimised_aggregation(model, x, method, EXPLAINERS, n_samples=4, absolute=False)
        _, unsigned = optimised_aggregation(model, x, method, EXPLAINERS, n_samples=4)
        torch.testing.assert_close(torch.tensor(summary["weights"][method], dtype=torch.float64), signed.cpu(),
                                   rtol=1e-6, atol=1e-8)  # fmt: skip
        assert not torch.allclose(signed, unsigned, atol=1e-3), method
    maps = explainer_maps(model, x, target, {"saliency": {}}, absolute=False)[:, 0]
    fcor = faithfulness_correlation(maps, subset_perturbations(model, x, target, n_samples=6)).double()
    assert summary["rows"]["saliency"]["fcor"]["mean"] == pytest.approx(fcor[~fcor.isnan()].mean().item(), rel=1e-6)


def test_map_metrics_add_the_maps_sparseness_and_complexity_columns(tiny_run, tmp_path):
    from evaluators.metrics.complexity import complexity, sparseness

    options = {"aggregators": ["agg_mean"], "map_metrics": ["sparseness", "complexity"]}
    summary = evaluate.main(["optimised", "--config", config(tmp_path, tiny_run, **options)])
    model, data, _ = load_run(tiny_run)
    data.setup("test")
    x, _ = data.probe(3, "test")
    stack = explainer_maps(model, x, default_classes(model, x), EXPLAINERS)
    rows = {"saliency": stack[:, 0], "agg_mean": stack.mean(1)}
    for row, maps in rows.items():
        for name, function in (("sparseness", sparseness), ("complexity", complexity)):
            assert summary["rows"][row][name]["mean"] == pytest.approx(function(maps).mean().item(), rel=1e-5)
    (folder,) = (tmp_path / "out").iterdir()
    assert "| RIS ↓ | RRS ↓ | ROS ↓ | sparseness ↑ | complexity ↓ |" in (folder / "table.md").read_text()
    assert (folder / "optimised_aggregation.csv").read_text().startswith("row,infidelity,infidelity_se,")
    assert "complexity_se" in (folder / "optimised_aggregation.csv").read_text().splitlines()[0]
    with pytest.raises(evaluate.InputError, match=r"option map_metrics: unknown metric\(s\) \['fcor'\]"):
        evaluate.main(["optimised", "--config", config(tmp_path, tiny_run, map_metrics=["fcor"])])
