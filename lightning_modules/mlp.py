"""The tabular classifier of Ley et al.: an MLP with hidden layers 128-64-16 and ReLU.

K output logits (two by default: the paper's binary tables); ``softmax`` gives class
probabilities. Explanations differentiate the logit or probability (``explain_output``) of a
class: by default the positive class (label 1) of a binary model, each input's predicted class
of a multi-class one (``interface.tabular_class``), or any class given as ``target``.
Training: cross-entropy of the logits, Adam, no weight decay or dropout by default.
Initialisation is a pure function of ``seed``: building the module with the same seed gives
the same weights regardless of the global RNG state.
"""

from __future__ import annotations

from typing import Literal

import pytorch_lightning as pl
import torch
from torch import nn
from torch.nn import functional as F

from foundation.errors import InputError
from foundation.modality import ROWS
from lightning_modules.finite import check_outputs
from lightning_modules.interface import check_num_classes, default_output, tabular_class

ExplainOutput = Literal["logit", "probability"]
LossOn = Literal["logits", "probabilities"]
LOSS_ON = ("logits", "probabilities")


def classification_loss(logits: torch.Tensor, y: torch.Tensor, loss_on: LossOn = "logits", reduction: str = "mean"):
    """Cross-entropy of K-class scores (N, K). ``loss_on="probabilities"`` takes the softmax
    output as the scores, i.e. ``nn.CrossEntropyLoss`` after a final ``nn.Softmax``, as Ley
    et al.'s reference code trains (an ablation setting: docs/table1.md)."""
    scores = logits.softmax(dim=-1) if loss_on == "probabilities" else logits
    return F.cross_entropy(scores, y, reduction=reduction)


def check_loss_on(loss_on: str) -> None:
    if loss_on not in LOSS_ON:
        raise InputError(f"option loss_on={loss_on!r}; expected one of {list(LOSS_ON)}")


def build_mlp(in_features: int, hidden: tuple[int, ...], num_classes: int, dropout: float, seed: int) -> nn.Sequential:
    """Linear-ReLU stack with PyTorch's default initialisation drawn from ``seed``."""
    sizes = [in_features, *hidden]
    layers: list[nn.Module] = []
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
            layers += [nn.Linear(fan_in, fan_out), nn.ReLU()]
            if dropout > 0:
                layers.append(nn.Dropout(dropout))
        layers.append(nn.Linear(sizes[-1], num_classes))
    return nn.Sequential(*layers)


FUSED_ADAM_UNIT = 16  # float32 values per task unit (one 64-byte cache line) of the fused CPU kernel


def adam(params, lr: float, weight_decay: float, members: int = 1) -> torch.optim.Adam:
    """The optimiser of every tabular MLP, alone or in a population of ``members`` stacked models.

    PyTorch's Adam, fused for every tensor whose per-model size is a whole number of
    16-value units and single-tensor for the others (in the 128-64-16 MLP: the output
    bias, 2 values): the fused CPU kernel rounds a tensor's partial 64-byte unit
    differently, so only whole units are updated alike alone and inside a stack (why,
    and the speed gained: docs/tabular_population.md).
    """
    params = list(params)
    whole_units = [(p.numel() // members) % FUSED_ADAM_UNIT == 0 for p in params]
    groups = [
        {"params": [p for p, whole in zip(params, whole_units) if whole == fused], "fused": fused}
        for fused in (True, False)
        if fused in whole_units
    ]
    return torch.optim.Adam(groups, lr=lr, weight_decay=weight_decay, foreach=False)


class MLPClassifier(pl.LightningModule):
    """MLP classifier of K classes (Ley et al., §5 and Table 3: binary).

    Args:
        in_features: number of inputs (after encoding); linked from the datamodule.
        hidden: hidden layer widths; the paper's 128-64-16 by default.
        lr: Adam learning rate.
        weight_decay: Adam L2 penalty (0 in the paper).
        dropout: dropout after each hidden layer (0 in the paper).
        seed: initialisation seed, the only thing that varies across an underspecification set.
        explain_output: ``"logit"`` or ``"probability"`` of the explained class, the scalar
            that explainers differentiate.
        loss_on: ``"logits"`` (cross-entropy) or ``"probabilities"`` (the reference code's
            cross-entropy of the softmax output; see ``classification_loss``).
        num_classes: K, the number of output logits; linked from the datamodule.
    """

    RETRAINS_STACKED = True  # ROAR retrains K copies of it as one stacked ``PopulationMLP``
    modality = ROWS  # what it takes (``foundation.modality``)

    def __init__(
        self,
        in_features: int,
        hidden: tuple[int, ...] = (128, 64, 16),
        lr: float = 1e-3,
        weight_decay: float = 0.0,
        dropout: float = 0.0,
        seed: int = 0,
        explain_output: ExplainOutput = "logit",
        loss_on: LossOn = "logits",
        num_classes: int = 2,
    ) -> None:
        super().__init__()
        check_num_classes(num_classes)
        if explain_output not in ("logit", "probability"):
            raise InputError(f"option explain_output={explain_output!r}; expected 'logit' or 'probability'")
        check_loss_on(loss_on)
        if in_features < 1:
            raise InputError(f"option in_features={in_features}; expected a positive integer")
        self.save_hyperparameters()
        self.net = build_mlp(in_features, tuple(hidden), num_classes, dropout, seed)

    @property
    def explained_class(self) -> int | str:
        """The model contract's default class (``lightning_modules.interface``)."""
        return tabular_class(self.hparams.num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """K logits per row."""
        return self.net(x)

    def explained_output(self, x: torch.Tensor) -> torch.Tensor:
        """The default class's logit or probability, shape ``(N,)``."""
        return default_output(self, x)

    def _step(self, batch, stage: str) -> torch.Tensor:
        x, y = batch
        logits = self(x)
        if stage != "train":  # the training loss is train.py's FiniteTraining's
            check_outputs(self, logits, stage)
        loss = classification_loss(logits, y, self.hparams.loss_on)
        acc = (logits.argmax(dim=-1) == y).float().mean()
        self.log(f"{stage}/loss", loss, prog_bar=stage == "train", on_epoch=True, on_step=False)
        self.log(f"{stage}/acc", acc, prog_bar=True, on_epoch=True, on_step=False)
        return loss

    def training_step(self, batch, batch_idx: int) -> torch.Tensor:
        return self._step(batch, "train")

    def test_step(self, batch, batch_idx: int) -> None:
        self._step(batch, "test")

    def configure_optimizers(self) -> torch.optim.Optimizer:
        hp = self.hparams
        return adam(self.parameters(), hp.lr, hp.weight_decay)
