"""What every population shares: M classifiers of one architecture, initialisation seeds
s_1..s_M, trained at once under one ``Trainer``, saved as one file (``population_io``), member
i extractable as the model it equals alone. Kinds: ``PopulationMLP`` (stacked tabular MLPs) and
``ImagePopulation``; ``forward(x)`` gives every member's logits (M, N, K). After a test,
``member_test_acc`` holds each member's accuracy (M,), and their mean, std, min and max are
logged under the kind's ``TEST_LOG`` name. ``member_train_acc``: each member's accuracy on the
training split as served, where ``train.py`` measured it after training. Test outputs must be
finite (``finite.check_member_outputs``: an error names the members by seed); a training step
returns each member's loss as ``member_loss``, which train.py's ``FiniteTraining`` checks."""

from __future__ import annotations

from typing import ClassVar, Literal

import pytorch_lightning as pl
import torch
from torch import nn

from foundation.errors import InputError
from foundation.registry import Registry
from lightning_modules.allocator import retain_freed_memory
from lightning_modules.finite import check_member_outputs

DataOrder = Literal["shared", "per_member"]
DATA_ORDERS = ("shared", "per_member")


def seed_list(size: int, first_seed: int, seeds: list[int] | None) -> list[int]:
    """The members' seeds: ``seeds``, or first_seed .. first_seed+size-1; distinct, at least one."""
    seeds = list(seeds) if seeds is not None else list(range(first_seed, first_seed + size))
    if not seeds:
        raise InputError(f"option size={size}; expected at least one member")
    if len(set(seeds)) != len(seeds):
        raise InputError("option seeds: repeated seeds; expected distinct initialisation seeds")
    return seeds


def check_data_order(data_order: str) -> None:
    if data_order not in DATA_ORDERS:
        raise InputError(f"option data_order={data_order!r}; expected one of {list(DATA_ORDERS)}")


# the population kinds by the class name a population file records (``population_io``), each registered at its
# class with the modalities its members take
POPULATIONS = Registry("population", page="populations.md")


class Population(pl.LightningModule):
    """The base of the population kinds (see the module's docstring): ``seeds``, ``size``,
    ``member(i)``, ``init_kwargs()`` (the constructor's arguments but the seeds, plain types)
    and the test loop."""

    TEST_LOG: ClassVar[tuple[str, str]]  # (name, suffix of the mean): "test/member_acc" + "_mean"
    CHUNKED: ClassVar[bool] = False  # train.py fits it in chunks of members (population_fit), else as one model
    member_test_acc: torch.Tensor | None = None  # after a test
    member_train_acc: torch.Tensor | None = None  # each member's training accuracy, where train.py measured it

    @property
    def size(self) -> int:
        return len(self.seeds)

    def member(self, i: int) -> nn.Module:
        raise NotImplementedError

    def init_kwargs(self) -> dict:
        raise NotImplementedError

    @classmethod
    def from_file(cls, hparams: dict, seeds: list[int]) -> "Population":  # to load a saved state dict into
        return cls(**hparams, seeds=seeds)

    def on_fit_start(self) -> None:
        if self.device.type == "cpu":
            retain_freed_memory()

    def _eval_rows(self) -> int:
        """Rows per forward pass in the test loop (all of a batch unless a kind bounds them)."""
        return 2**62

    def on_test_epoch_start(self) -> None:
        self._test_correct = torch.zeros(self.size, device=self.device)
        self._test_rows = 0

    def test_step(self, batch, batch_idx: int) -> None:
        x, y = batch
        rows = self._eval_rows()
        for xs, ys in zip(x.split(rows), y.split(rows)):
            logits = self(xs)
            check_member_outputs(self, logits, "test")
            self._test_correct += (logits.argmax(dim=-1) == ys).sum(dim=1)
        self._test_rows += len(y)

    def on_test_epoch_end(self) -> None:
        self.member_test_acc = (self._test_correct / self._test_rows).cpu()
        self.log_spread(*self.TEST_LOG, self.member_test_acc)

    def log_spread(self, name: str, mean: str, values: torch.Tensor) -> None:
        """Log the mean (as ``name + mean``), std, min and max of per-member ``values``."""
        self.log_dict(
            {f"{name}{mean}": values.mean(), f"{name}_std": values.std(unbiased=False),
             f"{name}_min": values.min(), f"{name}_max": values.max()},
            prog_bar=False, on_epoch=True,
        )  # fmt: skip
