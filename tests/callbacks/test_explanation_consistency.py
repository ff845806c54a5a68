"""ExplanationConsistency (callbacks/explanation_consistency.py): the members' pairwise agreement on
the probe set, logged each epoch and equal to the agreement functions called directly, for a
tabular population and a two-member image population."""

from __future__ import annotations

import pytest
import pytorch_lightning as pl
import torch

from callbacks import ExplanationConsistency
from datamodules import FinancialDataModule
from evaluators.maps import explain
from evaluators.metrics.agreement_functional import angular_difference, sign_agreement
from lightning_modules import PopulationMLP
from tests.support.helpers import fashion_mnist_or_skip


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
    from foundation.modality import reduce_map

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
