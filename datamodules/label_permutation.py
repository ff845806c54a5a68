"""Training labels permuted at random: the data randomisation test of Adebayo et al. (2018, §3.2).

Option ``permute_labels`` of every datamodule (``TabularDataModule``, ``ImageDataModule`` and
their subclasses): ``None`` (default) serves the true labels; an integer s serves the training
split's labels in the order π = ``torch.randperm(n, generator=torch.Generator().manual_seed(s))``
over the n training examples served (after ``subset``): example i gets the label of example π(i).
The class counts stay those of the true labels; the test (and validation) labels are never
touched. The seed is an init option, so it is in the run's ``config.yaml`` and a resumed run
serves the same labels.
"""

from __future__ import annotations

import torch

from foundation.errors import InputError


def check_permute_labels(value) -> int | None:
    """``value`` if it is None or a non-negative integer, else an ``InputError``."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise InputError(f"option permute_labels={value!r}; expected null (the true labels) or a non-negative "
                         "integer seed of the training labels' permutation")  # fmt: skip
    return value


def permuted_labels(labels: torch.Tensor, seed: int | None) -> torch.Tensor:
    """``labels[π]`` for the permutation π drawn from ``seed`` (the module's docstring); ``labels``
    itself for ``seed=None``."""
    if seed is None:
        return labels
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed))
    return labels[order]
