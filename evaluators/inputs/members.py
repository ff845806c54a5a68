"""The members of a population, each as the single model it equals, for the protocols that
evaluate one model (aggregation, optimised) and, given a population in place of a run,
evaluate every member (docs/seed_robustness.md).

A population is

* a population file written by train.py (``PopulationMLP``, ``ImagePopulation``) or by
  ``python -m evaluators.inputs.assemble`` (``ModulePopulation``: K of a user's own models);
* a train.py run folder of such a population (its ``population.pt``);
* a folder of image runs (``evaluators.inputs.image_members``: every ``train.py`` run under it).

Anything else (a train.py run folder of one model, a model file) is a single model.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import yaml

from evaluators.inputs.image_members import image_source_name, load_image_members, source_modality
from evaluators.inputs.model_source import FILE_OPTIONS
from evaluators.inputs.sources import POPULATIONS, check_kind, run_kind
from foundation.errors import InputError
from foundation.modality import ROWS
from lightning_modules.population_io import (
    IMAGE_KINDS, load_population, population_datamodule, read_population_file,
)  # fmt: skip


@dataclass
class Members:
    """K models (eval mode, on one device), their names (a member run's folder under the
    source, or ``seed<s>`` of a population file) and the datamodule they were trained on."""

    names: list[str]
    models: list
    data: object


def population_path(source: str | Path) -> Path | None:
    """The population ``source`` names (a population file, or a folder of image runs), or
    None where it names a single model."""
    path = Path(source)
    if path.is_dir():
        config = path / "config.yaml"
        if not config.is_file():
            return path if any(path.rglob("checkpoints/last.ckpt")) else None
        if run_kind(yaml.safe_load(config.read_text()) or {}) in POPULATIONS:
            return path / "population.pt"
        return None
    if not path.is_file():
        return None
    try:
        read_population_file(path, mmap=True)
    except InputError:  # a model file: load_run reads it (or names what is wrong with it)
        return None
    return path


def population_name(path: Path) -> str:
    """The dataset a population was trained on (a report folder's prefix)."""
    if path.is_dir():
        return image_source_name(path)
    return read_population_file(path, mmap=True)["metadata"]["dataset"]["dataset"]


def model_options(cfg) -> dict:
    """A config's options of a model file (``model_class``, ``model_args``, ``data_config``, and
    ``model_inputs``, ``model_mean``, ``model_std``: ``evaluators.inputs.model_inputs``)."""
    return {name: getattr(cfg, name) for name in FILE_OPTIONS}


def load_members(path: Path, device: torch.device, data_dir: str | None = None, kind: str | None = None,
                 file_options: dict | None = None, where: str = "option run") -> Members:  # fmt: skip
    """The members of the population at ``path`` (``population_path``) on ``device``,
    checked to be of the config's ``kind`` of data (``tabular``, ``image`` or None);
    ``file_options`` (``model_options``), which a population's members do not take, must be unset."""
    given = sorted(name for name, value in (file_options or {}).items() if value)
    if given:
        raise InputError(f"option(s) {given} with {where}={str(path)!r}, a population; expected them unset (they "
                         "read a single model file; a population file or a folder of runs names its own models)")

    if not path.exists():
        raise InputError(f"{where}={str(path)!r}: {path} not found; expected the population's population.pt")
    modality = source_modality(path)
    check_kind(f"{where}={str(path)!r}", f"{modality.kind} population", POPULATIONS, kind)
    if modality is not ROWS:
        population, _, data = load_image_members(path, device, data_dir)
        if path.is_dir():
            names = [str(f.relative_to(path)).replace("/", "__") for f in population.folders]
        else:
            names = [f"seed{s}" for s in read_population_file(path, mmap=True, kind=IMAGE_KINDS)["seeds"]]
        return Members(names, population.members, data)
    population, payload = load_population(path, kind="PopulationMLP")
    models = [population.member(i).to(device).eval() for i in range(population.size)]
    return Members([f"seed{s}" for s in population.seeds], models, population_datamodule(payload, data_dir))
