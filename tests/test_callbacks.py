"""ExplanationConsistency logs the members' pairwise agreement on the probe set."""

from __future__ import annotations

import pytest
import pytorch_lightning as pl

from callbacks import ExplanationConsistency
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
