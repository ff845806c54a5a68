"""An image population as the protocols read it: K image classifiers of one architecture
and the datamodule they were trained on.

``load_image_members(folder)`` reads every ``train.py`` run under ``folder`` (any depth:
``<folder>/**/checkpoints/last.ckpt`` beside its ``config.yaml``), e.g. K runs of
``configs/images/fashion_mnist_cnn.yaml`` that differ only in ``--model.seed`` written
with ``--output_dir <folder>``. Members are ordered by their seed, then by folder.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import yaml

from datamodules.errors import InputError
from evaluators.run_inputs import load_run


@dataclass
class ImageMembers:
    """K image classifiers (eval mode, on one device) and their datamodule."""

    members: list
    data: object
    folders: list[Path]

    @property
    def size(self) -> int:
        return len(self.members)

    @property
    def device(self) -> torch.device:
        return next(self.members[0].parameters()).device

    def bn_loader(self):
        """The training images in fixed order without augmentation: what BatchNorm statistics
        of networks sampled on curves are recomputed over."""
        return self.data.eval_dataloader("train")


def member_runs(folder: str | Path) -> list[Path]:
    runs = sorted(p.parent.parent for p in Path(folder).rglob("checkpoints/last.ckpt"))
    if len(runs) < 2:
        raise InputError(f"option population={str(folder)!r}: {len(runs)} train.py run(s) with "
                         "checkpoints/last.ckpt under it; expected a folder of at least 2 image runs")  # fmt: skip
    return runs


def image_source_name(folder: str | Path) -> str:
    """The dataset name of the first run's datamodule (the report folder's prefix)."""
    from pytorch_lightning.cli import instantiate_class

    data_cfg = yaml.safe_load((member_runs(folder)[0] / "config.yaml").read_text())["data"]
    return instantiate_class((), data_cfg).name


def load_image_members(folder: str | Path, device: torch.device, data_dir: str | None = None
                       ) -> tuple[ImageMembers, dict, object]:  # fmt: skip
    """The members (on ``device``), a payload ``{"metadata": {"dataset": {"dataset": name},
    "max_epochs": E}}`` like a population file's, and the first run's datamodule
    (``data_dir``: where its data lies now). Every run must have the same architecture and
    data."""
    runs = member_runs(folder)
    loaded = [load_run(run, data_location=data_dir) for run in runs]
    configs = [yaml.safe_load((run / "config.yaml").read_text()) for run in runs]
    arch = [(c["model"]["init_args"].get("arch"), c["data"]["class_path"]) for c in configs]
    if len(set(arch)) > 1:
        raise InputError(f"option population={str(folder)!r}: runs of different architectures or data "
                         f"{sorted(set(arch))}; expected one architecture on one dataset")  # fmt: skip
    order = sorted(range(len(runs)), key=lambda i: (loaded[i][0].hparams.seed, str(runs[i])))
    members = [loaded[i][0].to(device).eval() for i in order]
    data = loaded[0][1]
    metadata = {"dataset": {"dataset": data.name}, "max_epochs": configs[0]["trainer"]["max_epochs"]}
    return ImageMembers(members, data, [runs[i] for i in order]), {"metadata": metadata}, data
