"""A population of image classifiers that differ only in their seed, trained at once.

Watson et al. 2022 (§3) train K copies of one architecture that differ in their seed s_i
(and in further runs in one hyperparameter). Here member i is a network of
:func:`create_image_model` initialised exactly like
``ImageClassifier(seed=s_i)`` and trained with that class's optimiser, schedule, warm-up,
label smoothing and weight-decay groups. Optionally one hyperparameter varies per member:

* ``member_lrs``: member i's peak learning rate lr_i;
* ``data_order="per_member"``: member i sees the batches (order and augmentation) that
  the datamodule gives a model alone when its option ``seed`` is s_i.

A batch size per member cannot be stacked (members' batches must have one shape): train
such members one after another, as ``ImageClassifier`` runs, and gather them with
:meth:`ImagePopulation.from_classifiers`.

The loss is L = Σ_i L_i, L_i member i's mean cross-entropy (as ``ImageClassifier``
computes it), so ∂L/∂θ_i is member i's own gradient; SGD or AdamW with two parameter
groups per member (decay / no decay, each with lr_i) is elementwise, so one step equals
K separate steps. Gradient clipping by the Trainer would clip the population's norm and
is refused.

The K forward and backward passes are computed in one of two ways (``stacking``):

* ``"vmap"``: every step the members' parameters and buffers are stacked along a leading
  member axis with ``torch.stack`` and the network is called once for all members with
  ``torch.func.functional_call`` under ``torch.func.vmap`` (a convolution over stacked
  weights becomes one grouped convolution); the members' own parameters stay the leaves
  the optimiser steps. BatchNorm runs in training mode per member, its running statistics
  updated in the stacked buffers and copied back to the member after the step.
* ``"loop"``: the members one after another within the same step (same batch, one
  optimiser step), each member's backward pass right after its forward pass.
* ``"auto"``: ``vmap`` on a GPU, ``loop`` on a CPU, where stacking was measured slower
  (``bench/image_population.py``; why: docs/image_population.md, "Speed").

Exactness: ``"loop"`` computes a member as it is alone, operation for operation;
``"vmap"`` differs by the grouped convolutions' summation order (figures, and why vmap is
written this way: docs/image_population.md, "How" and "Tolerance").
"""

from __future__ import annotations

import copy
from typing import Literal

import torch
from torch import nn
from torch.func import functional_call, vmap
from torch.nn import functional as F

from foundation.errors import InputError
from lightning_modules.finite import check_member_outputs
from lightning_modules.image_classifier import (
    ImageClassifier,
    Optimizer,
    Schedule,
    at_least_float32,
    configure_image_optimizer,
    parameter_groups,
)
from lightning_modules.image_ensembles import ImageNetworks
from lightning_modules.population_base import POPULATIONS, DataOrder, Population, check_data_order, seed_list

Stacking = Literal["auto", "vmap", "loop"]
STACKINGS = ("auto", "vmap", "loop")


@POPULATIONS.register("ImagePopulation", modalities=("images",))
class ImagePopulation(Population, ImageNetworks):
    """K ``ImageClassifier`` networks of one architecture, seeds s_1..s_K, trained at once.

    Args:
        arch, num_classes, in_channels, small_input_stem, optimizer, lr, weight_decay,
            schedule, warmup_epochs, label_smoothing, channels_last: as for
            ``ImageClassifier``, shared by every member.
        size: number of members K when ``seeds`` is not given (seeds first_seed .. first_seed+K-1).
        first_seed: the first initialisation seed.
        seeds: explicit initialisation seeds (overrides size / first_seed).
        member_lrs: one peak learning rate per member (overrides ``lr``).
        data_order: ``"shared"``: every member sees the datamodule's batches;
            ``"per_member"``: member i sees the batches the datamodule gives with ``seed=s_i``.
        stacking: ``"vmap"``, ``"loop"`` or ``"auto"`` (see the module's docstring).

    ``forward(x)`` gives every member's logits, (K, N, num_classes), for images x of shape
    (N, C, H, W) shared by all members or (K, N, C, H, W), one batch per member.

    Logs ``train/loss`` and ``train/acc`` (means over the members), ``val/acc`` and, per
    test, ``test/acc`` (the members' mean) with ``test/acc_std``, ``test/acc_min`` and
    ``test/acc_max``; after a test ``member_test_acc`` holds each member's accuracy (K,).
    """

    TEST_LOG = ("test/acc", "")

    def __init__(
        self,
        arch: str = "small_cnn",
        num_classes: int = 10,
        in_channels: int = 3,
        small_input_stem: bool = False,
        size: int = 10,
        first_seed: int = 0,
        seeds: list[int] | None = None,
        optimizer: Optimizer = "sgd",
        lr: float = 0.1,
        member_lrs: list[float] | None = None,
        weight_decay: float = 5e-4,
        schedule: Schedule = "onecycle",
        warmup_epochs: float = 1.0,
        label_smoothing: float = 0.0,
        channels_last: bool = False,
        data_order: DataOrder = "shared",
        stacking: Stacking = "auto",
    ) -> None:
        super().__init__()
        seeds = seed_list(size, first_seed, seeds)
        if member_lrs is not None and (len(member_lrs) != len(seeds) or not all(v > 0 for v in member_lrs)):
            raise InputError(f"option member_lrs={list(member_lrs)}; expected {len(seeds)} positive numbers")
        check_data_order(data_order)
        if stacking not in STACKINGS:
            raise InputError(f"option stacking={stacking!r}; expected one of {list(STACKINGS)}")
        self.save_hyperparameters(ignore=["size", "first_seed"])
        self.hparams.seeds = seeds
        self.seeds = seeds
        self.lrs = list(member_lrs) if member_lrs is not None else [lr] * len(seeds)
        # ImageClassifier checks the shared options (optimizer, schedule, lr, ...) once per member
        self.nets = nn.ModuleList(ImageClassifier(**self.member_kwargs(i)).net for i in range(len(seeds)))
        self._member_batches = None  # per-member data order: each member's batch iterator this epoch

    # --- members --------------------------------------------------------------
    def member_kwargs(self, i: int) -> dict:
        """``ImageClassifier`` arguments of member i (seed s_i, learning rate lr_i)."""
        names = ["arch", "num_classes", "in_channels", "small_input_stem", "optimizer", "weight_decay", "schedule",
                 "warmup_epochs", "label_smoothing", "channels_last"]  # fmt: skip
        return {**{n: self.hparams[n] for n in names}, "seed": self.seeds[i], "lr": self.lrs[i]}

    def member(self, i: int) -> ImageClassifier:
        """Member i as a plain ``ImageClassifier`` with the same weights and buffers, on the
        population's device and in its dtype."""
        if not 0 <= i < self.size:
            raise InputError(f"member index {i}: expected 0 <= index < {self.size}")
        like = next(self.nets[i].parameters())
        model = ImageClassifier(**self.member_kwargs(i)).to(device=like.device, dtype=like.dtype)
        model.net.load_state_dict(self.nets[i].state_dict())
        return model

    def init_kwargs(self) -> dict:
        """The constructor arguments other than the seeds (plain types, for files and copies)."""
        names = ["arch", "num_classes", "in_channels", "small_input_stem", "optimizer", "lr", "member_lrs",
                 "weight_decay", "schedule", "warmup_epochs", "label_smoothing", "channels_last", "data_order",
                 "stacking"]  # fmt: skip
        return {n: self.hparams[n] for n in names}

    @classmethod
    def from_classifiers(cls, models: list[ImageClassifier], **options) -> "ImagePopulation":
        """A population of ``ImageClassifier`` models trained apart (one after another, e.g. with a
        batch size each): same architecture and classes, distinct seeds; their learning rates
        become ``member_lrs``. ``options``: the population's own (``stacking``, ``data_order``)."""
        first = models[0].hparams
        shared = ["arch", "num_classes", "in_channels", "small_input_stem"]
        for m in models[1:]:
            differ = [n for n in shared if m.hparams[n] != first[n]]
            if differ:
                raise InputError(f"models: {differ} differ between members; expected one architecture")
        names = [*shared, "optimizer", "weight_decay", "schedule", "warmup_epochs", "label_smoothing",
                 "channels_last"]  # fmt: skip
        population = cls(**{n: first[n] for n in names}, seeds=[m.hparams.seed for m in models],
                         lr=first.lr, member_lrs=[m.hparams.lr for m in models], **options)  # fmt: skip
        for net, m in zip(population.nets, models):
            net.load_state_dict(m.net.state_dict())
        return population

    # --- forward --------------------------------------------------------------
    @property
    def stacks(self) -> bool:
        """Whether the members are computed stacked (vmap) rather than one after another."""
        return self.hparams.stacking == "vmap" or (self.hparams.stacking == "auto" and self.device.type == "cuda")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits (K, N, num_classes) of images (N, C, H, W) or (K, N, C, H, W)."""
        shared = x.dim() == 4
        if not self.stacks:
            if self.hparams.channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            return torch.stack([net(x if shared else x[i]) for i, net in enumerate(self.nets)])
        names = [n for n, _ in self.nets[0].named_parameters()]
        buffer_names = [n for n, _ in self.nets[0].named_buffers()]
        members = [(dict(net.named_parameters()), dict(net.named_buffers())) for net in self.nets]
        params = {n: torch.stack([p[n] for p, _ in members]) for n in names}
        with torch.no_grad():
            buffers = {n: torch.stack([b[n] for _, b in members]) for n in buffer_names}

        def one(p: dict, b: dict, images: torch.Tensor) -> torch.Tensor:
            return functional_call(self.nets[0], (p, b), (images,))

        logits = vmap(one, in_dims=(0, 0, None if shared else 0))(params, buffers, x)
        if self.training:  # BatchNorm updated the stacked running statistics in place
            with torch.no_grad():
                for n in buffer_names:
                    for i, (_, b) in enumerate(members):
                        b[n].copy_(buffers[n][i])
        return logits

    # --- training -------------------------------------------------------------
    def configure_optimizers(self):
        groups = [
            {**group, "lr": lr}
            for net, lr in zip(self.nets, self.lrs)
            for group in parameter_groups(net, self.hparams.weight_decay)
        ]
        return configure_image_optimizer(groups, self)

    def on_train_start(self) -> None:
        if self.trainer.gradient_clip_val:
            raise InputError(
                f"option trainer.gradient_clip_val={self.trainer.gradient_clip_val}: it would clip the whole "
                "population's gradient norm, not each member's; expected none for an ImagePopulation"
            )
        if self.hparams.data_order == "per_member" and not hasattr(self.trainer.datamodule, "seed"):
            raise InputError(
                "option data_order='per_member' needs an image datamodule with the option seed (its batch order)"
            )

    def on_train_epoch_start(self) -> None:
        self._member_batches = None
        if self.hparams.data_order == "per_member":
            self._member_batches = [iter(self._member_loader(s)) for s in self.seeds]

    def _member_loader(self, seed: int):
        """The training loader a model alone gets from the datamodule with ``seed``, at this epoch."""
        data = copy.copy(self.trainer.datamodule)  # shallow: shares the decoded images
        data.seed = seed
        loader = data.train_dataloader()
        loader.sampler.set_epoch(self.current_epoch)  # what Lightning does for the datamodule's own loader
        return loader

    def on_before_batch_transfer(self, batch, dataloader_idx: int):
        """Training with ``data_order="per_member"``: each member's own batch, stacked as images
        (K, N, C, H, W) and labels (K, N), instead of the datamodule's (which then only counts
        the steps). Drawn here, outside the training step, inside which a Trainer's
        ``precision="64-true"`` makes float64 the default dtype and so changes the draws of
        the augmentation's flips."""
        if self._member_batches is None or not self.trainer.training:
            return batch
        pairs = [next(it) for it in self._member_batches]
        x, y = torch.stack([x for x, _ in pairs]), torch.stack([y for _, y in pairs])
        return self.trainer.precision_plugin.convert_input(x), y  # as Lightning converts its own batches

    def _member_losses(self, logits: torch.Tensor, y: torch.Tensor, smoothing: float) -> torch.Tensor:
        """(K,) mean cross-entropy per member, each computed as ``ImageClassifier`` computes it."""
        return torch.stack([F.cross_entropy(lg, t, label_smoothing=smoothing) for lg, t in zip(logits, y)])

    def optimizer_zero_grad(self, epoch: int, batch_idx: int, optimizer) -> None:
        """Nothing: ``training_step`` zeroes the gradients first (Lightning would zero them
        after the step, where the loop's members already have theirs)."""

    def training_step(self, batch, batch_idx: int) -> dict:
        """The summed loss of one step of every member, and each member's (``member_loss``)."""
        x, y = batch
        y = y if y.dim() == 2 else y.expand(self.size, -1)
        self.optimizers().zero_grad()
        if self.stacks or self.trainer.world_size > 1:
            logits = at_least_float32(self(x))
            losses = self._member_losses(logits, y, self.hparams.label_smoothing)
            correct = logits.argmax(dim=-1) == y
        else:
            losses, correct = self._member_by_member(x, y)
        self.log_dict({"train/loss": losses.mean(), "train/acc": correct.float().mean()}, prog_bar=True,
                      on_step=False, on_epoch=True, batch_size=y.shape[1])  # fmt: skip
        return {"loss": losses.sum(), "member_loss": losses.detach()}

    def _member_by_member(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The loop on one process: each member's forward pass, loss and backward pass in
        turn, so only one member's activations are held at a time, as when it trains alone
        (holding all K members' made the loop 2.4x slower than K fits on the 2-core CPU).
        Returns the members' losses, all but the last detached (Lightning's backward of
        their sum is the last member's backward), and their correct predictions (K, N)."""
        if self.hparams.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        losses, correct = [], []
        for i, net in enumerate(self.nets):
            logits = at_least_float32(net(x if x.dim() == 4 else x[i]))
            loss = F.cross_entropy(logits, y[i], label_smoothing=self.hparams.label_smoothing)
            if i < self.size - 1:
                self.trainer.strategy.backward(loss, None)
                loss = loss.detach()
            losses.append(loss)
            correct.append(logits.detach().argmax(dim=-1) == y[i])
        return torch.stack(losses), torch.stack(correct)

    def validation_step(self, batch, batch_idx: int) -> None:
        x, y = batch
        logits = at_least_float32(self(x))
        check_member_outputs(self, logits, "val")
        y = y.expand(self.size, -1)
        loss = self._member_losses(logits, y, 0.0).mean()
        acc = (logits.argmax(dim=-1) == y).float().mean()
        self.log_dict({"val/loss": loss, "val/acc": acc}, prog_bar=True, on_epoch=True, sync_dist=True,
                      batch_size=y.shape[1])  # fmt: skip
