"""Saving and loading a trained population as one file.

The file is a plain ``torch.save`` dictionary of tensors, numbers, strings and
lists, so it loads with ``torch.load(weights_only=True)``:
``{"format", "hparams", "seeds", "state_dict", "member_test_acc", "metadata"}``.
"""

from __future__ import annotations

import platform
from importlib.metadata import version
from pathlib import Path

import torch

from datamodules.errors import InputError
from datamodules.files import atomic_write
from datamodules.specs import DATASETS
from lightning_modules.mlp import MLPClassifier
from lightning_modules.population import PopulationMLP

FORMAT = "reliable-explanations/population-v2"  # v2: weights (M, out, in)


def software_versions() -> dict[str, str]:
    names = ["torch", "pytorch-lightning", "numpy", "scikit-learn", "captum", "torchmetrics"]
    return {"python": platform.python_version(), **{n: version(n) for n in names}}


def save_population(path: str | Path, population: PopulationMLP, member_test_acc: list[float], metadata: dict,
                    file_format: str = FORMAT) -> None:  # fmt: skip
    """Write atomically: a reader never sees a half-written population file. ``population``:
    any population with ``init_kwargs()``, ``seeds`` and a state dict (``PopulationMLP``, or an
    ``ImagePopulation`` under its own ``file_format``)."""
    payload = {
        "format": file_format,
        "hparams": population.init_kwargs(),
        "seeds": list(population.seeds),
        "state_dict": {k: v.detach().cpu() for k, v in population.state_dict().items()},
        "member_test_acc": list(member_test_acc),
        "metadata": {**metadata, "versions": software_versions()},
    }
    atomic_write(Path(path), lambda tmp: torch.save(payload, tmp))


def read_population_file(path: str | Path, mmap: bool = False, file_format: str = FORMAT) -> dict:
    """A population file's dictionary, checked to be one of ``file_format``; ``mmap=True``
    maps its tensors instead of reading them (for a look at the metadata alone)."""
    path = Path(path)
    if not path.is_file():
        dataset = path.parent.parent.name
        make = f" (make it with: make population DATASET={dataset})" if dataset in DATASETS else ""
        raise InputError(f"{path}: file not found; expected a population file written by train.py{make}")
    try:
        payload = torch.load(path, weights_only=True, map_location="cpu", mmap=mmap)
    except Exception as err:  # torch.load's failures on a foreign file differ by format (zip, pickle, mmap)
        raise InputError(f"{path}: not a population file written by train.py ({type(err).__name__})") from None
    if not isinstance(payload, dict) or payload.get("format") != file_format:
        raise InputError(f"{path}: not a population file (expected format {file_format!r})")
    return payload


def load_population(path: str | Path) -> tuple[PopulationMLP, dict]:
    """The population and the rest of the file (seeds, accuracies, metadata)."""
    payload = read_population_file(path)
    population = PopulationMLP(**payload["hparams"], seeds=payload["seeds"], initialise=False)
    population.load_state_dict(payload["state_dict"])
    return population, payload


def load_member(path: str | Path, index: int) -> MLPClassifier:
    """Member ``index`` of a saved population as a plain ``MLPClassifier``."""
    population, _ = load_population(path)
    if not 0 <= index < population.size:
        raise InputError(f"member index {index}: expected 0 <= index < {population.size}")
    return population.member(index)


def population_datamodule(payload: dict, data_dir: str | None = None):
    """The datamodule a saved population was trained on (optionally reading another folder)."""
    from pytorch_lightning.cli import instantiate_class

    data_cfg = payload["metadata"]["datamodule"]
    if data_dir is not None:
        data_cfg["init_args"]["data_dir"] = data_dir
    return instantiate_class((), data_cfg)
