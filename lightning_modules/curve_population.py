"""Many mode-connecting curves between tabular MLPs, trained at once.

Ley et al.'s Table 1 protocol joins 2 x 50 disjoint pairs of members by curves per
dataset; trained one after another under their own ``Trainer`` that is hours of
small steps on a CPU. Here the C curves' control points (ω₁, θ, ω₂) are stacked
along a curve axis like a population's members (``PopulationMLP``): every step
draws one t_c per curve from the curve's own generator, forms the C networks
w_c = c₁(t_c) ω₁ + c_θ(t_c) θ + c₂(t_c) ω₂ (the order ``CurveModel`` uses), runs
them as one stacked MLP (``stacked_forward``/``stacked_backward``) and hands each
control point its gradient c_k(t_c) ∂L/∂w_c. The loss is the sum over curves of
each curve's mean cross-entropy plus (λ/2)‖w_c‖², so curve c trained here equals
``MLPCurve`` trained alone with the same t_seed, bit for bit (a test; why written by
hand: docs/tabular_population.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import pytorch_lightning as pl
import torch
from torch import nn

from foundation.errors import InputError
from lightning_modules.allocator import retain_freed_memory
from lightning_modules.curve_model import CurveKind, curve_coefficients, curve_layers
from lightning_modules.curves import MLPCurve
from lightning_modules.mlp import LossOn, MLPClassifier, adam, check_loss_on, classification_loss
from lightning_modules.stacked import stack_linears, stacked_backward, stacked_forward

POINTS = 3  # ω₁ (start), θ (bend), ω₂ (end)


class MLPCurvePopulation(pl.LightningModule):
    """C curves, each between two MLPs, stacked.

    Args:
        starts, ends: the end-point networks of each curve (``MLPClassifier``s). Mode
            ``fixed``: they stay fixed (Garipov). Mode ``trained``: they are only the
            initialisations (``MLPClassifier(seed=s)``) and are trained along the curve.
        t_seeds: per curve, the seed of its generator of training t's.
        kind, mode, lr, weight_decay, explain_output, loss_on: as for ``MLPCurve``.
    """

    def __init__(
        self,
        starts: Sequence[MLPClassifier],
        ends: Sequence[MLPClassifier],
        t_seeds: Sequence[int],
        kind: CurveKind = "bezier",
        mode: Literal["fixed", "trained"] = "fixed",
        lr: float = 1e-3,
        weight_decay: float = 0.0,
        explain_output: Literal["logit", "probability"] = "logit",
        loss_on: LossOn = "logits",
    ) -> None:
        super().__init__()
        if not (len(starts) == len(ends) == len(t_seeds)) or not starts:
            raise InputError(
                f"{len(starts)} start(s), {len(ends)} end(s), {len(t_seeds)} t_seed(s); expected as many of each, "
                "at least one"
            )
        if mode not in ("fixed", "trained"):
            raise InputError(f"option mode={mode!r}; expected 'fixed' or 'trained'")
        curve_coefficients(kind, 0.0)  # validates kind
        self.kind, self.mode, self.lr, self.weight_decay = kind, mode, lr, weight_decay
        check_loss_on(loss_on)
        self.explain_output, self.loss_on = explain_output, loss_on
        self.template = starts[0].hparams  # architecture and hyperparameters of the end points
        self.t_seeds = list(t_seeds)
        self.automatic_optimization = False
        w1, b1 = stack_linears(starts)
        w2, b2 = stack_linears(ends)
        trained = mode == "trained"
        # points[p][k]: control point p of layer k, shape (C, out, in); biases (C, 1, out)
        self.weight_points = nn.ModuleList()
        self.bias_points = nn.ModuleList()
        for first, second, target in ((w1, w2, self.weight_points), (b1, b2, self.bias_points)):
            for a, b in zip(first, second):
                target.append(
                    nn.ParameterList([
                        nn.Parameter(a.clone(), requires_grad=trained),
                        nn.Parameter((a + b) / 2),
                        nn.Parameter(b.clone(), requires_grad=trained),
                    ])
                )  # fmt: skip
        self.t_generators = [torch.Generator().manual_seed(s) for s in self.t_seeds]

    @property
    def size(self) -> int:
        return len(self.t_seeds)

    def stacked_at(self, t: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Networks w_c(t_c) for one t per curve (shape (C,)), stacked."""
        return self._mix(curve_coefficients(self.kind, t.cpu()).to(self.device))

    def _mix(self, coefficients: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Σ_k c_k ω_k per curve for coefficients (C, 3), in ``CurveModel``'s order."""
        c = coefficients.view(self.size, POINTS, 1, 1).unbind(1)

        def mix(points: nn.ParameterList) -> torch.Tensor:
            return c[0] * points[0] + c[1] * points[1] + c[2] * points[2]

        return [mix(p) for p in self.weight_points], [mix(p) for p in self.bias_points]

    # --- training -------------------------------------------------------------------
    def configure_optimizers(self) -> torch.optim.Optimizer:
        return adam([p for p in self.parameters() if p.requires_grad], self.lr, 0.0, members=self.size)

    def on_fit_start(self) -> None:
        if self.device.type == "cpu":
            retain_freed_memory()

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["t_generator_states"] = [g.get_state() for g in self.t_generators]

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        for g, state in zip(self.t_generators, checkpoint.get("t_generator_states", [])):
            g.set_state(state)

    def training_step(self, batch, batch_idx: int) -> None:
        x, y = batch
        t = torch.stack([torch.rand((), generator=g) for g in self.t_generators])
        coefficients = curve_coefficients(self.kind, t).to(self.device)  # (C, 3)
        with torch.no_grad():
            weights, biases = self._mix(coefficients)
            saved: list[torch.Tensor] = []
            logits = stacked_forward(weights, biases, x, saved=saved)
        logits.requires_grad_(True)
        loss = classification_loss(logits.flatten(0, 1), y.expand(self.size, -1).reshape(-1), self.loss_on, "none")
        curve_loss = loss.view(self.size, -1).mean(dim=1)
        (grad_logits,) = torch.autograd.grad(curve_loss.sum(), logits)
        with torch.no_grad():
            weight_grads = [torch.empty_like(w) for w in weights]
            bias_grads = [torch.empty_like(b) for b in biases]
            stacked_backward(weights, saved, grad_logits, weight_grads, bias_grads)
            for points, w, g in zip([*self.weight_points, *self.bias_points], [*weights, *biases],
                                    [*weight_grads, *bias_grads]):  # fmt: skip
                if self.weight_decay:
                    # d/dw of (λ/2)‖w‖², formed as autograd forms it for CurveModel: (λ/2)·(2w)
                    g.add_((0.5 * self.weight_decay) * (2 * w))
                for k, point in enumerate(points):
                    if point.requires_grad:
                        point.grad = g * coefficients[:, k].view(-1, *[1] * (g.dim() - 1))
            self.optimizers().step()
        self.log("train/loss", curve_loss.detach().mean(), on_step=False, on_epoch=True)

    # --- single curves ----------------------------------------------------------------
    def curve(self, i: int) -> MLPCurve:
        """Curve i as a plain ``MLPCurve`` with the same control points."""
        hp = self.template
        curve = MLPCurve(
            in_features=hp.in_features, kind=self.kind, mode=self.mode, hidden=tuple(hp.hidden), lr=self.lr,
            weight_decay=self.weight_decay, explain_output=self.explain_output, loss_on=self.loss_on,
            t_seed=self.t_seeds[i], num_classes=hp.num_classes,
            start_model=MLPClassifier(**hp), end_model=MLPClassifier(**hp),
        )  # fmt: skip
        with torch.no_grad():
            layers = curve_layers(curve.net)
            for layer, w_points, b_points in zip(layers, self.weight_points, self.bias_points):
                for k in range(POINTS):
                    getattr(layer, f"weight_{k}").copy_(w_points[k][i])
                    getattr(layer, f"bias_{k}").copy_(b_points[k][i, 0])
        return curve


def curves_between(
    population,
    pairs: Sequence[tuple[int, int]],
    kind: CurveKind = "bezier",
    mode: Literal["fixed", "trained"] = "fixed",
) -> MLPCurvePopulation:
    """Curves joining members (a, b) of a ``PopulationMLP`` with its hyperparameters; the
    t's of curve (a, b) are drawn from member a's seed. Mode ``trained``: end points start
    from the members' initialisations (their seeds) and are trained along the curve."""
    hp = population.hparams

    member = population.member if mode == "fixed" else population.member_initialisation
    return MLPCurvePopulation(
        [member(a) for a, _ in pairs], [member(b) for _, b in pairs], [population.seeds[a] for a, _ in pairs],
        kind, mode, hp.lr, hp.weight_decay, hp.explain_output, hp.loss_on,
    )  # fmt: skip
