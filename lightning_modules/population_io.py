"""Saving and loading a trained population (any kind) as one file.

The file is a plain ``torch.save`` dictionary of tensors, numbers, strings and
lists, so it loads with ``torch.load(weights_only=True)``:
``{"format", "class", "hparams", "seeds", "state_dict", "member_test_acc", "metadata"}``;
``class`` names the kind (a name of ``POPULATIONS``: ``PopulationMLP``, ``ImagePopulation``,
``ModulePopulation``), ``hparams`` its
``init_kwargs()``, ``state_dict`` the population's (an ``ImagePopulation``'s keys are
``nets.<i>.<parameter or buffer>``). Files written before this format named the kind by
their format (``LEGACY_FORMATS``) and read the same.
"""

from __future__ import annotations

import platform
from importlib.metadata import version
from pathlib import Path

import torch
from torch import nn

from datamodules import data_location_option
from datamodules.specs import DATASETS
from foundation.errors import InputError
from foundation.files import atomic_write
from lightning_modules.image_population import ImagePopulation  # noqa: F401  (each kind registers itself in
from lightning_modules.module_population import ModulePopulation  # noqa: F401  POPULATIONS when imported)
from lightning_modules.population import PopulationMLP  # noqa: F401
from lightning_modules.population_base import POPULATIONS, Population

FORMAT = "reliable-explanations/population-v3"  # v3: one format for every kind, named by "class"
IMAGE_KINDS = tuple(POPULATIONS.names(modality="images"))  # what image protocols read
ROW_KINDS = tuple(POPULATIONS.names(modality="rows"))  # the kinds whose members may take table rows
LEGACY_FORMATS = {"reliable-explanations/population-v2": "PopulationMLP",  # weights (M, out, in)
                  "reliable-explanations/image-population-v1": "ImagePopulation"}  # fmt: skip


def software_versions() -> dict[str, str]:
    names = ["torch", "pytorch-lightning", "numpy", "scikit-learn", "captum", "torchmetrics"]
    return {"python": platform.python_version(), **{n: version(n) for n in names}}


def save_population(path: str | Path, population: Population, member_test_acc: list[float],
                    metadata: dict) -> None:  # fmt: skip
    """Write atomically: a reader never sees a half-written population file."""
    payload = {
        "format": FORMAT,
        "class": type(population).__name__,
        "hparams": population.init_kwargs(),
        "seeds": list(population.seeds),
        "state_dict": {k: v.detach().cpu() for k, v in population.state_dict().items()},
        "member_test_acc": list(member_test_acc),
        "metadata": {**metadata, "versions": software_versions()},
    }
    atomic_write(Path(path), lambda tmp: torch.save(payload, tmp))


def read_population_file(path: str | Path, mmap: bool = False, kind: str | tuple[str, ...] | None = None) -> dict:
    """A population file's dictionary, its ``class`` the kind it holds (also for a file of
    ``LEGACY_FORMATS``), checked to be ``kind`` (one or several) where given; ``mmap=True``
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
    file_format = payload.get("format") if isinstance(payload, dict) else None
    found = payload.get("class") if file_format == FORMAT else LEGACY_FORMATS.get(file_format)
    if found not in POPULATIONS:
        raise InputError(f"{path}: not a population file (expected format {FORMAT!r}, or one of "
                         f"{sorted(LEGACY_FORMATS)}, of a kind {sorted(POPULATIONS)})")  # fmt: skip
    wanted = (kind,) if isinstance(kind, str) else kind
    if wanted is not None and found not in wanted:
        raise InputError(f"{path}: holds a {found}; expected a {' or a '.join(wanted)}")
    return {**payload, "class": found}


def population_inputs(payload: dict) -> str:
    """What a saved population's members take, ``"images"`` or ``"rows"``: its ``inputs`` option
    where its kind has one (``ModulePopulation``), else its kind's ``modality``."""
    return (payload.get("hparams") or {}).get("inputs") or POPULATIONS[payload["class"]].obj.modality.name


def load_population(path: str | Path, kind: str | tuple[str, ...] | None = None) -> tuple[Population, dict]:
    """The population (on the CPU, of a class of ``kind`` where given) and the rest of the file."""
    payload = read_population_file(path, kind=kind)
    population = POPULATIONS[payload["class"]].obj.from_file(payload["hparams"], payload["seeds"])
    population.load_state_dict(payload["state_dict"])
    return population, payload


def load_member(path: str | Path, index: int) -> nn.Module:
    """Member ``index`` of a saved population as the model it equals alone (e.g. ``MLPClassifier``)."""
    population, _ = load_population(path)
    if not 0 <= index < population.size:
        raise InputError(f"member index {index}: expected 0 <= index < {population.size}")
    return population.member(index)


def population_datamodule(payload: dict, data_dir: str | None = None):
    """The datamodule a saved population was trained on; ``data_dir``: where its data lies now,
    given as the datamodule's :func:`~datamodules.data_location_option` (a table's ``path``)."""
    from pytorch_lightning.cli import instantiate_class

    data_cfg = payload["metadata"]["datamodule"]
    if data_dir is not None:
        data_cfg["init_args"][data_location_option(data_cfg["class_path"])] = data_dir
    return instantiate_class((), data_cfg)
