"""An image population as the protocols read it: K image classifiers of one architecture
and the datamodule they were trained on.

``load_image_members(source)`` reads either

* an image population file (``population.pt`` of an ``ImagePopulation`` run of train.py, or a
  ``ModulePopulation`` of ``python -m evaluators.inputs.assemble``; ``lightning_modules.population_io``):
  its members in order; or
* a folder: every ``train.py`` run under it (any depth: ``<folder>/**/checkpoints/last.ckpt``
  beside its ``config.yaml``), e.g. K runs of ``configs/images/fashion_mnist_cnn.yaml``
  that differ only in ``--model.seed`` (or, for a ``Classifier`` around a user's network, in
  ``--seed_everything``), written with ``--output_dir <folder>``; members ordered by their
  seed, then by folder.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
import yaml

from evaluators.inputs.runs import load_run
from foundation.errors import InputError
from foundation.modality import IMAGES, ROWS, Modality, modality_of
from lightning_modules.image_ensembles import ImageNetworks, network
from lightning_modules.population_io import (
    IMAGE_KINDS, load_population, population_datamodule, population_inputs, read_population_file,
)  # fmt: skip


@dataclass
class ImageMembers(ImageNetworks):
    """K image classifiers (eval mode, on one device) and their datamodule."""

    members: list
    data: object
    folders: list[Path]

    @property
    def size(self) -> int:
        return len(self.members)

    @property
    def nets(self) -> list:
        return [network(m) for m in self.members]

    @property
    def device(self) -> torch.device:
        return next(self.members[0].parameters()).device

    def curve_ensemble(self, curves, ts: torch.Tensor, members, loader=None):
        """``ImageNetworks.curve_ensemble``, BatchNorm recomputed by default over the training images (in order)."""
        loader = self.data.eval_dataloader("train") if loader is None else loader  # not augmented
        return super().curve_ensemble(curves, ts, members, loader)


def source_modality(source: str | Path) -> Modality:
    """What a population source's members take (``foundation.modality``): images for a folder of
    runs, a population file's own (``population_inputs``), rows for anything else (the table's
    loader names the problem)."""
    path = Path(source)
    if path.is_dir():
        return IMAGES
    try:
        return modality_of(population_inputs(read_population_file(path, mmap=True)))
    except InputError:  # not a population file
        return ROWS


def member_runs(folder: str | Path) -> list[Path]:
    runs = sorted(p.parent.parent for p in Path(folder).rglob("checkpoints/last.ckpt"))
    if len(runs) < 2:
        raise InputError(f"option population={str(folder)!r}: {len(runs)} train.py run(s) with "
                         "checkpoints/last.ckpt under it; expected a folder of at least 2 image runs")  # fmt: skip
    return runs


def image_source_name(source: str | Path) -> str:
    """The dataset name (the report folder's prefix): the file's, or the first run's datamodule's."""
    from pytorch_lightning.cli import instantiate_class

    if not Path(source).is_dir():
        return read_population_file(source, mmap=True, kind=IMAGE_KINDS)["metadata"]["dataset"]["dataset"]
    folder = source
    data_cfg = yaml.safe_load((member_runs(folder)[0] / "config.yaml").read_text())["data"]
    return instantiate_class((), data_cfg).name


def load_image_members(source: str | Path, device: torch.device, data_dir: str | None = None
                       ) -> tuple[ImageMembers, dict, object]:  # fmt: skip
    """The members (on ``device``), a payload holding ``{"metadata": {"dataset": {"dataset":
    name}, "max_epochs": E}}`` (a population file's own), and the datamodule (``data_dir``:
    where its data lies now). A folder's runs must share one architecture and dataset."""
    if not Path(source).is_dir():
        population, payload = load_population(source, kind=IMAGE_KINDS)
        data = population_datamodule(payload, data_dir)
        members = [population.member(i).to(device).eval() for i in range(population.size)]
        return ImageMembers(members, data, [Path(source)] * population.size), payload, data
    folder = source
    runs = member_runs(folder)
    loaded = [load_run(run, data_location=data_dir, kinds=("image",), where=f"option population={str(folder)!r}: {run}")
              for run in runs]  # fmt: skip
    configs = [yaml.safe_load((run / "config.yaml").read_text()) for run in runs]
    arch = [(json.dumps(c["model"]["init_args"].get("arch") or c["model"]["init_args"].get("net"), sort_keys=True),
             c["data"]["class_path"]) for c in configs]  # fmt: skip
    if len(set(arch)) > 1:
        raise InputError(f"option population={str(folder)!r}: runs of different architectures or data "
                         f"{sorted(set(arch))}; expected one architecture on one dataset")  # fmt: skip
    seeds = [loaded[i][0].hparams.get("seed", configs[i].get("seed_everything")) for i in range(len(runs))]
    order = sorted(range(len(runs)), key=lambda i: (seeds[i], str(runs[i])))
    members = [loaded[i][0].to(device).eval() for i in order]
    data = loaded[0][1]
    metadata = {"dataset": {"dataset": data.name}, "max_epochs": configs[0]["trainer"]["max_epochs"]}
    return ImageMembers(members, data, [runs[i] for i in order]), {"metadata": metadata}, data
