"""What every population evaluator's config starts with."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from datamodules.errors import InputError
from datamodules.tabular import TabularDataModule
from lightning_modules.population import PopulationMLP
from lightning_modules.population_io import load_population, population_datamodule


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


@dataclass
class PopulationSource:
    """The population file to evaluate, optionally another folder holding its raw data,
    and the device the evaluation runs on (perturbation noise is drawn there, so the
    same seed gives the same numbers on the same kind of device)."""

    population: str
    data_dir: str | None = None
    device: str = "auto"

    def __post_init__(self) -> None:
        resolve_device(self.device)  # a bad value is named before any work starts

    def load(self) -> tuple[PopulationMLP, dict, TabularDataModule]:
        """The population (on ``device``), the rest of its file, and its datamodule."""
        device = resolve_device(self.device)
        population, payload = load_population(self.population)
        return population.to(device), payload, population_datamodule(payload, self.data_dir)
