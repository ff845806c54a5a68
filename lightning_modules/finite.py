"""Non-finite numbers never pass silently through training or testing.

:class:`FiniteTraining`, a callback that ``train.py`` gives every run (single models, population
chunks, whole populations), stops training at the first training loss that is NaN or ±inf with
one ``InputError`` naming the epoch, the step and, for a population, the members (by seed) whose
loss it is; no checkpoint is written after it, so the run's last checkpoint is the last good
one. The loss it reads is the one ``training_step`` returns (``outputs["loss"]``) or, for a
population, each member's (``outputs["member_loss"]``, shape (M,)). The cost is one sum per
step, read one step later (by then the next step's work is queued, so reading it seldom leaves
a GPU idle); the pending step is also read before validation, before any checkpoint is written
and at each epoch's end.

:func:`check_outputs` and :func:`check_member_outputs` refuse a model's or a population's
validation and test outputs (logits) that are not finite, so an accuracy is never computed from
NaN: an argmax over NaN still picks a class and gives a number that looks right.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytorch_lightning as pl
import torch
from torch import nn

from foundation.finite import check_finite
from foundation.errors import InputError


def kinds(values: torch.Tensor) -> str:
    """"NaN", "infinite" or "NaN and infinite": what the non-finite ``values`` hold."""
    found = [kind for kind, test in (("NaN", torch.isnan), ("infinite", torch.isinf)) if bool(test(values).any())]
    return " and ".join(found)


def nonfinite_parameter(module: nn.Module) -> str:
    """Where a module's parameters stand, for an error message: the first one holding NaN or
    ±inf, or that all are finite (then its inputs or its computation made the NaN)."""
    for name, param in module.named_parameters():
        if not bool(torch.isfinite(param.detach()).all()):
            return f"its parameter {name!r} holds {kinds(param.detach())} values"
    return "its parameters are all finite"


def member_seeds(seeds: list[int], bad: torch.Tensor, members: str = "members") -> str:
    """"the member of seed 3 (1 of 8 members)" or "the members of seeds 3, 5 (2 of 8 members)":
    the members flagged in ``bad`` (M,) named by their seeds, as ``members.csv`` lists them
    (``members``: what the M are, e.g. the members of one chunk "trained at once")."""
    named = [seeds[i] for i in bad.nonzero().flatten().tolist()]
    shown = ", ".join(str(s) for s in named[:10]) + (f" and {len(named) - 10} more" if len(named) > 10 else "")
    plural = "s" * (len(named) > 1)
    return f"the member{plural} of seed{plural} {shown} ({len(named)} of {len(seeds)} {members})"


def check_outputs(module: nn.Module, logits: torch.Tensor, stage: str) -> None:
    """InputError unless a model's ``stage`` ("val", "test") logits are finite: names the model,
    the first input whose logits are not, and whether its parameters are finite."""
    try:
        check_finite(logits.detach(), f"{type(module).__name__}: its {stage} outputs (logits)", unit="input")
    except InputError as err:
        raise InputError(f"{err}; {nonfinite_parameter(module)}") from None


def check_member_outputs(population, logits: torch.Tensor, stage: str) -> None:
    """InputError unless every member's ``stage`` logits (M, N, K) are finite: names the members
    whose are not by seed. The cost when all is finite: one sum."""
    if bool(torch.isfinite(logits.sum())):
        return
    bad = ~torch.isfinite(logits.detach()).flatten(1).all(dim=1)
    if bool(bad.any()):
        raise InputError(f"{type(population).__name__}: the {stage} outputs (logits) of "
                         f"{member_seeds(population.seeds, bad)} hold {kinds(logits.detach())} values; "
                         "expected finite values")  # fmt: skip


class FiniteTraining(pl.Callback):
    """Stops training at the first non-finite training loss (see the module's docstring)."""

    def __init__(self) -> None:
        # the last step's loss summed (on its device, not yet read), its loss, epoch, step and batch
        self._pending: tuple[torch.Tensor, torch.Tensor, int, int, int] | None = None

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._pending = None  # one instance serves every chunk of a population, one Trainer after another

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs, batch,
                           batch_idx: int) -> None:  # fmt: skip
        loss = outputs.get("member_loss", outputs.get("loss")) if isinstance(outputs, Mapping) else outputs
        self._check(trainer, pl_module)
        if isinstance(loss, torch.Tensor):  # global_step counts the optimiser steps taken, this one's included
            step = max(trainer.global_step - 1, 0)
            self._pending = (loss.detach().sum(), loss.detach(), trainer.current_epoch, step, batch_idx)

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._check(trainer, pl_module)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._check(trainer, pl_module)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._check(trainer, pl_module)

    def on_save_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict) -> None:
        self._check(trainer, pl_module)  # before the file is written: a diverged model is never saved

    def _check(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """InputError if the pending step's loss is not finite; the pending step is done with."""
        pending, self._pending = self._pending, None
        if pending is None or bool(torch.isfinite(pending[0])):
            return
        _, loss, epoch, step, batch = pending
        seeds = getattr(pl_module, "seeds", None)
        if loss.dim() == 1 and seeds is not None and len(seeds) == len(loss):
            bad = member_seeds(seeds, ~torch.isfinite(loss), "members trained at once")
            what = f"the training loss of {bad} is {kinds(loss)}"
        else:
            what = f"the training loss is {kinds(loss)}"
        raise InputError(f"{type(pl_module).__name__}: {what} at epoch {epoch}, step {step} (batch {batch} of the "
                         f"epoch; counted from 0); training stopped, {kept_checkpoint(trainer)}; expected finite "
                         "losses (a smaller learning rate, or gradient clipping, may keep it finite)")  # fmt: skip


def kept_checkpoint(trainer: pl.Trainer) -> str:
    """What stays of a stopped run: the last checkpoint the run's ``ModelCheckpoint`` wrote,
    which nothing after it overwrote, or that there is none."""
    callback = trainer.checkpoint_callback
    path = getattr(callback, "best_model_path", "") or getattr(callback, "last_model_path", "")
    if path and Path(path).is_file():
        return f"its last good checkpoint {path} is kept"
    return "no checkpoint was written before it"
