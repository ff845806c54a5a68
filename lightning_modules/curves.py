"""``MLPCurve``: a mode-connecting curve between two tabular MLPs, for configs (``configs/curve.yaml``);
its end points fixed members of a population file or trained from seeds. The curve layers and
their training, for any architecture: ``lightning_modules.curve_model``."""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn

from foundation.errors import InputError
from lightning_modules.curve_model import CurveKind, CurveModel, curve_coefficients, curve_layers
from lightning_modules.interface import check_num_classes
from lightning_modules.mlp import LossOn, MLPClassifier, build_mlp
from lightning_modules.population_io import load_population


class MLPCurve(CurveModel):
    """A curve between two tabular MLPs (128-64-16), for configs.

    Mode ``fixed``: the end points are ``start_model`` and ``end_model`` when given (in
    code), else members ``start_member`` and ``end_member`` of the population file
    ``population`` (in configs). Mode ``trained``: the end points start from
    ``MLPClassifier`` initialisations with seeds ``start_seed`` and ``end_seed`` and are
    trained along the curve with the members' hyperparameters. ``num_classes``: K, the
    MLPs' output logits (two by default; linked from the datamodule).
    """

    def __init__(
        self,
        in_features: int,
        kind: CurveKind = "bezier",
        mode: Literal["fixed", "trained"] = "trained",
        population: str | None = None,
        start_member: int = 0,
        end_member: int = 1,
        start_seed: int = 0,
        end_seed: int = 1,
        hidden: tuple[int, ...] = (128, 64, 16),
        lr: float = 1e-3,
        weight_decay: float = 0.0,
        explain_output: Literal["logit", "probability"] = "logit",
        loss_on: LossOn = "logits",
        test_ts: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0),
        t_seed: int = 0,
        start_model: MLPClassifier | None = None,
        end_model: MLPClassifier | None = None,
        num_classes: int = 2,
    ) -> None:
        check_num_classes(num_classes)
        if mode == "fixed" and start_model is not None and end_model is not None:
            start, end = start_model.net, end_model.net
        elif mode == "fixed":
            if population is None:
                raise InputError("mode='fixed' needs option population: a population file written by train.py")
            members, _ = load_population(population, kind="PopulationMLP")
            start, end = members.member(start_member).net, members.member(end_member).net
        else:
            start = build_mlp(in_features, tuple(hidden), num_classes, 0.0, start_seed)
            end = build_mlp(in_features, tuple(hidden), num_classes, 0.0, end_seed)
        classes = [m for m in start.modules() if isinstance(m, nn.Linear)][-1].out_features
        if classes != num_classes:
            raise InputError(f"the curve's end points have {classes} output logits; option num_classes={num_classes} "
                             "expects as many")  # fmt: skip
        super().__init__(start, end, kind, mode, lr, weight_decay, test_ts, t_seed, loss_on)
        self.save_hyperparameters(ignore=["start_model", "end_model"])
        self.explain_output = explain_output

    def classifier_at(self, t: float) -> MLPClassifier:
        hp = self.hparams
        seed = hp.start_seed if hp.mode == "trained" else 0
        model = MLPClassifier(
            hp.in_features, tuple(hp.hidden), hp.lr, hp.weight_decay, 0.0, seed, hp.explain_output, hp.loss_on,
            hp.num_classes,
        )
        model.net.load_state_dict(self.state_at(t))
        return model

    def stacked_at(self, ts: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Stacked MLP weights (T, out, in) and biases (T, 1, out) at every t in ``ts``."""
        c = curve_coefficients(self.kind, ts).to(self.device)  # (T, 3)
        weights, biases = [], []
        for layer in curve_layers(self.net):
            w = torch.stack([getattr(layer, f"weight_{k}").detach() for k in range(3)])  # (3, out, in)
            b = torch.stack([getattr(layer, f"bias_{k}").detach() for k in range(3)])  # (3, out)
            weights.append(torch.einsum("tk,koi->toi", c, w).contiguous())
            biases.append(torch.einsum("tk,ko->to", c, b).unsqueeze(1))
        return weights, biases
