"""Layer-wise relevance propagation (LRP; Bach et al. 2015, Montavon et al. 2019) through Zennit
(Anders et al. 2021): its rules, composites and canonizers, not written again here.

LRP distributes the explained class's score f_t(x) backwards, layer by layer: the relevance
R_j of a unit of layer l+1 goes to the units i of layer l in proportion to their contributions
z_ij = a_i w_ij, by a rule per layer type. Zennit computes it as a modified gradient: the map
is the "gradient" of the output relevance R_out = f_t(x) · e_t (the class score, one-hot at
t; Σ_i R_i = f_t(x) where every rule conserves relevance and no bias absorbs any) with each
linear and convolution layer's backward replaced by its rule:

* ε-rule: R_i = Σ_j a_i w_ij / (z_j + ε sign(z_j)) · R_j, z_j = Σ_i a_i w_ij + b_j
  (``lrp_epsilon``, every linear and convolution layer; ``epsilon``);
* αβ-rule: R_i = Σ_j (α (a_i w_ij)⁺ / z_j⁺ − β (a_i w_ij)⁻ / z_j⁻) R_j, α − β = 1
  (``lrp_alpha_beta``, every linear and convolution layer; ``alpha``, ``beta``);
* Zennit's composites (``lrp_epsilon_plus``: z⁺ on convolutions, ε on dense layers;
  ``lrp_epsilon_alpha2_beta1``: α = 2, β = 1 on convolutions; ``..._flat``: the flat rule on the
  first layer), each with Zennit's own defaults.

Every composite passes relevance unchanged through activations and BatchNorm and normalises it
through sums and average pooling (Zennit's ``layer_map_base``); an operation with no module of
its own (``x.mean``, a functional ``+``) passes the plain gradient. Canonizers first rewrite a
network into one whose layers the rules see (``canonizers``, option ``canonizer="auto"``):
BatchNorm merged into the linear layer before it, a ResNet's residual ``+`` a Zennit ``Sum``
module (torchvision's ResNets: Zennit's ``ResNetCanonizer``; this project's CIFAR ResNets:
:class:`CifarResNetCanonizer`); the model's parameters are restored afterwards.
"""

from __future__ import annotations

import torch
from torch import nn
from zennit.attribution import Gradient
from zennit.canonizers import AttributeCanonizer, CompositeCanonizer, SequentialMergeBatchNorm
from zennit.composites import (
    EpsilonAlpha2Beta1, EpsilonAlpha2Beta1Flat, EpsilonPlus, EpsilonPlusFlat, LayerMapComposite, layer_map_base,
)  # fmt: skip
from zennit.layer import Sum
from zennit.rules import AlphaBeta, Epsilon
from zennit.torchvision import ResNetCanonizer
from zennit.types import Convolution
from torchvision.models.resnet import BasicBlock as TorchvisionBasicBlock, Bottleneck

from evaluators.maps.batches import chunks
from evaluators.maps.registry import EXPLAINERS
from foundation.errors import InputError
from lightning_modules.image_classifier import BasicBlock

CANONIZERS = ("auto", "none")


class CifarResNetCanonizer(AttributeCanonizer):
    """This project's CIFAR ResNet block (``lightning_modules.image_classifier.BasicBlock``) with
    its residual ``out + shortcut`` a Zennit ``Sum`` module, so that relevance splits between
    the two branches in proportion to their contributions (the forward is the same function)."""

    def __init__(self) -> None:
        super().__init__(self._attributes)

    @classmethod
    def _attributes(cls, name: str, module: nn.Module) -> dict | None:
        if isinstance(module, BasicBlock):
            return {"forward": cls.forward.__get__(module), "canonizer_sum": Sum()}
        return None

    @staticmethod
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.bn2(self.conv2(self.relu1(self.bn1(self.conv1(x)))))
        shortcut = x[:, :, :: self.stride, :: self.stride] if self.stride > 1 else x
        if self.pad:
            shortcut = nn.functional.pad(shortcut, (0, 0, 0, 0, 0, self.pad))
        return self.relu2(self.canonizer_sum(torch.stack([shortcut, out], dim=-1)))

    def copy(self) -> CifarResNetCanonizer:
        return CifarResNetCanonizer()


def canonizers(model: nn.Module, canonizer: str) -> list:
    """The canonizers of ``model`` (option ``canonizer``): ``"auto"``: a network with
    torchvision's ResNet blocks Zennit's ``ResNetCanonizer``, with this project's CIFAR ResNet
    blocks BatchNorm merging and :class:`CifarResNetCanonizer`, any other BatchNorm merged into the
    linear layer right before it (``SequentialMergeBatchNorm``); ``"none"``: the network as it is."""
    if canonizer not in CANONIZERS:
        raise InputError(f"option canonizer={canonizer!r}; expected one of {list(CANONIZERS)}")
    if canonizer == "none":
        return []
    kinds = {type(m) for m in model.modules()}
    if any(issubclass(k, (TorchvisionBasicBlock, Bottleneck)) for k in kinds):
        return [ResNetCanonizer()]
    if BasicBlock in kinds:
        return [CompositeCanonizer((SequentialMergeBatchNorm(), CifarResNetCanonizer()))]
    return [SequentialMergeBatchNorm()]


def relevance(model: nn.Module, x: torch.Tensor, target: torch.Tensor, max_batch: int, composite) -> torch.Tensor:
    """The maps of ``composite`` (a Zennit composite, its canonizers in it): per chunk of at
    most ``max_batch`` inputs, Zennit's ``Gradient`` attribution of R_out = f_t(x) · e_t."""
    out = []
    with Gradient(model, composite) as attributor:
        for s in chunks(len(x), max_batch):
            xs, ts = x[s].detach(), target[s]
            _, maps = attributor(xs, lambda output: output * nn.functional.one_hot(ts, output.shape[1]).to(output))
            out.append(maps.detach())
    return torch.cat(out)


def _rule_composite(rule, model: nn.Module, canonizer: str) -> LayerMapComposite:
    """One rule on every linear and convolution layer, Zennit's base map elsewhere."""
    return LayerMapComposite(layer_map_base() + [(Convolution, rule), (nn.Linear, rule)],
                             canonizers=canonizers(model, canonizer))  # fmt: skip


@EXPLAINERS.register("lrp_epsilon")
def lrp_epsilon(model, x, target, max_batch, epsilon: float = 1e-6, canonizer: str = "auto"):
    """LRP with the ε-rule on every linear and convolution layer (Zennit's ``Epsilon``)."""
    if not isinstance(epsilon, (int, float)) or isinstance(epsilon, bool) or not epsilon > 0:
        raise InputError(f"option epsilon={epsilon!r}; expected a positive number (the ε-rule's stabiliser)")
    return relevance(model, x, target, max_batch, _rule_composite(Epsilon(epsilon=epsilon), model, canonizer))


@EXPLAINERS.register("lrp_alpha_beta")
def lrp_alpha_beta(model, x, target, max_batch, alpha: float = 2.0, beta: float = 1.0, canonizer: str = "auto"):
    """LRP with the αβ-rule on every linear and convolution layer (Zennit's ``AlphaBeta``; α − β = 1)."""
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 for v in (alpha, beta)) \
            or abs(alpha - beta - 1) > 1e-12:
        raise InputError(f"options alpha={alpha!r}, beta={beta!r}; expected non-negative numbers with alpha - beta = 1")
    return relevance(model, x, target, max_batch, _rule_composite(AlphaBeta(alpha=alpha, beta=beta), model, canonizer))


def _composite_explainer(name: str, composite_class) -> None:
    def run(model, x, target, max_batch, canonizer: str = "auto"):
        return relevance(model, x, target, max_batch, composite_class(canonizers=canonizers(model, canonizer)))

    run.__doc__ = f"LRP with Zennit's ``{composite_class.__name__}`` composite (its default rules and stabilisers)."
    EXPLAINERS.add(name, run)


for _name, _composite in (("lrp_epsilon_plus", EpsilonPlus), ("lrp_epsilon_plus_flat", EpsilonPlusFlat),
                          ("lrp_epsilon_alpha2_beta1", EpsilonAlpha2Beta1),
                          ("lrp_epsilon_alpha2_beta1_flat", EpsilonAlpha2Beta1Flat)):  # fmt: skip
    _composite_explainer(_name, _composite)


__all__ = ["CANONIZERS", "CifarResNetCanonizer", "canonizers", "lrp_alpha_beta", "lrp_epsilon", "relevance"]
