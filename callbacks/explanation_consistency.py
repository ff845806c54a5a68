"""Explanation consistency of a population's members, logged during training.

Every ``every_n_epochs`` epochs the members explain a fixed probe set (the first
``probe_size`` test rows) in one batched call, and the mean pairwise agreement
between members (SA, SSA, CDC at top-k, angular difference; Ley et al. §4) goes
to the logger as ``consistency/<metric>``.
"""

from __future__ import annotations

import pytorch_lightning as pl
import torch

from datamodules.errors import InputError
from evaluators.metrics.agreement import METRICS, PairwiseAgreement
from evaluators.maps import explain
from lightning_modules.population import PopulationMLP


class ExplanationConsistency(pl.Callback):
    def __init__(
        self,
        every_n_epochs: int = 1,
        probe_size: int = 200,
        method: str = "saliency",
        k: int = 5,
        metrics: tuple[str, ...] = ("sa", "ssa", "cdc", "angular"),
    ) -> None:
        unknown = [m for m in metrics if m not in METRICS]
        if unknown:
            raise InputError(f"ExplanationConsistency: unknown metric(s) {unknown}; expected some of {list(METRICS)}")
        self.every_n_epochs, self.probe_size, self.method, self.k = every_n_epochs, probe_size, method, k
        self.metrics = tuple(metrics)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not isinstance(pl_module, PopulationMLP) or pl_module.size < 2:
            return
        if (trainer.current_epoch + 1) % self.every_n_epochs:
            return
        x = trainer.datamodule.test_tensors[0][: self.probe_size].to(pl_module.device)
        with torch.enable_grad():
            explanations = explain(pl_module, x, self.method).detach()
        for name in self.metrics:
            metric = PairwiseAgreement(name, k=self.k).to(pl_module.device)
            metric.update(explanations)
            pl_module.log(f"consistency/{name}", metric.compute()["mean"].float(), on_epoch=True)
