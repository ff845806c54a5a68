"""A population of a user's networks (any architecture, one for every member), as one file.

``ModulePopulation(net, seeds)``: K networks built from one network config ``net``
(``{"class_path": ..., "init_args": {...}}``, a class or a function returning the network,
as train.py's ``--model.net``), member i drawn from seed s_i alone (``classifier.build_seeded``:
the network ``Classifier(net=<config>, seed=s_i)`` starts from). It is either assembled from K
trained models (``python -m evaluators.inputs.assemble``; ``seeds`` then label the members,
0 .. K-1) or trained by train.py (``--model lightning_modules.ModulePopulation --model.net
<class path> --model.size K``): the members one after another within each step, on the same
batches, the loss Σ_i L_i (L_i member i's mean cross-entropy, so each member gets its own
gradient) and one optimiser whose update is elementwise (Adam, AdamW, SGD with momentum), so
member i is trained as ``Classifier(net=<config>, seed=s_i)`` alone on those batches.

``inputs``: what the members take, ``"images"`` (read by the image path of the protocols,
``ImageNetworks``) or ``"rows"`` of a table (train.py takes it from the datamodule), whose
population explains by default the positive class of a binary table and each row's predicted
class of a multi-class one (``interface.tabular_class``) and its ``explain_output`` (logit or
probability), as ``PopulationMLP`` does.
"""

from __future__ import annotations

import copy
from typing import Literal

import torch
from torch import nn
from torch.nn import functional as F

from foundation.errors import InputError
from foundation.modality import MODALITIES, modality_of
from lightning_modules.classifier import OPTIMIZERS, Classifier, Optimizer, build_optimizer, build_seeded, check_logits
from lightning_modules.image_ensembles import ImageNetworks
from lightning_modules.interface import check_num_classes, tabular_class
from lightning_modules.net_options import net_kwargs
from lightning_modules.population_base import POPULATIONS, Population, seed_list

Inputs = Literal["images", "rows"]


@POPULATIONS.register("ModulePopulation", modalities=("rows", "images"))  # its option inputs says which
class ModulePopulation(Population, ImageNetworks):
    """K networks of one config (see the module's docstring); ``forward``: logits (K, N, classes).

    Args:
        net: the network config ``{class_path, init_args}`` (from train.py: the network given by
            class path, whose config Lightning records).
        seeds, size, first_seed: the members' seeds (``seeds``, else first_seed .. first_seed+size-1).
        num_classes: the data's K (linked by train.py; required for ``inputs="rows"``).
        inputs: ``"images"`` or ``"rows"`` (linked by train.py from the datamodule).
        explain_output: ``"logit"`` or ``"probability"``, the output a table's explanations differentiate.
        optimizer, lr, weight_decay: training, as ``Classifier``'s.
    """

    TEST_LOG = ("test/acc", "")
    CURVES = "networks"  # curves between members: one CurveModel per pair (protocols' population_sets)

    def __init__(self, net: nn.Module | dict, seeds: list[int] | None = None, size: int = 4, first_seed: int = 0,
                 num_classes: int | None = None, inputs: Inputs = "images",
                 explain_output: Literal["logit", "probability"] = "logit", optimizer: Optimizer = "adam",
                 lr: float = 1e-3, weight_decay: float = 0.0) -> None:  # fmt: skip
        super().__init__()
        self.save_hyperparameters(ignore=["size", "first_seed"])
        config = net if isinstance(net, dict) else self.hparams.get("net")  # train.py: Lightning keeps its config
        if not isinstance(config, dict) or not isinstance(config.get("class_path"), str):
            raise InputError(f"option net={net!r}; expected a network config {{class_path, init_args}} (each member "
                             "is built from it under its own seed)")  # fmt: skip
        if inputs not in MODALITIES:
            raise InputError(f"option inputs={inputs!r}; expected one of {sorted(MODALITIES)}")
        self.modality = modality_of(inputs)  # what the members take (``ImageNetworks.modality``)
        if self.modality.fixed_class or num_classes is not None:
            check_num_classes(num_classes)
        if explain_output not in ("logit", "probability") or optimizer not in OPTIMIZERS or not lr > 0:
            raise InputError(f"options explain_output={explain_output!r}, optimizer={optimizer!r}, lr={lr}; expected "
                             f"'logit' or 'probability', one of {list(OPTIMIZERS)} and lr > 0")  # fmt: skip
        self.seeds = seed_list(size, first_seed, seeds)
        self.net_config = net_kwargs(config)  # a factory's ``dict_kwargs`` (timm's num_classes) among its init_args
        self.hparams.net, self.hparams.seeds = copy.deepcopy(self.net_config), self.seeds
        self.nets = nn.ModuleList(build_seeded(self.net_config, s) for s in self.seeds)

    @property
    def explained_class(self) -> int | str | None:
        """The model contract's default class: of a table's population ``tabular_class``; images: None."""
        return tabular_class(self.hparams.num_classes) if self.modality.fixed_class else None

    def member(self, i: int) -> Classifier:
        """Member i as a ``Classifier`` around a copy of its network."""
        if not 0 <= i < self.size:
            raise InputError(f"member index {i}: expected 0 <= index < {self.size}")
        return Classifier(copy.deepcopy(self.nets[i]))

    def init_kwargs(self) -> dict:
        names = ["num_classes", "inputs", "explain_output", "optimizer", "lr", "weight_decay"]
        return {"net": copy.deepcopy(self.net_config), **{n: self.hparams[n] for n in names}}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits (K, N, classes) of every member."""
        return torch.stack([net(x) for net in self.nets])

    def training_step(self, batch, batch_idx: int) -> dict:
        """Σ_i L_i over the members, each on the whole batch (see the module's docstring), and
        each member's L_i (``member_loss``)."""
        x, y = batch
        losses = []
        for net in self.nets:
            logits = net(x)
            check_logits(logits, len(y), self.hparams.num_classes, f"option model.net ({type(net).__name__})")
            losses.append(F.cross_entropy(logits, y))
        losses = torch.stack(losses)
        self.log("train/loss", losses.mean(), prog_bar=True, on_step=False, on_epoch=True, batch_size=len(y))
        return {"loss": losses.sum(), "member_loss": losses.detach()}

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return build_optimizer(self.parameters(), self.hparams)
