"""A user's own networks, as tests give them to train.py and the evaluators by class path."""

from __future__ import annotations

import pytorch_lightning as pl
from torch import nn


class TableNet(nn.Sequential):
    """A plain ``nn.Sequential`` MLP on table rows."""

    def __init__(self, in_features: int = 1, hidden: int = 8, num_classes: int = 2) -> None:
        super().__init__(nn.Linear(in_features, hidden), nn.ReLU(), nn.Linear(hidden, num_classes))


class TinyCNN(nn.Module):
    """A small torchvision-style CNN: conv, BatchNorm, ReLU, global average pool, linear."""

    def __init__(self, num_classes: int = 10, in_channels: int = 3, width: int = 4) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(in_channels, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(),
                                      nn.AdaptiveAvgPool2d(1), nn.Flatten())  # fmt: skip
        self.fc = nn.Linear(width, num_classes)

    def forward(self, x):
        return self.fc(self.features(x))


class Flat(nn.Module):
    """A network whose output is not (N, K): one score per input."""

    def __init__(self, in_features: int = 1) -> None:
        super().__init__()
        self.linear = nn.Linear(in_features, 1)

    def forward(self, x):
        return self.linear(x)[:, 0]


class UserLightning(pl.LightningModule):
    """A user's own LightningModule around a ``TinyCNN`` (no test loop of its own)."""

    def __init__(self, num_classes: int = 10, width: int = 4) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.model = TinyCNN(num_classes, width=width)

    def forward(self, x):
        return self.model(x)


class TableNetBN(nn.Sequential):
    """A table network with BatchNorm: linear, BatchNorm1d, ReLU, linear."""

    def __init__(self, in_features: int = 1, hidden: int = 8, num_classes: int = 2) -> None:
        super().__init__(nn.Linear(in_features, hidden), nn.BatchNorm1d(hidden), nn.ReLU(),
                         nn.Linear(hidden, num_classes))  # fmt: skip


class NaNAfter(TableNet):
    """A ``TableNet`` whose outputs turn NaN from its ``after``-th forward pass in training mode
    on (counted from 0; None: never) and, with ``in_eval``, always in evaluation mode: a model
    that diverges during training, or one whose test outputs are NaN."""

    def __init__(self, in_features: int = 1, hidden: int = 8, num_classes: int = 2, after: int | None = None,
                 in_eval: bool = False) -> None:  # fmt: skip
        super().__init__(in_features, hidden, num_classes)
        self.after, self.in_eval, self.calls = after, in_eval, 0

    def forward(self, x):
        out = super().forward(x)
        if self.training:
            self.calls += 1
            poisoned = self.after is not None and self.calls > self.after
        else:
            poisoned = self.in_eval
        return out * float("nan") if poisoned else out
