"""Devices: the one an evaluation runs on (:func:`resolve_device`, the ``device`` option) and
the one a model's parameters are on (:func:`model_device`)."""

from __future__ import annotations

import torch
from torch import nn

from foundation.errors import InputError


def resolve_device(name: str) -> torch.device:
    """``auto``: the first CUDA device where one exists, else the CPU; or ``cpu``,
    ``cuda``, ``cuda:<index>``."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        device = None
    if device is None or device.type not in ("cpu", "cuda"):
        raise InputError(f"option device={name!r}; expected 'auto', 'cpu', 'cuda' or 'cuda:<index>'")
    if device.type == "cuda" and (not torch.cuda.is_available() or (device.index or 0) >= torch.cuda.device_count()):
        raise InputError(f"option device={name!r}: no such CUDA device on this machine")
    return device


def model_device(model: nn.Module, x: torch.Tensor) -> torch.device:
    """The device of the model's parameters (x's device for a model without any)."""
    parameter = next(model.parameters(), None)
    return x.device if parameter is None else parameter.device
