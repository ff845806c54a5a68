"""What the report explains: a population's members, the inputs, the class each input's maps
are of, and each member's test accuracy (``ReportInputs``, from ``report_inputs(cfg)``).

* A table's population (a population file): the first ``n_points`` test rows; accuracy on the
  whole test split; the class the population explains by default (``default_targets`` of the
  population: a binary table's positive class, else the class of the members' mean probability).
* An image population (a population file or a folder of image runs): ``n_points`` test images
  evenly spread through the split (``probe``); accuracy on ``n_accuracy_images`` such images;
  the class of the members' mean probability.

Faithfulness removes units towards a baseline: on rows the zero vector (the training mean of
standardised features) for insertion and deletion and the training set's feature means for
infidelity; on images Mahlau et al.'s random-normal image for insertion and deletion and a
blurred copy for infidelity (the metrics' defaults).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from evaluators.reports.reliability.config import ReportConfig
from foundation.errors import InputError
from foundation.modality import Modality
from lightning_modules.interface import default_targets

ROWS_PER_PASS = 256  # images per forward pass when members' accuracies and mean probabilities are taken


@dataclass
class ReportInputs:
    """The members (eval mode, one device), their names and test accuracies, the inputs ``x``,
    the class ``target`` (N,) every member explains, the number of classes, the inputs'
    modality, each faithfulness metric's options, and the inputs' ground truth where the data
    know it (``probe_truth``: ``mask`` and ``attributions``; None otherwise)."""

    members: list
    names: list[str]
    accuracies: torch.Tensor
    x: torch.Tensor
    target: torch.Tensor
    n_classes: int
    modality: Modality
    metric_options: dict[str, dict]
    truth: dict | None = None


def batched(model, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return torch.cat([model(part) for part in x.split(ROWS_PER_PASS)])


def report_inputs(cfg: ReportConfig) -> ReportInputs:
    """The inputs of ``cfg``'s population (the module docstring)."""
    population, _, data = cfg.load()
    if not cfg.modality.whole_splits:  # images: probed through the split, each member explains its predicted class
        members = population.members
        device = population.device
        x, _ = (t.to(device) for t in data.probe(cfg.n_points, "test"))
        x_acc, y_acc = (t.to(device) for t in data.probe(cfg.n_accuracy_images, "test"))
        source = Path(cfg.population)
        names = ([str(f.relative_to(source)) for f in population.folders] if source.is_dir()
                 else [f"member{i}" for i in range(len(members))])  # fmt: skip
        probabilities = torch.stack([batched(m, x).softmax(-1) for m in members]).mean(0)
        target = probabilities.argmax(-1)
        removal = {"seed": cfg.seed}
        infidelity = {"n_samples": cfg.infidelity_samples, "seed": cfg.seed}
        options = {"deletion": removal, "insertion": removal, "infidelity": infidelity}
    else:
        data.setup("test")
        device = population.device
        x_acc, y_acc = (t.to(device) for t in data.test_tensors)
        members = [population.member(i).to(device).eval() for i in range(population.size)]
        names = [f"seed{s}" for s in population.seeds]
        x = x_acc[: cfg.n_points]
        with torch.no_grad():
            target = default_targets(population, x)
        means = data.train_tensors[0].mean(0).to(device)
        removal = {"baseline": "zero", "seed": cfg.seed}
        options = {"deletion": removal, "insertion": removal,
                   "infidelity": {"n_samples": cfg.infidelity_samples, "baseline": means, "seed": cfg.seed}}
    if len(members) < 3:
        raise InputError(f"option population={cfg.population!r}: {len(members)} member(s); the report compares "
                         "members with one another: expected at least 3")  # fmt: skip
    accuracies = torch.tensor([(batched(m, x_acc).argmax(-1) == y_acc).double().mean().item() for m in members])
    n_classes = batched(members[0], x[:1]).shape[-1]
    truth = data.probe_truth(len(x), target.cpu())
    return ReportInputs(members, names, accuracies, x, target, n_classes, cfg.modality, options, truth)
