"""AggregationFidelity (callbacks/aggregation_fidelity.py): the insertion and deletion AUCs, and the
other fidelity scores, of base and aggregated maps on its probe, logged each epoch and equal to the
metrics called directly."""

from __future__ import annotations

import pytest
import pytorch_lightning as pl

from callbacks import AggregationFidelity
from datamodules import FinancialDataModule
from evaluators.maps import explain
from tests.support.helpers import fashion_mnist_or_skip


def test_aggregation_fidelity_logs_each_epoch_and_its_final_scores_equal_the_metrics(tmp_path):
    from evaluators.maps import explain
    from foundation.modality import reduce_map
    from evaluators.aggregators.pixel_aggregators import aggregate_all
    from evaluators.metrics.insertion_deletion import DeletionAUC, InsertionAUC
    from lightning_modules import ImageClassifier

    data = fashion_mnist_or_skip()
    model = ImageClassifier(arch="small_cnn", num_classes=10, in_channels=1, optimizer="adamw", lr=3e-3, seed=0)
    callback = AggregationFidelity(explainers={"saliency": {}, "gradcam": {}}, n_probe=6, steps=8)
    trainer = pl.Trainer(max_epochs=2, limit_train_batches=3, limit_val_batches=0, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path,
                         logger=pl.loggers.CSVLogger(tmp_path), callbacks=[callback])  # fmt: skip
    trainer.fit(model, datamodule=data)
    assert [(h["epoch"], h["when"]) for h in callback.history] == [(0, "epoch_end"), (1, "epoch_end"),
                                                                   (2, "train_end")]  # fmt: skip
    assert len(list(tmp_path.glob("lightning_logs/version_0/aggregation/*.png"))) == 3
    logged = (tmp_path / "lightning_logs" / "version_0" / "metrics.csv").read_text()
    assert "aggregation/ucb/insertion" in logged and "aggregation/base_gradcam/deletion/final" in logged
    # the final scores, recomputed with the public functions on the trained model
    x, _ = data.probe(6, "test")
    base = {}
    for k, name in enumerate(["saliency", "gradcam"]):
        pl.seed_everything(k)
        base[f"base_{name}"] = reduce_map(explain(model, x, name), "abs_sum")
    maps = {**base, **aggregate_all(base, "z", {"mean": {}, "ucb": {}})}
    final = callback.history[-1]
    for name, m in maps.items():
        for metric in (InsertionAUC(steps=8), DeletionAUC(steps=8)):
            metric.update(model, x, m)
            assert final[f"aggregation/{name}/{metric.mode}"] == pytest.approx(metric.compute().item(), abs=1e-6)


def test_aggregation_fidelity_on_a_tabular_model():
    from lightning_modules import MLPClassifier

    data = FinancialDataModule(dataset="german")
    callback = AggregationFidelity(n_probe=20, aggregators={"mean": {}, "pi": {}})
    trainer = pl.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, callbacks=[callback])  # fmt: skip
    trainer.fit(MLPClassifier(in_features=data.num_features, seed=0), datamodule=data)
    scores = callback.history[-1]
    assert {"aggregation/base_saliency/insertion", "aggregation/pi/deletion"} <= set(scores)
    assert all(0 <= v <= 1 for k, v in scores.items() if k.startswith("aggregation/"))


def test_aggregation_fidelity_scores_the_maps_sparseness_and_complexity():
    from evaluators.aggregators.pixel_aggregators import aggregate_all
    from evaluators.metrics.complexity import complexity, sparseness

    data = FinancialDataModule(dataset="german")
    callback = AggregationFidelity(explainers={"saliency": {}, "input_x_gradient": {}}, n_probe=20,
                                   aggregators={"mean": {}}, metrics=("sparseness", "complexity"))  # fmt: skip
    model, final = fit_one_epoch(callback, data)
    assert not any(k.endswith(("/insertion", "/deletion")) for k in final)
    x = data.test_tensors[0][:20]
    base = {f"base_{name}": explain(model, x, name) for name in ("saliency", "input_x_gradient")}
    maps = {**base, **aggregate_all(base, "z", {"mean": {}}, 1)}
    for name, m in maps.items():
        for metric, function in (("sparseness", sparseness), ("complexity", complexity)):
            assert final[f"aggregation/{name}/{metric}"] == pytest.approx(function(m).nanmean().item(), rel=1e-6)


def fit_one_epoch(callback, data):
    """A seed-0 MLPClassifier trained one epoch on ``data`` with ``callback``; the model, the last record."""
    from lightning_modules import MLPClassifier

    trainer = pl.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, callbacks=[callback])  # fmt: skip
    model = MLPClassifier(in_features=data.num_features, seed=0)
    trainer.fit(model, datamodule=data)
    return model, callback.history[-1]


def test_aggregation_fidelity_names_bad_options():
    from datamodules import InputError

    with pytest.raises(InputError, match="unknown aggregator"):
        AggregationFidelity(aggregators={"median": {}})
    with pytest.raises(InputError, match="normalisation='zscore'"):
        AggregationFidelity(normalisation="zscore")


def test_aggregation_fidelity_scores_optimised_aggregators_by_infidelity_and_fcor():
    from evaluators.aggregators.optimised_aggregators import optimised_aggregation
    from evaluators.metrics.faithfulness_correlation import faithfulness_correlation
    from evaluators.metrics.infidelity import infidelity, subset_perturbations

    data = FinancialDataModule(dataset="german")
    explainers = {"saliency": {}, "input_x_gradient": {}}
    callback = AggregationFidelity(explainers=explainers, n_probe=20, aggregators={"mean": {}},
                                   optimised={"agg_faith": {"n_samples": 8}}, metrics=("infidelity", "fcor"),
                                   n_samples=16)  # fmt: skip
    model, final = fit_one_epoch(callback, data)
    assert not any(k.endswith(("/insertion", "/deletion")) for k in final)
    x = data.test_tensors[0][:20]
    means = data.train_tensors[0].mean(0)
    maps, _ = optimised_aggregation(model, x, "agg_faith", explainers, n_samples=8, baseline=means)
    samples = subset_perturbations(model, x, n_samples=16, baseline=means)
    assert final["aggregation/agg_faith/infidelity"] == pytest.approx(infidelity(maps, samples).mean().item(), rel=1e-6)
    assert final["aggregation/agg_faith/fcor"] == pytest.approx(
        faithfulness_correlation(maps, samples).nanmean().item(), rel=1e-6)


def test_aggregation_fidelity_scores_relative_stability_with_weights_fixed_at_the_probe():
    from evaluators.aggregators.optimised_aggregators import combine, explainer_maps, optimised_aggregation
    from evaluators.metrics.relative_stability import relative_stability

    data = FinancialDataModule(dataset="german")
    explainers = {"saliency": {}, "input_x_gradient": {}}
    callback = AggregationFidelity(explainers=explainers, n_probe=20, aggregators={"mean": {}},
                                   optimised={"agg_robust": {"n_samples": 4}, "agg_var": {}},
                                   metrics=("relative_stability",), n_samples=8)  # fmt: skip
    model, final = fit_one_epoch(callback, data)
    assert {f"aggregation/{m}/{s}" for m in ("base_saliency", "mean", "agg_robust", "agg_var")
            for s in ("ris", "rrs", "ros")} <= set(final)  # fmt: skip
    assert not any(k.endswith(("/insertion", "/infidelity")) for k in final)
    x = data.test_tensors[0][:20]
    maps, weights = optimised_aggregation(model, x, "agg_robust", explainers, n_samples=4)
    expected = {
        "base_saliency": (explain(model, x, "saliency"), lambda v, t: explain(model, v, "saliency")),
        "agg_robust": (maps, lambda v, t: combine(explainer_maps(model, v, None, explainers),
                                                  weights.repeat_interleave(8, 0))),
    }  # fmt: skip
    for name, (m, explain_fn) in expected.items():
        scores = relative_stability(model, x, m, explain_fn, n_samples=8, change="norm")
        for stability in ("ris", "rrs", "ros"):
            assert final[f"aggregation/{name}/{stability}"] == pytest.approx(scores[stability].nanmean().item(),
                                                                             rel=1e-5), (name, stability)  # fmt: skip
