"""Any classifier: a LightningModule that trains a user's ``nn.Module`` (docs/your_model.md).

``Classifier(net)`` wraps any network whose ``forward`` maps a batch of inputs (N, ...) to
class logits (N, K): tabular rows or images alike. Training minimises the cross-entropy of
the logits (with ``label_smoothing``) by Adam, AdamW or SGD with momentum (``weight_decay``
on every parameter; no schedule). It logs what the project's classifiers log, so that run
folders read alike: ``train/loss``, ``train/acc``, ``val/loss``, ``val/acc`` (where the data
has a ``val`` split), ``test/loss`` and ``test/acc``, per epoch (means over the inputs).

From train.py the network is given by class path, a class or a function (``--model.net
torchvision.models.resnet18``, ``--model.net timm.create_model --model.net.model_name resnet18``);
its options ``in_features``, ``num_classes`` and ``in_channels`` / ``in_chans``, where it takes
them, are taken from the datamodule (``net_options.net_options_from_data``). The initial
weights are drawn from the global RNG, which train.py seeds with ``seed_everything``: that
option is a member's seed. Given the network as its config (``{"class_path", "init_args"}``
and any ``dict_kwargs``, as a run's hyperparameters hold it) and a ``seed``, the network is
built from that seed alone (the global RNG neither read nor advanced): how ROAR retrains a
``Classifier`` run from seeds.
"""

from __future__ import annotations

import copy
import warnings
from typing import Literal

import pytorch_lightning as pl
import torch
from pytorch_lightning.cli import instantiate_class
from torch import nn

from foundation.errors import InputError
from lightning_modules.image_classifier import CrossEntropySteps
from lightning_modules.net_options import net_kwargs

Optimizer = Literal["adam", "adamw", "sgd"]
OPTIMIZERS = ("adam", "adamw", "sgd")
SGD_MOMENTUM = 0.9


def check_logits(logits: torch.Tensor, rows: int, num_classes: int | None, where: str) -> None:
    """That ``logits`` are (rows, K) with K ≥ 2 (K = ``num_classes`` where given), else an
    ``InputError`` naming ``where`` (the network or file) and the shape found."""
    shape = tuple(getattr(logits, "shape", ()))
    if not isinstance(logits, torch.Tensor) or logits.dim() != 2 or shape[0] != rows or shape[1] < 2:
        got = f"an output of shape {shape}" if isinstance(logits, torch.Tensor) else f"a {type(logits).__name__}"
        raise InputError(f"{where}: {got} for a batch of {rows} inputs; expected class logits of shape "
                         f"({rows}, {num_classes or 'K'})")  # fmt: skip
    if num_classes is not None and shape[1] != num_classes:
        raise InputError(f"{where}: logits of {shape[1]} classes; the data has {num_classes} classes "
                         f"(expected an output of shape ({rows}, {num_classes}))")  # fmt: skip


def build_seeded(config: dict, seed: int | None) -> nn.Module:
    """The network of ``config`` (class path, init arguments and any ``dict_kwargs``:
    ``net_options.net_kwargs``), its weights drawn from ``seed``."""
    if seed is None:
        raise InputError("option seed: None with a network config; expected the seed to draw its weights from")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return instantiate_class((), copy.deepcopy(net_kwargs(config)))


def build_optimizer(parameters, hp) -> torch.optim.Optimizer:
    """``hp.optimizer`` (sgd with momentum ``SGD_MOMENTUM``, adam, adamw) over ``parameters`` with
    ``hp.lr`` and ``hp.weight_decay``."""
    if hp.optimizer == "sgd":
        return torch.optim.SGD(parameters, lr=hp.lr, momentum=SGD_MOMENTUM, weight_decay=hp.weight_decay)
    cls = torch.optim.Adam if hp.optimizer == "adam" else torch.optim.AdamW
    return cls(parameters, lr=hp.lr, weight_decay=hp.weight_decay)


class Classifier(CrossEntropySteps, pl.LightningModule):
    """A user's network ``net`` trained as a classifier (see the module's docstring).

    Args:
        net: the network: inputs (N, ...) to logits (N, K); or its config, built here.
        seed: where ``net`` is a config, the seed its weights are drawn from.
        num_classes: the data's K, linked from the datamodule by train.py; where given, the
            logits must have K columns (checked on every batch).
        in_features, in_channels: the data's input width (tables) or channels (images),
            linked by train.py (recorded with the run; the network takes them as its own options).
        optimizer: ``"adam"``, ``"adamw"`` or ``"sgd"`` (momentum 0.9).
        lr, weight_decay: the optimiser's.
        label_smoothing: of the training loss (the other losses are without).
    """

    def __init__(
        self,
        net: nn.Module,
        num_classes: int | None = None,
        in_features: int | None = None,
        in_channels: int | None = None,
        optimizer: Optimizer = "adam",
        lr: float = 1e-3,
        weight_decay: float = 0.0,
        label_smoothing: float = 0.0,
        seed: int | None = None,
    ) -> None:
        super().__init__()
        # a config is built under its own name: save_hyperparameters reads ``net`` from this frame
        module = build_seeded(net, seed) if isinstance(net, dict) and isinstance(net.get("class_path"), str) else net
        if not isinstance(module, nn.Module):
            raise InputError(f"option net: a {type(net).__name__}; expected an nn.Module (its class path)")
        if optimizer not in OPTIMIZERS:
            raise InputError(f"option optimizer={optimizer!r}; expected one of {list(OPTIMIZERS)}")
        if not lr > 0 or not weight_decay >= 0 or not 0.0 <= label_smoothing < 1.0:
            raise InputError(f"options lr={lr}, weight_decay={weight_decay}, label_smoothing={label_smoothing}; "
                             "expected lr > 0, weight_decay >= 0 and 0 <= label_smoothing < 1")  # fmt: skip
        with warnings.catch_warnings():  # Lightning's advice to ignore a module: it is dropped just below
            warnings.filterwarnings("ignore", message=r".*is an instance of `nn.Module`")
            self.save_hyperparameters()
        if isinstance(self.hparams.get("net"), nn.Module):  # made in Python, not from a config: not a plain value,
            del self.hparams["net"], self.hparams["seed"]  # nor one to rebuild from a seed
        self.net = module

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        """Keep the network's config and seed that the checkpoint holds (Lightning rebuilds the
        network from them, then hands the built module to ``__init__``)."""
        saved = checkpoint.get("hyper_parameters") or {}
        for key in ("net", "seed"):
            if key in saved and key not in self.hparams:
                self.hparams[key] = saved[key]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits (N, K)."""
        return self.net(x)

    def _step(self, batch, stage: str) -> torch.Tensor:
        x, y = batch
        logits = self(x)
        check_logits(logits, len(y), self.hparams.num_classes, f"option model.net ({type(self.net).__name__})")
        return self._logged_step(logits, y, stage)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return build_optimizer(self.parameters(), self.hparams)
