"""The torchmetrics base of the fidelity metrics and the agreement metric, ``MeanOverInputs``:
the mean over inputs of a per-input score, states ``total`` (float64), ``count`` and
``left_out`` (undefined scores), all ``dist_reduce_fx="sum"``; the fidelity metrics' one
``update(model, x, maps, target=None, explain_fn=None, **inputs)`` (``inputs``: ``truth`` for the
metrics against a ground truth); a result that is not finite (no
defined score) is an ``InputError`` naming the metric (``finite_result``). A metric holds no model nor
``explain_fn`` (they would become submodules), and every update draws its random numbers
from the metric's ``seed`` afresh, so two updates equal the mean of two functional calls.
docs/fidelity_metrics.md explains it."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torchmetrics import Metric

from foundation.errors import InputError


class MeanOverInputs(Metric):
    """The mean over inputs of ``scores``, (N, *shape) per ``update``; ``compute`` is
    ``total / count``. ``options`` are the keyword options of the metric's functional core."""

    full_state_update = False
    leaves_out_undefined = False

    def __init__(self, options: dict, shape: tuple[int, ...] = (), **kwargs) -> None:
        super().__init__(**kwargs)
        self.options = options
        self.add_state("total", torch.zeros(shape, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("count", torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")
        self.add_state("left_out", torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")

    def scores(self, model: nn.Module | None, x: torch.Tensor, maps: torch.Tensor, target,
               explain_fn: Callable | None, **inputs) -> torch.Tensor:  # fmt: skip
        """The scores (N, *shape) of inputs x with their maps; NaN where undefined. ``inputs``:
        what a metric reads beyond them (``truth``, the ground truth of the localisation metrics)."""
        raise NotImplementedError

    def add(self, scores: torch.Tensor) -> None:
        """Adds per-input scores (N, *shape) to the states."""
        if self.leaves_out_undefined:
            defined = ~scores.isnan().flatten(1).any(1) if scores.dim() > 1 else ~scores.isnan()
            self.left_out += int((~defined).sum())
            scores = scores[defined]
        self.total += scores.double().sum(0).to(self.total.device)
        self.count += len(scores)

    def update(self, model: nn.Module | None, x: torch.Tensor, maps: torch.Tensor, target=None,
               explain_fn: Callable | None = None, **inputs) -> None:  # fmt: skip
        self.add(self.scores(model, x, maps, target, explain_fn, **inputs))

    def compute(self) -> torch.Tensor:
        return finite_result(self, self.total / self.count, type(self).__name__)


def finite_result(metric: Metric, value: torch.Tensor, name: str) -> torch.Tensor:
    """``value``, the result of ``metric`` (a ``MeanOverInputs``) named ``name``, refused with
    an ``InputError`` where not finite: a mean over no defined score (every input left out),
    or scores that overflow."""
    if bool(torch.isfinite(value).all()):
        return value
    bad = int((~torch.isfinite(value)).sum())
    raise InputError(f"metric {name!r}: {bad} of {value.numel()} result value(s) not finite (the mean of "
                     f"{int(metric.count)} score(s), {int(metric.left_out)} undefined left out); expected a finite "
                     "mean: a score defined on at least one input")  # fmt: skip


def require_explain_fn(explain_fn: Callable | None, metric: Metric) -> Callable:
    """``explain_fn``, refused when missing: the metric explains perturbed inputs."""
    if not callable(explain_fn):
        raise InputError(f"{type(metric).__name__}.update needs explain_fn=<a function (inputs, target) -> maps>; "
                         f"got {explain_fn!r}")  # fmt: skip
    return explain_fn
