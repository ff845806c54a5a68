"""lightning_modules/curve_population.py: curves trained in one stack equal each curve trained alone."""

from __future__ import annotations

import pytest
import pytorch_lightning as pl
import torch

from datamodules import FinancialDataModule
from lightning_modules import PopulationMLP
from lightning_modules.curve_population import curves_between
from lightning_modules.curves import MLPCurve


@pytest.mark.parametrize(
    ("mode", "weight_decay", "loss_on"),
    [("fixed", 0.0, "logits"), ("trained", 0.0, "logits"), ("fixed", 1e-2, "logits"), ("fixed", 0.0, "probabilities")],
)
def test_curve_trained_in_a_stack_equals_curve_trained_alone(mode, weight_decay, loss_on):
    population = PopulationMLP(
        in_features=61, seeds=[3, 5, 8, 13], lr=4e-3, weight_decay=weight_decay, loss_on=loss_on
    )
    with torch.no_grad():  # end points that are not initialisations
        for p in population.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    pairs = [(0, 1), (2, 3)]
    stacked = curves_between(population, pairs, mode=mode)

    def trainer() -> pl.Trainer:
        return pl.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                          enable_model_summary=False, accelerator="cpu")  # fmt: skip (bit for bit on the CPU)

    trainer().fit(stacked, datamodule=FinancialDataModule(dataset="german"))
    for i, (a, b) in enumerate(pairs):
        alone = MLPCurve(
            in_features=61, mode=mode, start_seed=population.seeds[a], end_seed=population.seeds[b], lr=4e-3,
            weight_decay=weight_decay, loss_on=loss_on, t_seed=population.seeds[a],
            start_model=population.member(a), end_model=population.member(b),
        )  # fmt: skip
        trainer().fit(alone, datamodule=FinancialDataModule(dataset="german"))
        ours = dict(stacked.curve(i).named_parameters())
        for name, p in alone.named_parameters():
            tolerance = 0.0 if weight_decay == 0 else 1e-6  # bit for bit without the L2 term
            assert (ours[name] - p).abs().max().item() <= tolerance, name
        if mode == "fixed":  # the end points stayed, the bend left the midpoint it started from
            start, end = population.member(a).net[0].weight, population.member(b).net[0].weight
            assert torch.equal(ours["net.0.points.weight_0"], start) and torch.equal(ours["net.0.points.weight_2"], end)
            assert (ours["net.0.points.weight_1"] - (start + end) / 2).abs().max() > 1e-3
