"""Ensembles over the loss landscape (Ley et al., §4-5), built by one registry from any
population: ``build_ensemble(population, strategy, members, curves, **options)``.

* ``average``: f(x) = (1/M) Σ_i softmax(g_i(x)), the mean member probability;
* ``majority``: the prediction is the majority vote (a vote share is piecewise
  constant, so its input gradient is zero almost everywhere);
* ``perturb``: each pre-trained member ω_i is perturbed m times with ε ~ N(0, σ²)
  on one layer's weights or biases (default: layer 1, the paper's choice); the n·m
  variants are averaged (a mean of the n "perturbed models", each a mean of m);
* ``connect``: n members form n/2 disjoint pairs joined by trained curves; models at
  t sampled on [0, 1] along every curve are averaged;
* ``combine``: the curve samples, each perturbed as in ``perturb``.

A population gives its members as one ensemble (``ensemble(indices, reduction)``) and the
models on curves between them (``curve_ensemble``), an ensemble its perturbed copy
(``perturbed``): ``MLPEnsemble`` (below) for tabular populations, else ``ImageEnsemble``.

``MLPEnsemble``: an ordinary ``nn.Module`` over M stacked MLPs (see ``stacked.py``), so
Captum and the evaluators explain it like one model, and all M members run in one batched
forward pass. ``forward`` gives the members' mean logit (B, K), ``probabilities`` the mean
probability (vote shares for ``majority``), which the predictions come from. ``explained_output``, the scalar
explainers differentiate, is for every ensemble the members' mean output of the explained class
(by default a binary table's positive class, else each input's class predicted by the
ensemble, ``interface.tabular_class``; any class as a target), logit or probability as the
population's ``explain_output`` (the same output a single model explains), so a gradient
explanation of the ensemble is the mean of its members' explanations: with ``logit`` (the default), what Ley et al.'s
reference code computes (why not the probability: docs/table1.md, "What is explained").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from torch import nn

from foundation.errors import InputError
from foundation.registry import Registry
from lightning_modules.interface import default_output, tabular_class
from lightning_modules.stacked import rows_per_pass, stacked_forward

Reduction = Literal["average", "majority"]
Part = Literal["weight", "bias"]
PREDICT_BLOCK_FLOATS = 2**24  # 64 MiB of float32 activations per piece of rows in ``predict``


class MLPEnsemble(nn.Module):
    """M stacked MLPs reduced to one classifier of K classes (see module docstring)."""

    def __init__(
        self,
        weights: Sequence[torch.Tensor],
        biases: Sequence[torch.Tensor],
        reduction: Reduction = "average",
        explain_output: Literal["logit", "probability"] = "logit",
    ) -> None:
        super().__init__()
        if reduction not in ("average", "majority"):
            raise InputError(f"option reduction={reduction!r}; expected 'average' or 'majority'")
        for k, (w, b) in enumerate(zip(weights, biases)):
            self.register_buffer(f"weight{k}", w.detach().clone())
            self.register_buffer(f"bias{k}", b.detach().clone())
        self.depth = len(weights)
        self.relus = nn.ModuleList([nn.ReLU() for _ in range(self.depth - 1)])  # modules, for DeepLift's hooks
        self.reduction = reduction
        self.explain_output = explain_output

    @property
    def stacked(self) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        return (
            [getattr(self, f"weight{k}") for k in range(self.depth)],
            [getattr(self, f"bias{k}") for k in range(self.depth)],
        )

    @property
    def size(self) -> int:
        return self.weight0.shape[0]

    @property
    def num_classes(self) -> int:
        return getattr(self, f"weight{self.depth - 1}").shape[1]

    @property
    def explained_class(self) -> int | str:
        """The model contract's default class (``lightning_modules.interface``)."""
        return tabular_class(self.num_classes)

    def member_logits(self, x: torch.Tensor) -> torch.Tensor:
        return stacked_forward(*self.stacked, x, activations=list(self.relus))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The members' mean logit (B, K)."""
        return self.member_logits(x).mean(0)

    def probabilities(self, x: torch.Tensor) -> torch.Tensor:
        """(B, K) mean member probabilities (vote shares for ``majority``)."""
        logits = self.member_logits(x)
        if self.reduction == "majority":
            return nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float().mean(0)
        return logits.softmax(-1).mean(0)

    def explained_output(self, x: torch.Tensor) -> torch.Tensor:
        """The default class's scalar per row, shape (B,)."""
        return default_output(self, x)

    def perturbed(self, n_perturb: int, sigma: float, layer: int = 0, part: Part = "weight",
                  seed: int = 0) -> "MLPEnsemble":  # fmt: skip
        """The average of ``n_perturb`` noisy copies of every member (``perturb_stack``)."""
        stacked = perturb_stack(*self.stacked, n_perturb, sigma, layer, part, seed)
        return MLPEnsemble(*stacked, "average", self.explain_output)

    @classmethod
    def on_curves(cls, curves: Sequence, ts: torch.Tensor) -> "MLPEnsemble":
        """The average of the MLPs at every t of ``ts`` on every curve (``MLPCurve``)."""
        per_curve = [curve.stacked_at(ts) for curve in curves]
        weights = [torch.cat([w[k] for w, _ in per_curve]) for k in range(len(per_curve[0][0]))]
        biases = [torch.cat([b[k] for _, b in per_curve]) for k in range(len(per_curve[0][1]))]
        return cls(weights, biases, "average", curves[0].explain_output)

    def subset(self, start: int, stop: int) -> "MLPEnsemble":
        """The ensemble of members start .. stop-1 (same reduction and output)."""
        weights, biases = self.stacked
        return MLPEnsemble(
            [w[start:stop] for w in weights], [b[start:stop] for b in biases], self.reduction, self.explain_output
        )

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        """Predicted labels; a tie goes to the highest class tied (a binary table's positive
        class). The rows go through in
        pieces whose widest activations (members x rows x width) hold at most
        ``PREDICT_BLOCK_FLOATS`` values: a 2,500-MLP ``combine`` ensemble took 15 GB for
        Adult's 6,513 test rows at once."""
        rows = rows_per_pass(self.size, max(w.shape[1] for w in self.stacked[0]), PREDICT_BLOCK_FLOATS)
        scores = torch.cat([self.probabilities(piece) for piece in x.split(rows)])
        return scores.shape[1] - 1 - scores.flip(1).argmax(1)


def perturb_stack(
    weights: list[torch.Tensor],
    biases: list[torch.Tensor],
    n_perturb: int,
    sigma: float,
    layer: int = 0,
    part: Part = "weight",
    seed: int = 0,
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Repeat each of the M stacked models ``n_perturb`` times (model i's variants are
    rows i*m .. i*m+m-1) and add N(0, σ²) noise to ``part`` of ``layer``."""
    if part not in ("weight", "bias"):
        raise InputError(f"option part={part!r}; expected 'weight' or 'bias'")
    if not 0 <= layer < len(weights):
        raise InputError(f"option layer={layer}; expected 0 <= layer < {len(weights)}")
    if n_perturb < 1 or sigma < 0:
        raise InputError(f"options n_perturb={n_perturb}, sigma={sigma}; expected n_perturb >= 1 and sigma >= 0")
    weights = [w.repeat_interleave(n_perturb, dim=0) for w in weights]
    biases = [b.repeat_interleave(n_perturb, dim=0) for b in biases]
    target = (weights if part == "weight" else biases)[layer]
    generator = torch.Generator(device=target.device).manual_seed(seed)
    target.add_(sigma * torch.randn(target.shape, generator=generator, device=target.device, dtype=target.dtype))
    return weights, biases


def curve_ts(n_t: int, t_seed: int | None) -> torch.Tensor:
    """The ``n_t`` values of t sampled on every curve: evenly spaced on [0, 1], or drawn
    from U(0, 1) with ``t_seed`` when it is given."""
    if n_t < 1:
        raise InputError(f"option n_t={n_t}; expected at least one point per curve")
    if t_seed is None:
        return torch.linspace(0.0, 1.0, n_t)
    return torch.rand(n_t, generator=torch.Generator().manual_seed(t_seed))


def disjoint_sets(size: int, n_models: int, n_sets: int, seed: int) -> list[list[int]]:
    """``n_sets`` disjoint sets of ``n_models`` member indices of a population of ``size``: the
    first n_sets · n_models entries of ``torch.randperm(size)`` drawn from ``seed``, in order."""
    if n_models * n_sets > size:
        raise InputError(
            f"{n_sets} disjoint sets of {n_models} models need {n_models * n_sets}; the population has {size}"
        )
    order = torch.randperm(size, generator=torch.Generator().manual_seed(seed)).tolist()
    return [order[k * n_models : (k + 1) * n_models] for k in range(n_sets)]


ENSEMBLES = Registry("ensemble", page="landscape.md")  # filled by the decorators below


@ENSEMBLES.register("average")
def average(population, members: Sequence[int], curves=None) -> nn.Module:
    """The members' mean probability (an ``MLPEnsemble`` or ``ImageEnsemble`` of ``reduction="average"``)."""
    return population.ensemble(members, "average")


@ENSEMBLES.register("majority")
def majority(population, members: Sequence[int], curves=None) -> nn.Module:
    """The members' majority vote (vote shares as probabilities; zero input gradient almost everywhere)."""
    return population.ensemble(members, "majority")


@ENSEMBLES.register("perturb")
def perturb(population, members: Sequence[int], curves=None, n_perturb: int = 50, sigma: float = 0.2,
            layer: int = 0, part: Part = "weight", seed: int = 0) -> nn.Module:  # fmt: skip
    """Every member perturbed ``n_perturb`` times by N(0, σ²) on one layer's weights or biases, averaged."""
    return population.ensemble(members).perturbed(n_perturb, sigma, layer, part, seed)


@ENSEMBLES.register("connect", needs=("curves",))
def connect(population, members: Sequence[int], curves: Sequence, n_t: int = 25, t_seed: int | None = None,
            loader=None) -> nn.Module:  # fmt: skip
    """Models at ``curve_ts(n_t, t_seed)`` on every curve between pairs of ``members``
    (curve j joins members[2j] and members[2j+1]); ``loader``: training batches over which an
    image network's BatchNorm statistics are recomputed at each t."""
    return population.curve_ensemble(curves, curve_ts(n_t, t_seed), members, loader)


@ENSEMBLES.register("combine", needs=("curves",))
def combine(population, members: Sequence[int], curves: Sequence, n_t: int = 25, n_perturb: int = 50,
            sigma: float = 0.2, layer: int = 0, part: Part = "weight", seed: int = 0, t_seed: int | None = None,
            loader=None) -> nn.Module:  # fmt: skip
    """The models on the curves (``connect``), each perturbed as in ``perturb``."""
    return connect(population, members, curves, n_t, t_seed, loader).perturbed(n_perturb, sigma, layer, part, seed)


def build_ensemble(population, strategy: str, members: Sequence[int], curves: Sequence | None = None,
                   **options) -> nn.Module:  # fmt: skip
    """The ensemble of ``strategy`` over ``members`` (indices) of a population of any kind
    (``PopulationMLP``, ``ImagePopulation``, ``ImageMembers``); ``connect`` and ``combine``
    take the ``curves`` between the members' pairs; ``options``: the strategy's."""
    if strategy not in ENSEMBLES:
        raise InputError(f"strategy {strategy!r}; expected one of {sorted(ENSEMBLES)}")
    if "curves" in ENSEMBLES[strategy].needs and not curves:
        raise InputError(f"strategy {strategy!r} needs the curves between the members' pairs")
    return ENSEMBLES[strategy](population, members, curves, **options)
