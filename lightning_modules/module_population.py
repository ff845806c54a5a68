"""A population of a user's networks (any architecture, one for every member), as one file.

``ModulePopulation(net, seeds)``: K networks built from one network config ``net``
(``{"class_path": ..., "init_args": {...}}``, a class or a function returning the network,
as train.py's ``--model.net``), their weights loaded from the population file. It is
assembled from K trained models (``python -m evaluators.inputs.assemble``), not trained
here; ``seeds`` label the members (their ``seed_everything`` where known, else 0 .. K-1).
The consistency protocol reads it as an image population (``ImageNetworks``).
"""

from __future__ import annotations

import copy

import torch
from pytorch_lightning.cli import instantiate_class
from torch import nn

from datamodules.errors import InputError
from lightning_modules.classifier import Classifier
from lightning_modules.image_ensembles import ImageNetworks
from lightning_modules.population_base import Population, seed_list


class ModulePopulation(Population, ImageNetworks):
    """K networks of one config (see the module's docstring); ``forward``: logits (K, N, classes)."""

    TEST_LOG = ("test/acc", "")

    def __init__(self, net: dict, seeds: list[int]) -> None:
        super().__init__()
        if not isinstance(net, dict) or not isinstance(net.get("class_path"), str):
            raise InputError(f"option net={net!r}; expected a network config {{class_path, init_args}}")
        self.seeds = seed_list(len(seeds), 0, seeds)
        self.net_config = {"class_path": net["class_path"], "init_args": dict(net.get("init_args") or {})}
        self.nets = nn.ModuleList(instantiate_class((), copy.deepcopy(self.net_config)) for _ in self.seeds)

    def member(self, i: int) -> Classifier:
        """Member i as a ``Classifier`` around a copy of its network."""
        if not 0 <= i < self.size:
            raise InputError(f"member index {i}: expected 0 <= index < {self.size}")
        return Classifier(copy.deepcopy(self.nets[i]))

    def init_kwargs(self) -> dict:
        return {"net": copy.deepcopy(self.net_config)}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits (K, N, classes) of every member."""
        return torch.stack([net(x) for net in self.nets])
