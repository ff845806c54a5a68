"""A population of tabular MLPs trained at once: an underspecification set in one module.

Ley et al. sample the underspecification set by training many MLPs (128-64-16,
ReLU, two logits; K here for a K-class table) that differ only in their initialisation seed s_i. Here the M
members' parameters are stacked along a member axis and trained together:

* every layer is one batched product over the member axis (``torch.baddbmm``);
  with the shared data order, layer 1 multiplies the same batch x (B, d), expanded
  without a copy, by every member's weights (why not one wide product:
  docs/tabular_population.md);
* the loss is the sum over members of each member's mean cross-entropy, so the
  gradient of member i's parameters is exactly its own gradient; the layers'
  backward pass is ``stacked_backward``, per member the products autograd forms
  for ``nn.Linear``, so the gradients agree bit for bit;
* one Adam step for all members equals M separate Adam steps (Adam is
  elementwise; ``mlp.adam`` says where it is fused and why that stays exact);
* gradient-norm clipping, which is not elementwise, is computed per member.

Member i is initialised exactly like ``MLPClassifier(seed=s_i)`` and extracts as
one (:meth:`PopulationMLP.member`). Why written by hand: docs/tabular_population.md
(speed: ``bench/population.py``).
"""

from __future__ import annotations

import torch
from torch import nn

from foundation.errors import InputError
from foundation.modality import ROWS
from lightning_modules.ensembles import MLPEnsemble, Reduction
from lightning_modules.interface import check_num_classes, default_output, tabular_class
from lightning_modules.mlp import (
    ExplainOutput,
    LossOn,
    MLPClassifier,
    adam,
    build_mlp,
    check_loss_on,
    classification_loss,
)
from lightning_modules.population_base import POPULATIONS, DataOrder, Population, check_data_order, seed_list
from lightning_modules.stacked import rows_per_pass, stack_linears, stacked_backward, stacked_forward

# On a CPU, an evaluation batch is run through the members in pieces whose widest
# activations (members x rows x width floats) take at most this many bytes: a quarter of the
# 32 MiB L3 cache of the 2-core bench machine. Speed is the reason: 200 Adult members
# on its 6,513 test rows took 0.47 s in 4,096-row batches and 0.18 s in such pieces.
EVAL_BLOCK_BYTES = 8 * 2**20


@POPULATIONS.register("PopulationMLP", modalities=("rows",))
class PopulationMLP(Population):
    """M seed-varied ``MLPClassifier`` members with stacked parameters.

    Args:
        in_features: number of inputs; linked from the datamodule.
        size: number of members M when ``seeds`` is not given (seeds first_seed .. first_seed+M-1).
        first_seed: the first initialisation seed.
        seeds: explicit initialisation seeds s_1..s_M (overrides size/first_seed).
        hidden, lr, weight_decay, explain_output, loss_on, num_classes: as for ``MLPClassifier``
            (a file written before ``num_classes`` was recorded holds two classes).
        data_order: ``"shared"``: every member sees the datamodule's batches (the paper);
            ``"per_member"``: member i sees its own shuffled order drawn from seed s_i, the
            order ``TabularDataModule(shuffle=True, data_order_seed=s_i)`` gives a single model.
        grad_clip_norm: clip each member's gradient to this total 2-norm (None: off).
        initialise: False leaves the parameters unset, for a copy whose weights are
            written right after (``subset``, ``concatenate``, loading a file).
    """

    TEST_LOG, CHUNKED, modality = ("test/member_acc", "_mean"), True, ROWS
    CURVES = "stacked"  # curves between members: trained together in one stack (protocols' population_sets)

    def __init__(
        self,
        in_features: int,
        size: int = 1000,
        first_seed: int = 0,
        seeds: list[int] | None = None,
        hidden: tuple[int, ...] = (128, 64, 16),
        lr: float = 1e-3,
        weight_decay: float = 0.0,
        explain_output: ExplainOutput = "logit",
        loss_on: LossOn = "logits",
        data_order: DataOrder = "shared",
        grad_clip_norm: float | None = None,
        initialise: bool = True,
        num_classes: int = 2,
    ) -> None:
        super().__init__()
        check_num_classes(num_classes)
        check_data_order(data_order)
        check_loss_on(loss_on)
        seeds = seed_list(size, first_seed, seeds)
        self.save_hyperparameters(ignore=["size", "first_seed", "initialise"])
        self.hparams.seeds = seeds
        self.automatic_optimization = False
        self.seeds = seeds
        # Layer k: weights (M, out_k, in_k) (nn.Linear's weight per member) and biases (M, 1, out_k).
        if initialise:
            weights, biases = stack_linears([build_mlp(in_features, tuple(hidden), num_classes, 0.0, s) for s in seeds])
        else:
            widths = [in_features, *hidden, num_classes]
            weights = [torch.empty(len(seeds), o, i) for i, o in zip(widths[:-1], widths[1:])]
            biases = [torch.empty(len(seeds), 1, o) for o in widths[1:]]
        self.weights = nn.ParameterList([nn.Parameter(w) for w in weights])
        self.biases = nn.ParameterList([nn.Parameter(b) for b in biases])
        self._order_generators: list[torch.Generator] | None = None
        self._epoch_order: torch.Tensor | None = None

    # --- forward --------------------------------------------------------------
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits of every member, shape (M, B, K), for x of shape (B, d) (shared) or (M, B, d)."""
        return stacked_forward(self.weights, self.biases, x)

    @property
    def explained_class(self) -> int | str:
        """The model contract's default class (``lightning_modules.interface``): a multi-class
        population's members all explain the class their mean probability predicts."""
        return tabular_class(self.hparams.num_classes)

    def explained_output(self, x: torch.Tensor) -> torch.Tensor:
        """The default class's logit or probability for every member, shape (M, B)."""
        return default_output(self, x)

    # --- members --------------------------------------------------------------
    def member_initialisation(self, i: int) -> MLPClassifier:
        """Member i as it started: ``MLPClassifier`` initialised with seed s_i."""
        hp = self.hparams
        return MLPClassifier(
            in_features=hp.in_features, hidden=tuple(hp.hidden), lr=hp.lr, weight_decay=hp.weight_decay,
            seed=self.seeds[i], explain_output=hp.explain_output, loss_on=hp.loss_on, num_classes=hp.num_classes,
        )  # fmt: skip

    def member(self, i: int) -> MLPClassifier:
        """Member i as a plain ``MLPClassifier`` with the same weights."""
        model = self.member_initialisation(i)
        linears = [mod for mod in model.net if isinstance(mod, nn.Linear)]
        with torch.no_grad():
            for lin, w, b in zip(linears, self.weights, self.biases):
                lin.weight.copy_(w[i])
                lin.bias.copy_(b[i, 0])
        return model

    @classmethod
    def from_file(cls, hparams: dict, seeds: list[int]) -> "PopulationMLP":
        return cls(**hparams, seeds=seeds, initialise=False)

    def ensemble(self, indices: list[int], reduction: Reduction = "average") -> MLPEnsemble:
        """Members ``indices`` as one ``MLPEnsemble`` with their current weights."""
        index = torch.as_tensor(list(indices))
        weights, biases = [w.detach()[index] for w in self.weights], [b.detach()[index] for b in self.biases]
        return MLPEnsemble(weights, biases, reduction, self.hparams.explain_output)

    @staticmethod
    def curve_ensemble(curves: list, ts: torch.Tensor, members: list[int], loader=None) -> MLPEnsemble:
        """The MLPs at every t of ``ts`` on every curve (``MLPEnsemble.on_curves``): they
        are whole MLPs without BatchNorm, so neither ``members`` nor ``loader`` is needed."""
        return MLPEnsemble.on_curves(curves, ts)

    def init_kwargs(self) -> dict:
        """The constructor arguments other than the seeds (plain types, for files and copies)."""
        names = ["in_features", "hidden", "lr", "weight_decay", "explain_output", "loss_on", "data_order",
                 "grad_clip_norm", "num_classes"]  # fmt: skip
        return {n: list(self.hparams[n]) if n == "hidden" else self.hparams[n] for n in names}

    def subset(self, indices: list[int]) -> "PopulationMLP":
        """A population of members ``indices`` with their current weights."""
        part = PopulationMLP(**self.init_kwargs(), seeds=[self.seeds[i] for i in indices], initialise=False)
        index = torch.as_tensor(indices)
        with torch.no_grad():
            for mine, theirs in zip(self.parameters(), part.parameters()):
                theirs.copy_(mine[index])
        return part

    @classmethod
    def concatenate(cls, parts: list["PopulationMLP"]) -> "PopulationMLP":
        """One population holding the members of ``parts`` in order (same hyperparameters)."""
        whole = cls(**parts[0].init_kwargs(), seeds=[s for part in parts for s in part.seeds], initialise=False)
        with torch.no_grad():
            for param, *pieces in zip(whole.parameters(), *(part.parameters() for part in parts)):
                param.copy_(torch.cat(pieces))
        return whole

    # --- training -------------------------------------------------------------
    def configure_optimizers(self) -> torch.optim.Optimizer:
        hp = self.hparams
        return adam(self.parameters(), hp.lr, hp.weight_decay, members=self.size)

    def on_train_start(self) -> None:
        if self.hparams.data_order == "per_member" and self.trainer.datamodule.shuffle:
            raise InputError(
                "option data_order='per_member' draws each member's order itself; expected the datamodule "
                "option shuffle=false"
            )

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        if self._order_generators is not None:  # so a resumed run draws the same orders
            checkpoint["member_order_states"] = [g.get_state() for g in self._order_generators]

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        states = checkpoint.get("member_order_states")
        if states is not None:
            self._order_generators = [torch.Generator() for _ in states]
            for g, state in zip(self._order_generators, states):
                g.set_state(state)

    def on_train_epoch_start(self) -> None:
        n, dev = len(self.trainer.datamodule.train_tensors[1]), self.device
        self._stats = torch.zeros(3, self.size, device=dev)  # loss sum, correct, rows
        if self.hparams.data_order == "per_member":
            if self._order_generators is None:
                self._order_generators = [torch.Generator().manual_seed(s) for s in self.seeds]
            # The order RandomSampler(generator=Generator().manual_seed(s_i)) gives member i alone.
            self._epoch_order = torch.stack([torch.randperm(n, generator=g) for g in self._order_generators]).to(dev)
            self._train_rows = tuple(t.to(dev) for t in self.trainer.datamodule.train_tensors)  # once per epoch

    def _member_batch(self, batch, batch_idx: int) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = batch
        if self._epoch_order is None:
            return x, y.expand(self.size, -1)
        start = batch_idx * self.trainer.datamodule.batch_size
        idx = self._epoch_order[:, start : start + len(y)]
        x_all, y_all = self._train_rows
        return x_all[idx], y_all[idx]

    def training_step(self, batch, batch_idx: int) -> dict:
        """One Adam step of every member; returns each member's loss (``member_loss``)."""
        x, y = self._member_batch(batch, batch_idx)
        with torch.no_grad():
            saved: list[torch.Tensor] = []
            logits = stacked_forward(self.weights, self.biases, x, saved=saved)
        # The loss's gradient with respect to the logits through autograd (so it is the very
        # computation a model alone gets); the layers' backward by hand (``stacked_backward``).
        logits.requires_grad_(True)
        loss = classification_loss(logits.flatten(0, 1), y.reshape(-1), self.hparams.loss_on, "none")
        loss = loss.view(self.size, -1)
        member_loss = loss.mean(dim=1)
        (grad_logits,) = torch.autograd.grad(member_loss.sum(), logits)
        with torch.no_grad():
            weight_grads = [self._grad_buffer(w) for w in self.weights]
            bias_grads = [self._grad_buffer(b) for b in self.biases]
            stacked_backward(self.weights, saved, grad_logits, weight_grads, bias_grads)
            if self.hparams.grad_clip_norm is not None:
                self._clip_per_member(self.hparams.grad_clip_norm)
            self.optimizers().step()
            rows = y.shape[1]
            self._stats[0] += member_loss.detach() * rows
            self._stats[1] += (logits.argmax(dim=-1) == y).sum(dim=1)
            self._stats[2] += rows
        return {"member_loss": member_loss.detach()}

    @staticmethod
    def _grad_buffer(param: nn.Parameter) -> torch.Tensor:
        """``param.grad``, allocated once; every step overwrites it whole."""
        if param.grad is None:
            param.grad = torch.empty_like(param)
        return param.grad

    def _clip_per_member(self, max_norm: float) -> None:
        """``torch.nn.utils.clip_grad_norm_`` applied to each member separately."""
        grads = [p.grad for p in self.parameters()]
        sq = sum(g.pow(2).reshape(self.size, -1).sum(dim=1) for g in grads)
        coef = (max_norm / (sq.sqrt() + 1e-6)).clamp(max=1.0).view(-1, 1, 1)
        for g in grads:
            g.mul_(coef)

    def on_train_epoch_end(self) -> None:
        loss, acc = self._stats[0] / self._stats[2], self._stats[1] / self._stats[2]
        self.log_spread("train/member_loss", "_mean", loss)
        self.log_spread("train/member_acc", "_mean", acc)

    def _eval_rows(self) -> int:
        """Rows per forward pass when evaluating: all of them on a GPU; on a CPU as many as
        keep one layer's activations for all members within ``EVAL_BLOCK_BYTES``."""
        if self.device.type != "cpu":
            return 2**62
        return rows_per_pass(self.size, max(self.hparams.hidden), EVAL_BLOCK_BYTES // 4)
