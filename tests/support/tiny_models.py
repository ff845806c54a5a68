"""Tiny models shared by the tests: float64 ones for the metrics and aggregators, and the
float32 CNN the image explainers are checked on (``TinyCNN``; fixture ``model`` in tests/conftest.py)."""

from __future__ import annotations

import torch
from torch import nn

from lightning_modules import MLPClassifier


def tiny_mlp(d: int = 6) -> nn.Module:
    """An MLP on ``d`` features (one hidden layer of 8), seeded, in eval mode."""
    torch.manual_seed(0)
    return MLPClassifier(in_features=d, hidden=(8,)).double().eval()


def tiny_conv_net(channels: int = 2, classes: int = 4, h: int = 5, w: int = 6, seed: int = 0,
                  activation: type[nn.Module] = nn.ReLU) -> nn.Module:  # fmt: skip
    """One 3x3 convolution to 3 channels, ``activation``, a linear layer: (N, channels, h, w)
    images to ``classes`` logits, seeded, in eval mode."""
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Conv2d(channels, 3, 3, padding=1), activation(), nn.Flatten(), nn.Linear(3 * h * w, classes))
    return net.double().eval()


class TinyCNN(nn.Module):
    """Two convolutions with ReLU modules (not reused), 3 x 16 x 16 -> 5 logits."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.block = nn.Sequential(nn.Conv2d(4, 6, 3, padding=1), nn.ReLU())
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(24, 5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.block(self.features(x)))
