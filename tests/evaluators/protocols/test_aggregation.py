"""``evaluate.py aggregation`` (Mahlau & Nolde's protocol) and the ``AggregationFidelity``
callback, on tiny image and tabular runs."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest
import torch

import evaluate
import train
from evaluators.aggregators.normalisations import normalise
from evaluators.aggregators.pixel_aggregators import aggregate
from evaluators.maps import explain
from foundation.modality import reduce_map
from evaluators.metrics.insertion_deletion import auc, insertion_deletion_curves
from foundation.errors import InputError
from lightning_modules.interface import default_classes
from evaluators.inputs import runs as run_inputs
from evaluators.inputs.runs import load_run
from evaluators.protocols import aggregation
from tests.support.wandb_runs import assert_logged


def small_config(tmp_path, run, **extra) -> dict:
    cfg = {
        "run": str(run), "n_inputs": 4,
        "explainers": {"saliency": {}, "gradcam": {}, "integrated_gradients": {"n_steps": 4, "baselines": "blur"}},
        "aggregators": {"mean": {}, "ucb": {}, "pi": {}}, "normalisations": ["z", "linear"],
        "sweeps": {"ucb": {"eps": [-1.0, 0.5]}}, "steps": 4, "log_to": "none", "device": "cpu",
        "output_dir": str(tmp_path / "out"), "n_grid": 2, **extra,
    }  # fmt: skip
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "agg.yaml"
    path.write_text(json.dumps(cfg))  # JSON is YAML
    return path


def report_dir(tmp_path):
    (folder,) = (tmp_path / "out").iterdir()
    return folder


def test_report_rows_files_and_scores_equal_a_direct_computation(tiny_run, tmp_path):
    summary = evaluate.main(["aggregation", "--config", str(small_config(tmp_path, tiny_run, log_to="wandb_offline"))])
    folder = report_dir(tmp_path)
    assert_logged(folder, "aggregation", tiny_run, {"aggregation/agg/ucb/insertion": summary["rows"]["agg/ucb"][
        "insertion"]["mean"]}, ["aggregation"], ["sweeps", "normalisations", "grid"])  # fmt: skip
    for name in ("aggregation.json", "aggregation.csv", "table.md", "sweeps.png", "normalisations.png", "grid.png"):
        assert (folder / name).is_file(), name
    rows = summary["rows"]
    assert list(rows) == ["base/saliency", "base/gradcam", "base/integrated_gradients", "agg/mean", "agg/ucb",
                          "agg/pi", "norm/z", "norm/linear", "sweep/ucb/eps=-1.0", "sweep/ucb/eps=0.5"]
    # agg/ucb by hand: the same inputs, maps, normalisation, aggregator and metric called directly
    model, data, _ = load_run(tiny_run)
    data.setup("test")
    x, _ = data.probe(4, "test")
    target = default_classes(model, x)
    maps = []
    for k, name in enumerate(["saliency", "gradcam"]):
        torch.manual_seed(k)
        maps.append(normalise(reduce_map(explain(model, x, name), "abs_sum"), "z"))
    torch.manual_seed(2)
    blurred = run_inputs.blurred(x)
    maps.append(normalise(reduce_map(explain(model, x, "integrated_gradients", n_steps=4, baselines=blurred),
                                     "abs_sum"), "z"))  # fmt: skip
    ucb = aggregate(torch.stack(maps), "ucb")
    fractions, curves = insertion_deletion_curves(model, x, ucb, "insertion", target=target, steps=4, seed=0)
    expected = auc(curves, fractions).double()
    assert rows["agg/ucb"]["insertion"]["mean"] == pytest.approx(expected.mean().item(), abs=1e-6)
    assert rows["agg/ucb"]["insertion"]["ci95"] == pytest.approx(
        1.959964 * expected.std().item() / math.sqrt(4), abs=1e-6)
    assert json.loads((folder / "aggregation.json").read_text())["rows"] == rows
    # an image folder knows no ground truth: no truth columns (tests/evaluators/protocols/test_aggregation_truth.py)
    assert "truth_metrics" not in summary and all(set(v) == {"insertion", "deletion"} for v in rows.values())
    assert (folder / "aggregation.csv").read_text().splitlines()[0].endswith("deletion_minus_mean_ci95")
    assert "| ucb |" in (folder / "table.md").read_text() and "0.3896 / 0.0298" in (folder / "table.md").read_text()


def test_an_interrupted_run_resumes_without_recomputing_finished_work(tiny_run, tmp_path, monkeypatch):
    config = small_config(tmp_path, tiny_run)
    score_row, calls = aggregation.score_row, []

    def interrupted(*args):
        if len(calls) == 3:
            raise KeyboardInterrupt
        calls.append(1)
        return score_row(*args)

    monkeypatch.setattr(aggregation, "score_row", interrupted)
    with pytest.raises(SystemExit):
        evaluate.main(["aggregation", "--config", str(config)])
    folder = report_dir(tmp_path)
    assert len(list((folder / "scores").iterdir())) == 3 and len(list((folder / "maps").iterdir())) == 3
    explained = []
    monkeypatch.setattr(aggregation, "score_row", lambda *a: explained.append(1) or score_row(*a))
    resumed = evaluate.main(["aggregation", "--resume", str(folder)])
    assert len(explained) == 10 - 3  # only the unfinished rows are scored again
    fresh = evaluate.main(["aggregation", "--config", str(small_config(tmp_path / "b", tiny_run))])
    assert resumed["rows"] == fresh["rows"]


SAMPLING_EXPLAINERS = {"smoothgrad": {"nt_samples": 4}, "gradient_shap": {"n_samples": 4, "baselines": "training"}}


def test_sampling_explainers_resume_and_rechunk_into_the_same_numbers(tiny_run, tmp_path, monkeypatch):
    """SmoothGrad and Expected Gradients draw from the run's seed alone: a run stopped after
    the first explainer's maps and resumed from other global generator states, and a run
    with another max_batch, give an uninterrupted run's numbers."""
    extra = {"explainers": SAMPLING_EXPLAINERS, "n_baselines": 5, "sweeps": {}, "normalisations": ["z"]}
    fresh = evaluate.main(["aggregation", "--config", str(small_config(tmp_path / "a", tiny_run, **extra))])
    calls, explain = [], aggregation.explain

    def stopped(*args, **kwargs):
        if calls:
            raise KeyboardInterrupt
        calls.append(1)
        return explain(*args, **kwargs)

    monkeypatch.setattr(aggregation, "explain", stopped)
    with pytest.raises(SystemExit):
        evaluate.main(["aggregation", "--config", str(small_config(tmp_path / "b", tiny_run, **extra))])
    folder = report_dir(tmp_path / "b")
    assert [p.name for p in (folder / "maps").iterdir()] == ["smoothgrad.pt"]
    monkeypatch.setattr(aggregation, "explain", explain)
    torch.manual_seed(123)  # other global generator states than the first run's
    np.random.seed(123)
    random.seed(123)
    resumed = evaluate.main(["aggregation", "--resume", str(folder)])
    assert resumed["rows"] == fresh["rows"]
    rechunked = evaluate.main(["aggregation", "--config", str(small_config(tmp_path / "c", tiny_run, **extra,
                                                                           max_batch=3))])  # fmt: skip
    for row, values in fresh["rows"].items():
        for mode in aggregation.MODES:
            assert rechunked["rows"][row][mode]["mean"] == pytest.approx(values[mode]["mean"], abs=1e-6), (row, mode)


def test_blank_base_maps_are_counted_in_the_json_and_named_in_the_table(tiny_run, tmp_path, monkeypatch):
    explain = aggregation.explain

    def with_blanks(model, x, name, **options):
        maps = explain(model, x, name, **options)
        if name == "gradcam":
            maps[1] = 0.0
        return maps

    monkeypatch.setattr(aggregation, "explain", with_blanks)
    summary = evaluate.main(["aggregation", "--config", str(small_config(tmp_path, tiny_run))])
    assert summary["blank_maps"] == {"saliency": {"all_zero": 0, "constant": 0},
                                     "gradcam": {"all_zero": 1, "constant": 0},
                                     "integrated_gradients": {"all_zero": 0, "constant": 0}}  # fmt: skip
    folder = report_dir(tmp_path)
    assert json.loads((folder / "aggregation.json").read_text())["blank_maps"] == summary["blank_maps"]
    assert "blank maps (of 4 per explainer): gradcam 1 all zero" in (folder / "table.md").read_text()


def test_tabular_run_aggregates_feature_maps(tmp_path):
    train.main(["--trainer.max_epochs", "1", "--output_dir", str(tmp_path / "runs"), "--run_name", "g",
                "--log_to", "none"])  # fmt: skip
    config = small_config(tmp_path, tmp_path / "runs" / "german" / "g",
                          explainers={"saliency": {}, "integrated_gradients": {"baselines": "mean"},
                                      "deepshap": {"baselines": "training"}}, n_baselines=8)  # fmt: skip
    summary = evaluate.main(["aggregation", "--config", str(config)])
    assert summary["n_inputs"] == 4 and "agg/ucb" in summary["rows"]
    assert not (report_dir(tmp_path) / "grid.png").exists()  # no image grid for tables
    for row in summary["rows"].values():
        assert 0 <= row["insertion"]["mean"] <= 1 and 0 <= row["deletion"]["mean"] <= 1


def test_bad_options_are_named(tiny_run, tmp_path):
    with pytest.raises(InputError, match="unknown normalisation.*'nope'"):
        evaluate.main(["aggregation", "--config", str(small_config(tmp_path, tiny_run, aggregators={"nope": {}}))])
    with pytest.raises(InputError, match="sweeps.ucb"):
        evaluate.main(["aggregation", "--config", str(small_config(tmp_path, tiny_run, sweeps={"ucb": [1, 2]}))])
    with pytest.raises(InputError, match="unknown explainer.*'lime'"):
        evaluate.main(["aggregation", "--config", str(small_config(tmp_path, tiny_run, explainers={"lime": {}}))])
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())  # no empty report folder


def test_summarise_gives_paired_differences_to_the_mean():
    scores = {"agg/mean": {"insertion": torch.tensor([0.5, 0.7, 0.6]), "deletion": torch.tensor([0.1, 0.2, 0.3])},
              "agg/ucb": {"insertion": torch.tensor([0.6, 0.7, 0.8]), "deletion": torch.tensor([0.1, 0.1, 0.1])}}
    rows = aggregation.summarise(scores)
    diff = torch.tensor([0.1, 0.0, 0.2], dtype=torch.float64)
    assert rows["agg/ucb"]["insertion"]["minus_mean"] == pytest.approx(0.1)
    assert rows["agg/ucb"]["insertion"]["minus_mean_ci95"] == pytest.approx(1.959964 * diff.std().item() / 3**0.5)
    assert "minus_mean" not in rows["agg/mean"]["insertion"]
