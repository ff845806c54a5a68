"""Explanation consistency of a population's members, logged during training.

Every ``every_n_epochs`` epochs the members explain a fixed probe set and the mean
pairwise agreement between members (SA, SSA, CDC at top-k, angular difference; Ley et
al. §4) goes to the logger as ``consistency/<metric>``:

* the probe: the datamodule's ``probe(probe_size)``, the first test rows of a tabular
  datamodule, test images spread through the test split of an image one;
* a population with a fixed class (``PopulationMLP``) explains it in one batched call;
  any other (a LightningModule with ``size`` and ``member(i)``, as a stacked image
  population) member by member, each explaining the input's label; image maps are
  reduced per pixel (``map_reduction``, ``reduce_map``) and flattened, so the top-k are pixels.
"""

from __future__ import annotations

import pytorch_lightning as pl
import torch

from evaluators.maps import explain
from evaluators.metrics.agreement import AGREEMENT_METRICS, PairwiseAgreement
from foundation.errors import InputError
from foundation.modality import REDUCTIONS, modality_of
from lightning_modules.interface import fixed_target


class ExplanationConsistency(pl.Callback):
    def __init__(
        self,
        every_n_epochs: int = 1,
        probe_size: int = 200,
        method: str = "saliency",
        k: int = 5,
        metrics: tuple[str, ...] = ("sa", "ssa", "cdc", "angular"),
        map_reduction: str = "sum",
    ) -> None:
        unknown = [m for m in metrics if m not in AGREEMENT_METRICS]
        if unknown:
            raise InputError(f"ExplanationConsistency: unknown metric(s) {unknown}; expected some of "
                             f"{list(AGREEMENT_METRICS)}")  # fmt: skip
        if map_reduction not in REDUCTIONS:
            raise InputError(f"ExplanationConsistency: option map_reduction={map_reduction!r}; expected one of "
                             f"{list(REDUCTIONS)}")  # fmt: skip
        self.every_n_epochs, self.probe_size, self.method, self.k = every_n_epochs, probe_size, method, k
        self.metrics = tuple(metrics)
        self.map_reduction = map_reduction
        self._probe: tuple[torch.Tensor, torch.Tensor] | None = None

    def explanations(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> torch.Tensor:
        """(M, N, ·) maps of the members on the probe (the datamodule's ``probe``): a population
        with a fixed class in one call, any other member by member for the probe's labels;
        image maps reduced per pixel and flattened."""
        if self._probe is None:
            self._probe = trainer.datamodule.probe(self.probe_size)
        x, y = (t.to(pl_module.device) for t in self._probe)
        if fixed_target(pl_module) is not None:
            return explain(pl_module, x, self.method).detach()
        maps = [explain(pl_module.member(i).to(pl_module.device), x, self.method, target=y).detach()
                for i in range(pl_module.size)]  # fmt: skip
        return torch.stack([modality_of(x).reduce(m, self.map_reduction).flatten(1) for m in maps])

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not callable(getattr(pl_module, "member", None)) or pl_module.size < 2:
            return
        if (trainer.current_epoch + 1) % self.every_n_epochs:
            return
        with torch.enable_grad():
            explanations = self.explanations(trainer, pl_module)
        for name in self.metrics:
            metric = PairwiseAgreement(name, k=self.k).to(pl_module.device)
            metric.update(explanations)
            pl_module.log(f"consistency/{name}", metric.compute()["mean"].float(), on_epoch=True)
