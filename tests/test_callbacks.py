"""ExplanationConsistency logs the members' pairwise agreement on the probe set; AggregationFidelity the
insertion and deletion AUCs of base and aggregated maps on its probe."""

from __future__ import annotations

import pytest
import pytorch_lightning as pl
import torch

from callbacks import AggregationFidelity, ExplanationConsistency
from datamodules import FinancialDataModule
from evaluators.metrics.agreement_functional import angular_difference, sign_agreement
from evaluators.maps import explain
from lightning_modules import PopulationMLP


def test_logged_agreement_equals_functional_on_final_members():
    data = FinancialDataModule(dataset="german")
    population = PopulationMLP(in_features=data.num_features, seeds=[0, 1, 2, 3], lr=4e-3)
    callback = ExplanationConsistency(every_n_epochs=1, probe_size=50, k=5)
    trainer = pl.Trainer(max_epochs=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, callbacks=[callback])  # fmt: skip
    trainer.fit(population, datamodule=data)
    x = data.test_tensors[0][:50]
    e = explain(population, x, "saliency")
    logged = trainer.callback_metrics
    assert logged["consistency/sa"].item() == pytest.approx(sign_agreement(e, 5).mean().item(), abs=1e-5)
    assert logged["consistency/angular"].item() == pytest.approx(angular_difference(e).mean().item(), abs=1e-4)
    assert 0 < logged["consistency/sa"].item() < 1


def test_unknown_metric_is_named():
    from datamodules import InputError

    with pytest.raises(InputError, match=r"unknown metric\(s\) \['jaccard'\]"):
        ExplanationConsistency(metrics=("sa", "jaccard"))


def fashion_mnist_or_skip():
    from datamodules.images import FashionMNISTDataModule

    data = FashionMNISTDataModule(batch_size=64, seed=0)
    try:
        data.describe()
    except Exception as err:  # the Debian package is installed by the Makefile
        pytest.skip(f"Fashion-MNIST not available: {err}")
    return data


def test_aggregation_fidelity_logs_each_epoch_and_its_final_scores_equal_the_metrics(tmp_path):
    from evaluators.maps import explain
    from evaluators.maps.reduction import reduce_map
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


class TwoImageMembers(pl.LightningModule):
    """A stand-in image population: two small CNNs trained side by side (sum of their losses),
    with the interface the callback reads (``size``, ``member(i)``)."""

    def __init__(self) -> None:
        super().__init__()
        from lightning_modules import ImageClassifier

        self.members = torch.nn.ModuleList([ImageClassifier(arch="small_cnn", num_classes=10, in_channels=1, seed=s)
                                            for s in (0, 1)])  # fmt: skip

    @property
    def size(self) -> int:
        return len(self.members)

    def member(self, i: int):
        return self.members[i]

    def training_step(self, batch, batch_idx: int):
        x, y = batch
        return sum(torch.nn.functional.cross_entropy(m(x), y) for m in self.members)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=3e-3)


def test_image_population_consistency_is_logged_per_pixel_on_a_two_epoch_run(tmp_path):
    from evaluators.maps.reduction import reduce_map

    data = fashion_mnist_or_skip()
    population = TwoImageMembers()
    callback = ExplanationConsistency(every_n_epochs=1, probe_size=12, k=40)
    epochs = []

    class Seen(pl.Callback):
        def on_train_epoch_end(self, trainer, pl_module):
            epochs.append(dict(trainer.callback_metrics))

    trainer = pl.Trainer(max_epochs=2, limit_train_batches=3, limit_val_batches=0, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, logger=False,
                         default_root_dir=tmp_path, callbacks=[callback, Seen()])  # fmt: skip
    trainer.fit(population, datamodule=data)
    assert len(epochs) == 2 and all("consistency/sa" in logged for logged in epochs)
    x, y = data.probe(12, "test")
    e = torch.stack([reduce_map(explain(m, x, "saliency", target=y), "sum").flatten(1) for m in population.members])
    logged = trainer.callback_metrics
    assert logged["consistency/sa"].item() == pytest.approx(sign_agreement(e, 40).mean().item(), abs=1e-5)
    assert logged["consistency/angular"].item() == pytest.approx(angular_difference(e).mean().item(), abs=1e-4)
    assert 0 < logged["consistency/sa"].item() < 1
