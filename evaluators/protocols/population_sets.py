"""Member sets, pairs and the curves between them: the building blocks the population
protocols (landscape, consistency) share."""

from __future__ import annotations

import numpy as np
import pytorch_lightning as pl
import torch

from foundation.errors import InputError
from lightning_modules.curve_model import CurveModel
from lightning_modules.curve_population import curves_between
from lightning_modules.curves import MLPCurve
from lightning_modules.ensembles import disjoint_sets  # noqa: F401  (the protocols import it from here)


def member_pairs(members: list[int]) -> list[tuple[int, int]]:
    """A set's n/2 disjoint pairs of members, in order: (m₁, m₂), (m₃, m₄), ..."""
    return [(members[i], members[i + 1]) for i in range(0, len(members) - 1, 2)]


def split_per_set(curves: list, set_pairs: list[list]) -> list[list]:
    bounds = np.cumsum([0] + [len(pairs) for pairs in set_pairs])
    return [curves[a:b] for a, b in zip(bounds[:-1], bounds[1:])]


def train_curves(population, pairs: list[tuple[int, int]], data, epochs: int, kind: str, mode: str) -> list[MLPCurve]:
    """Curves between members (a, b) for every pair, trained together in one stack
    (``MLPCurvePopulation``) with the members' hyperparameters: fixed end points (the
    trained members) or end points trained from the members' seeds along the curve."""
    stacked = curves_between(population, pairs, kind, mode)
    quiet_trainer(epochs, population.device).fit(stacked, datamodule=data)
    return [stacked.curve(i).to(population.device) for i in range(len(pairs))]


def train_network_curves(population, pairs: list[tuple[int, int]], data, epochs: int, kind: str,
                         mode: str = "fixed") -> list[CurveModel]:  # fmt: skip
    """Curves between members (a, b) of a population of networks (``nets``: images or table rows)
    for every pair, one after another: the trained members are the fixed end points, the bend is
    trained (Garipov et al.) on ``data`` for ``epochs`` epochs (Adam, lr 1e-3, t ~ U(0, 1) per batch)."""
    if mode != "fixed":
        raise InputError(f"option curve_mode={mode!r}; a population of networks takes 'fixed' (curves between "
                         "the trained members: it has no stacked members to train end points from their seeds)")
    nets = population.nets
    device = next(nets[0].parameters()).device
    curves = []
    for a, b in pairs:
        curve = CurveModel(nets[a], nets[b], kind, "fixed")
        quiet_trainer(epochs, device).fit(curve, datamodule=data)
        curves.append(curve.to(device).eval())
    return curves


# How a population's curves are trained, by its ``CURVES``: stacked MLPs or one network pair after another
CURVE_TRAINERS = {"stacked": train_curves, "networks": train_network_curves}


def quiet_trainer(epochs: int, device: torch.device) -> pl.Trainer:
    return pl.Trainer(
        max_epochs=epochs, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, deterministic=True, accelerator="gpu" if device.type == "cuda" else "cpu",
        devices=[device.index or 0] if device.type == "cuda" else 1,
    )  # fmt: skip
