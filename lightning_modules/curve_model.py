"""Mode-connecting curves in weight space (Garipov et al., 2018; Ley et al., App. C).

A curve joins two networks' weights ω₁ and ω₂ through a bend θ:

* quadratic Bezier: φ_θ(t) = (1−t)² ω₁ + 2t(1−t) θ + t² ω₂;
* polygonal chain: φ_θ(t) = lerp(ω₁, θ, 2t) for t < ½, lerp(θ, ω₂, 2t − 1) after;
* line: φ(t) = (1−t) ω₁ + t ω₂, the bend unused. Trained from the seeds (mode
  ``trained``) it is the curve of Ley et al.'s reference code (docs/table1.md, "Curves"):
  a segment whose two ends are trained together so that the whole segment has low loss.

All three are Σ_k c_k(t) w_k over the three control points (ω₁, θ, ω₂), so every
curve layer keeps three copies of its parameters and mixes them with the current
coefficients. ``to_curve`` turns an ordinary architecture (the MLP, a ResNet) into
its curve version by replacing each ``nn.Linear``, ``nn.Conv2d`` and
``nn.BatchNorm1d/2d`` in place, so no architecture is rewritten by hand.

Training (``CurveModel``) samples t ~ U(0, 1) per batch and adds the L2 penalty
(λ/2)‖w(t)‖² on the weights at t. Mode ``fixed``: the end points are two trained
models and stay fixed, the bend starts on the straight line between them (Garipov).
Mode ``trained``: end points and bend are all trained from scratch with the loss
along the curve (Ley et al.): the start point is initialised with a member's seed.
BatchNorm running statistics depend on t, so ``update_bn`` recomputes them for each
t before evaluation.
"""

from __future__ import annotations

import copy
from typing import Literal

import pytorch_lightning as pl
import torch
from torch import nn
from torch.nn import functional as F

from foundation.errors import InputError
from lightning_modules.finite import check_outputs
from lightning_modules.mlp import LossOn, adam, check_loss_on, classification_loss

CurveKind = Literal["bezier", "polychain", "line"]


def curve_coefficients(kind: CurveKind, t: float | torch.Tensor) -> torch.Tensor:
    """(c₁, c_θ, c₂) at t (a scalar or a 1-D tensor of T values -> shape (T, 3))."""
    t = torch.as_tensor(t, dtype=torch.float32)
    if kind == "bezier":
        return torch.stack([(1 - t) ** 2, 2 * t * (1 - t), t**2], dim=-1)
    if kind == "polychain":
        first = t < 0.5
        s = torch.where(first, 2 * t, 2 * t - 1)
        zero = torch.zeros_like(t)
        return torch.stack(
            [torch.where(first, 1 - s, zero), torch.where(first, s, 1 - s), torch.where(first, zero, s)], dim=-1
        )
    if kind == "line":
        return torch.stack([1 - t, torch.zeros_like(t), t], dim=-1)
    raise InputError(f"option kind={kind!r}; expected 'bezier', 'polychain' or 'line'")


class _CurveParameters(nn.Module):
    """Three control points of each named parameter of a layer, mixed at the current t."""

    def __init__(self, start: nn.Module, end: nn.Module, names: list[str], fixed_ends: bool) -> None:
        super().__init__()
        self.names = [n for n in names if getattr(start, n, None) is not None]
        self.fixed_ends = fixed_ends
        for name in self.names:
            a, b = getattr(start, name).detach(), getattr(end, name).detach()
            self.register_parameter(f"{name}_0", nn.Parameter(a.clone(), requires_grad=not fixed_ends))
            self.register_parameter(f"{name}_1", nn.Parameter(((a + b) / 2).clone()))
            self.register_parameter(f"{name}_2", nn.Parameter(b.clone(), requires_grad=not fixed_ends))
        self.coefficients: torch.Tensor | None = None

    def at(self, name: str) -> torch.Tensor | None:
        if name not in self.names:
            return None
        if self.coefficients is None:
            raise RuntimeError("curve layer used before CurveModel.set_t")
        c = self.coefficients
        return c[0] * getattr(self, f"{name}_0") + c[1] * getattr(self, f"{name}_1") + c[2] * getattr(self, f"{name}_2")


class CurveLinear(nn.Module):
    def __init__(self, start: nn.Linear, end: nn.Linear, fixed_ends: bool) -> None:
        super().__init__()
        self.points = _CurveParameters(start, end, ["weight", "bias"], fixed_ends)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.points.at("weight"), self.points.at("bias"))


class CurveConv2d(nn.Module):
    def __init__(self, start: nn.Conv2d, end: nn.Conv2d, fixed_ends: bool) -> None:
        super().__init__()
        self.points = _CurveParameters(start, end, ["weight", "bias"], fixed_ends)
        self.stride, self.padding = start.stride, start.padding
        self.dilation, self.groups = start.dilation, start.groups

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w, b = self.points.at("weight"), self.points.at("bias")
        return F.conv2d(x, w, b, self.stride, self.padding, self.dilation, self.groups)


class CurveBatchNorm(nn.Module):
    """BatchNorm whose affine parameters follow the curve; one set of running statistics,
    valid for the t they were last recomputed at (``CurveModel.update_bn``)."""

    def __init__(self, start: nn.Module, end: nn.Module, fixed_ends: bool) -> None:
        super().__init__()
        self.points = _CurveParameters(start, end, ["weight", "bias"], fixed_ends)
        self.eps, self.momentum = start.eps, start.momentum
        self.register_buffer("running_mean", torch.zeros(start.num_features))
        self.register_buffer("running_var", torch.ones(start.num_features))
        self.register_buffer("num_batches_tracked", torch.tensor(0, dtype=torch.long))

    def reset_running_stats(self) -> None:
        self.running_mean.zero_()
        self.running_var.fill_(1)
        self.num_batches_tracked.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            self.num_batches_tracked += 1
        momentum = 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum
        return F.batch_norm(
            x, self.running_mean, self.running_var, self.points.at("weight"), self.points.at("bias"),
            self.training, momentum, self.eps,
        )  # fmt: skip


CURVE_LAYERS = {
    nn.Linear: CurveLinear,
    nn.Conv2d: CurveConv2d,
    nn.BatchNorm1d: CurveBatchNorm,
    nn.BatchNorm2d: CurveBatchNorm,
}


def to_curve(start: nn.Module, end: nn.Module, fixed_ends: bool = True) -> nn.Module:
    """A copy of ``start``'s architecture whose Linear/Conv2d/BatchNorm layers are curve
    layers from ``start`` (t = 0) to ``end`` (t = 1), the bend on the straight line."""
    curve = copy.deepcopy(start)
    _replace(curve, start, end, fixed_ends)
    left = [(name, m) for name, m in curve.named_modules()
            if not isinstance(m, _CurveParameters) and next(m.parameters(recurse=False), None) is not None]  # fmt: skip
    if left:
        name, module = left[0]
        layers = [c.__name__ for c in CURVE_LAYERS]
        raise InputError(f"connect/combine: the network's {type(module).__name__} {name or '(top level)'!r} holds "
                         f"parameters that no curve layer takes; curves are built of {layers} layers only")  # fmt: skip
    return curve


def _replace(target: nn.Module, start: nn.Module, end: nn.Module, fixed_ends: bool) -> None:
    for (name, a), b in zip(start.named_children(), end.children()):
        if type(a) is not type(b):
            raise InputError(f"layer {name!r}: {type(a).__name__} vs {type(b).__name__}; expected equal architectures")
        maker = CURVE_LAYERS.get(type(a))
        if maker is not None:
            setattr(target, name, maker(a, b, fixed_ends))
        else:
            _replace(getattr(target, name), a, b, fixed_ends)


def curve_layers(module: nn.Module) -> list[_CurveParameters]:
    return [m for m in module.modules() if isinstance(m, _CurveParameters)]


class CurveModel(pl.LightningModule):
    """A curve between two networks, trained with t ~ U(0, 1) per batch.

    Args:
        start, end: the end-point networks (same architecture; classifiers of 2+ logits).
        kind: ``bezier``, ``polychain`` or ``line``.
        mode: ``fixed`` (end points frozen, Garipov) or ``trained`` (all points trained, Ley et al.).
        lr, weight_decay: Adam learning rate and the L2 coefficient λ on w(t).
        loss_on: the training loss's scores, as for ``MLPClassifier``.
        test_ts: the t at which ``test`` reports accuracy.
        t_seed: seed of the curve's own generator of training t's (one draw per batch).
    """

    def __init__(
        self,
        start: nn.Module,
        end: nn.Module,
        kind: CurveKind = "bezier",
        mode: Literal["fixed", "trained"] = "fixed",
        lr: float = 1e-3,
        weight_decay: float = 0.0,
        test_ts: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0),
        t_seed: int = 0,
        loss_on: LossOn = "logits",
    ) -> None:
        super().__init__()
        if mode not in ("fixed", "trained"):
            raise InputError(f"option mode={mode!r}; expected 'fixed' or 'trained'")
        curve_coefficients(kind, 0.0)  # validates kind
        check_loss_on(loss_on)
        self.kind, self.mode, self.lr, self.weight_decay = kind, mode, lr, weight_decay
        self.loss_on = loss_on
        self.test_ts = tuple(test_ts)
        self.net = to_curve(start, end, fixed_ends=mode == "fixed")
        self.t_generator = torch.Generator().manual_seed(t_seed)
        self.set_t(0.0)

    # --- points on the curve ---------------------------------------------------
    def set_t(self, t: float) -> None:
        coefficients = curve_coefficients(self.kind, t).to(self.device)
        for layer in curve_layers(self.net):
            layer.coefficients = coefficients

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def point_state(self, k: int) -> dict[str, torch.Tensor]:
        """Parameters of control point k (0 start, 1 bend, 2 end) keyed like the plain network."""
        suffix = f"_{k}"
        return {
            name[: -len(suffix)].replace(".points.", "."): p.detach()
            for name, p in self.net.named_parameters()
            if name.endswith(suffix)
        }

    def state_at(self, t: float) -> dict[str, torch.Tensor]:
        """Plain-network parameters w(t) (BatchNorm statistics excluded)."""
        c = curve_coefficients(self.kind, t)
        states = [self.point_state(k) for k in range(3)]
        return {name: sum(c[k] * states[k][name] for k in range(3)) for name in states[0]}

    def model_at(self, t: float, template: nn.Module) -> nn.Module:
        """A copy of ``template`` carrying the curve's weights at t."""
        model = copy.deepcopy(template)
        missing, unexpected = model.load_state_dict(self.state_at(t), strict=False)
        if unexpected or any(not k.endswith(("running_mean", "running_var", "num_batches_tracked")) for k in missing):
            raise InputError(f"template does not match the curve: missing {missing}, unexpected {unexpected}")
        return model

    @torch.no_grad()
    def network_at(self, t: float, template: nn.Module, loader=None) -> nn.Module:
        """``model_at(t, template)`` in eval mode, its BatchNorm running statistics
        recomputed at t with a pass over ``loader`` (``update_bn``): the statistics the
        end points were trained with do not hold between them. Needed only where the
        network has BatchNorm."""
        model = self.model_at(t, template).eval()
        bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
        if not bns:
            return model
        if loader is None:
            raise InputError("the network has BatchNorm: its statistics at t need a loader of training data")
        self.update_bn(loader, t)
        for bn, curve_bn in zip(bns, [m for m in self.net.modules() if isinstance(m, CurveBatchNorm)]):
            for name in ("running_mean", "running_var", "num_batches_tracked"):
                getattr(bn, name).copy_(getattr(curve_bn, name))
        return model

    @torch.no_grad()
    def update_bn(self, loader, t: float) -> None:
        """Recompute BatchNorm running statistics at t with a pass over ``loader``."""
        bns = [m for m in self.net.modules() if isinstance(m, CurveBatchNorm)]
        if not bns:
            return
        self.set_t(t)
        was_training = self.training
        self.train()
        momenta = [bn.momentum for bn in bns]
        for bn in bns:
            bn.reset_running_stats()
            bn.momentum = None  # cumulative average over the pass
        for x, *_ in loader:
            self.net(x.to(self.device))
        for bn, m in zip(bns, momenta):
            bn.momentum = m
        self.train(was_training)

    # --- training ----------------------------------------------------------------
    def l2_at_t(self) -> torch.Tensor:
        return sum((layer.at(n) ** 2).sum() for layer in curve_layers(self.net) for n in layer.names)

    def training_step(self, batch, batch_idx: int) -> torch.Tensor:
        x, y = batch
        self.set_t(float(torch.rand((), generator=self.t_generator)))
        logits = self.net(x)
        loss = classification_loss(logits, y, self.loss_on)
        self.log("train/loss", loss, prog_bar=True, on_step=False, on_epoch=True)
        if self.weight_decay:
            loss = loss + 0.5 * self.weight_decay * self.l2_at_t()
        return loss

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["t_generator_state"] = self.t_generator.get_state()  # a resumed run draws the same t's

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        if "t_generator_state" in checkpoint:
            self.t_generator.set_state(checkpoint["t_generator_state"])

    def on_test_start(self) -> None:
        """Recompute BatchNorm statistics for every test t (on the training data) first."""
        self._test_stats = {t: torch.zeros(3) for t in self.test_ts}
        self._bn_stats = {}
        bns = [m for m in self.net.modules() if isinstance(m, CurveBatchNorm)]
        if bns:
            loader = self.trainer.datamodule.train_dataloader()
            for t in self.test_ts:
                self.update_bn(loader, t)
                self._bn_stats[t] = [(bn.running_mean.clone(), bn.running_var.clone()) for bn in bns]
            self.eval()

    def test_step(self, batch, batch_idx: int) -> None:
        x, y = batch
        bns = [m for m in self.net.modules() if isinstance(m, CurveBatchNorm)]
        for t in self.test_ts:
            self.set_t(t)
            for bn, (mean, var) in zip(bns, self._bn_stats.get(t, [])):
                bn.running_mean.copy_(mean)
                bn.running_var.copy_(var)
            logits = self.net(x)
            check_outputs(self, logits, f"test (t = {t:g})")
            stats = self._test_stats[t]
            stats[0] += F.cross_entropy(logits, y, reduction="sum").item()
            stats[1] += (logits.argmax(-1) == y).sum().item()
            stats[2] += len(y)

    def on_test_epoch_end(self) -> None:
        for t, (loss, correct, rows) in self._test_stats.items():
            self.log(f"test/loss_t{t:g}", loss / rows)
            self.log(f"test/acc_t{t:g}", correct / rows)
        accs = [c / r for _, c, r in self._test_stats.values()]
        self.log("test/acc", sum(accs) / len(accs))
        self.log("test/loss", sum(s[0] / s[2] for s in self._test_stats.values()) / len(accs))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return adam([p for p in self.parameters() if p.requires_grad], self.lr, 0.0)
