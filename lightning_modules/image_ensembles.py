"""Ensembles of image classifiers of any architecture (Ley et al., §4-5, for images), built
by the registry of ``ensembles.py`` from an image population (``ImageNetworks``).

An ``ImageEnsemble`` holds its M networks (of any architecture, unlike the stacked MLPs
of ``ensembles.py``) as an ``nn.ModuleList`` and runs them one after another on each batch:
every explainer of ``evaluators.maps.EXPLAINERS`` (hook-based ones too: GuidedBackprop and DeepLift
act on every member's ReLU modules) explains it like one model. With the members g_i
(logits) and K classes:

* ``average``: predictions from the mean member probability (1/M) Σ_i softmax(g_i(x));
* ``majority``: predictions from the vote shares (1/M) Σ_i onehot(argmax g_i(x)) (a tie
  goes to the lower class index);
* ``perturb``: each member ω_i repeated m times with ε ~ N(0, σ²) added to one layer's
  weight or bias (``layer``: index into the member's ``nn.Conv2d``/``nn.Linear`` layers in
  module order, 0 the first, Ley et al.'s choice); the noise is drawn as
  ``ensembles.perturb_stack`` draws it for MLPs (variants of member i are i·m .. i·m+m-1);
* ``connect``: models at ``n_t`` values of t on curves (``curve_model.CurveModel``) joining
  disjoint pairs of members, each shaped like its curve's start member and with its
  BatchNorm statistics recomputed at its t on training data (``CurveModel.network_at``);
* ``combine``: the curve samples, each perturbed as in ``perturb``.

Outputs: ``forward`` returns the **mean member logit** (1/M) Σ_i g_i(x), shape (N, K).
Gradient explainers differentiate the target's entry of ``forward``, so the ensemble's
saliency for class c is (1/M) Σ_i ∇ g_i,c(x), the mean of the members' saliency maps
(likewise every explainer linear in the explained function), as Ley et al.'s reference
code computes it. Predictions instead come from
``probabilities`` (mean probability, or vote shares), which
``lightning_modules.interface.class_probabilities`` and ``predict`` read. GradCAM
explains one layer: on an ensemble it needs an explicit ``layer`` and explains that
member's layer only.

The networks may take table rows as well (a ``ModulePopulation`` of ``inputs="rows"``): its
ensembles carry the population's ``explained_class`` and ``explain_output`` (the model
contract, ``lightning_modules.interface``), so the tabular explainers explain them as they
explain an ``MLPEnsemble`` (a binary table's positive class, logit by default).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from torch import nn

from foundation.errors import InputError
from foundation.modality import IMAGES
from lightning_modules.curve_model import CurveModel
from lightning_modules.ensembles import Part, Reduction, perturb_stack
from lightning_modules.interface import output_kind


class ImageEnsemble(nn.Module):
    """M image networks reduced to one classifier (see the module's docstring)."""

    def __init__(self, nets: Sequence[nn.Module], reduction: Reduction = "average", explained_class=None,
                 explain_output: str = "logit") -> None:  # fmt: skip
        super().__init__()
        if reduction not in ("average", "majority"):
            raise InputError(f"option reduction={reduction!r}; expected 'average' or 'majority'")
        if not nets:
            raise InputError("an ensemble needs at least one network")
        self.nets = nn.ModuleList(nets).eval()
        self.reduction = reduction
        self.explained_class, self.explain_output = explained_class, explain_output  # the model contract's

    @property
    def size(self) -> int:
        return len(self.nets)

    def member_logits(self, x: torch.Tensor) -> torch.Tensor:
        """(M, N, K) logits of every member."""
        return torch.stack([net(x) for net in self.nets])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The mean member logit (N, K): what explainers differentiate."""
        return self.member_logits(x).mean(0)

    def probabilities(self, x: torch.Tensor) -> torch.Tensor:
        """(N, K) mean member probabilities (vote shares for ``majority``)."""
        logits = self.member_logits(x)
        if self.reduction == "majority":
            return nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).to(logits.dtype).mean(0)
        return logits.softmax(-1).mean(0)

    @torch.no_grad()
    def predict(self, x: torch.Tensor) -> torch.Tensor:
        return self.probabilities(x).argmax(-1)

    def perturbed(self, n_perturb: int, sigma: float, layer: int = 0, part: Part = "weight",
                  seed: int = 0) -> "ImageEnsemble":  # fmt: skip
        """The average of ``n_perturb`` noisy copies of every member (``perturbed_networks``)."""
        variants = perturbed_networks(list(self.nets), n_perturb, sigma, layer, part, seed)
        return ImageEnsemble(variants, "average", self.explained_class, self.explain_output)


class ImageNetworks:
    """An image population as the ensemble registry reads it: its members' networks ``nets``
    (``ImagePopulation``, ``ImageMembers``, or ``ImageNetworks(nets)`` around any networks)."""

    modality = IMAGES  # what the members take (``foundation.modality``)
    CURVES = "networks"  # curves between members: one ``CurveModel`` per pair (protocols' population_sets)
    explained_class = None  # the model contract's default class of its ensembles (images: none, a target per input)

    def __init__(self, nets: Sequence[nn.Module]) -> None:
        self.nets = list(nets)

    def contract(self) -> tuple:
        """What its ensembles are explained by (``lightning_modules.interface``): (``explained_class``,
        ``explain_output``) of the population."""
        return self.explained_class, output_kind(self)

    def ensemble(self, indices: Sequence[int], reduction: Reduction = "average") -> ImageEnsemble:
        return ImageEnsemble([self.nets[i] for i in indices], reduction, *self.contract())

    def curve_ensemble(self, curves: Sequence[CurveModel], ts: torch.Tensor, members: Sequence[int],
                       loader=None) -> ImageEnsemble:  # fmt: skip
        """Networks at every t of ``ts`` on every curve, each shaped like its curve's start
        member (members[2j] for curve j), BatchNorm statistics recomputed at t over ``loader``."""
        templates = [self.nets[i] for i in list(members)[0 : 2 * len(curves) : 2]]
        return ImageEnsemble([curve.network_at(t, template, loader) for curve, template in zip(curves, templates)
                              for t in ts.tolist()], "average", *self.contract())  # fmt: skip


def network(member: nn.Module) -> nn.Module:
    """The plain network of a member: an ``ImageClassifier``'s ``net``, else the module itself."""
    return getattr(member, "net", member)


def weight_layers(net: nn.Module) -> list[nn.Module]:
    """The layers ``perturb``'s ``layer`` counts: ``nn.Conv2d`` and ``nn.Linear``, in module order."""
    return [m for m in net.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]


def perturbed_networks(nets: Sequence[nn.Module], n_perturb: int, sigma: float, layer: int = 0,
                       part: Part = "weight", seed: int = 0) -> list[nn.Module]:  # fmt: skip
    """``n_perturb`` copies of each network, N(0, σ²) noise on ``part`` of weight layer
    ``layer`` (noise drawn by ``perturb_stack``; copy j of network i is item i·m + j)."""
    layers = [weight_layers(net) for net in nets]
    if not 0 <= layer < len(layers[0]):
        raise InputError(f"option layer={layer}; expected 0 <= layer < {len(layers[0])} (Conv2d/Linear layers)")
    chosen = [found[layer] for found in layers]
    if part == "bias" and chosen[0].bias is None:
        raise InputError(f"option part='bias': weight layer {layer} ({chosen[0]}) has no bias")
    weights = torch.stack([m.weight.detach() for m in chosen])
    biases = torch.stack([m.bias.detach() if m.bias is not None else m.weight.new_zeros(0) for m in chosen])
    noisy_w, noisy_b = perturb_stack([weights], [biases], n_perturb, sigma, 0, part, seed)
    noisy = (noisy_w if part == "weight" else noisy_b)[0]
    variants = []
    for i, net in enumerate(nets):
        for j in range(n_perturb):
            variant = copy.deepcopy(net).eval()
            target = weight_layers(variant)[layer]
            getattr(target, part).data.copy_(noisy[i * n_perturb + j])
            variants.append(variant)
    return variants
