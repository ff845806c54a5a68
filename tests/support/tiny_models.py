"""Tiny float64 models shared by the metric and aggregator tests."""

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
