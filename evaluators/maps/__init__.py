"""What makes explanation maps: one explainer registry, ``EXPLAINERS`` (one :class:`Explainer`
spec per method), and ``explain(model, x, method, target=None, **options)`` for any
classifier of the model contract (``lightning_modules.interface``; docs/explainers.md):

* a model with a default class (``explained_class``: Ley et al.'s ``MLPClassifier``,
  ``PopulationMLP``, ``MLPEnsemble``) -> the output of ``target`` (default: a binary model's
  positive class, a multi-class model's predicted class) by the spec's ``fixed``
  implementation through ``tabular_explainers.explain_fixed``, its overrides per model kind
  first (stacked populations, chunked ensembles, batched DeepSHAP); draws from ``seeds.call_seed``;
  a spec without ``fixed`` (a user's ``Explainer(run)``) by its ``run`` of that output (a
  population member by member);
* any other classifier -> the logit of ``target`` (default: the predicted class) by the
  spec's ``run`` (``image_explainers``); each input's draws from its own seed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from captum import attr
from torch import nn

from foundation.errors import InputError
from evaluators.maps import image_explainers as per_input
from evaluators.maps import tabular_explainers as fixed
from foundation.seeds import call_seed, check_seed, image_seeds, input_index
from lightning_modules.interface import default_targets, fixed_target, output_kind
from lightning_modules.population_base import Population

INPUT_DIMS = {"rows": 2, "images": 4}
TAKES = {"rows": "rows (N, d)", "images": "images (N, C, H, W)", "any": "inputs (N, ...)"}


@dataclass(frozen=True)
class Explainer:
    """One explainer (docs/explainers.md). ``run(model, x, target, max_batch, **draws,
    **options)``: its maps of any classifier's logit of ``target`` (N,); ``fixed(model, x,
    **options)``: of a scalar output, or with option ``target`` (N,) of an (N, K) one, for a model
    with a default class (None: ``run`` of its explained output there); ``takes``:
    ``"rows"``, ``"images"`` or ``"any"`` inputs; ``rows_per_input(options)``: rows one input
    becomes in its forward passes; ``draws``: ``"per_input"`` or ``"seed"``; ``batched``: a
    population in one call; ``linear``: linear in the explained function."""

    run: Callable[..., torch.Tensor]
    fixed: Callable[..., torch.Tensor] | None = None
    takes: str = "any"
    rows_per_input: Callable[[dict], int] = lambda options: 1
    draws: str | None = None
    batched: bool = False
    linear: bool = False


def _noise_tunnel(nt_type: str, linear: bool = False) -> Explainer:
    return Explainer(per_input._noise_tunnel(nt_type), fixed._noise_tunnel(nt_type), draws="per_input",
                     rows_per_input=lambda o: o.get("nt_samples", 50), batched=True, linear=linear)  # fmt: skip


def _seeded(cls, **defaults) -> Explainer:
    return Explainer(per_input._seeded_per_input(cls, **defaults), fixed._perturbation(cls, **defaults), "rows",
                     draws="per_input", batched=cls is attr.ShapleyValueSampling)  # fmt: skip


EXPLAINERS: dict[str, Explainer] = {
    "saliency": Explainer(per_input._plain(attr.Saliency, abs=False), fixed._saliency, batched=True, linear=True),
    "smoothgrad": _noise_tunnel("smoothgrad", linear=True),
    "smoothgrad_sq": _noise_tunnel("smoothgrad_sq"),
    "vargrad": _noise_tunnel("vargrad"),
    "deepshap": Explainer(per_input._deepshap, fixed._deepshap, "rows", batched=True, linear=True,
                          rows_per_input=lambda options: 2 * len(options["baselines"])),  # (input, background) pairs
    "gradient_shap": Explainer(per_input._gradient_shap, fixed._with_baselines(attr.GradientShap, n_samples=50,
                                                                               stdevs=0.0),
                               rows_per_input=lambda o: o.get("n_samples", 50), draws="per_input"),
    "integrated_gradients": Explainer(per_input._integrated_gradients,
                                      fixed._with_baselines(attr.IntegratedGradients, n_steps=50),
                                      rows_per_input=lambda o: o.get("n_steps", 50), batched=True, linear=True),
    "input_x_gradient": Explainer(per_input._plain(attr.InputXGradient), fixed._gradient(attr.InputXGradient),
                                  batched=True, linear=True),
    "guided_backprop": Explainer(per_input._plain(attr.GuidedBackprop), fixed._gradient(attr.GuidedBackprop),
                                 batched=True),
    "deeplift": Explainer(per_input._plain(attr.DeepLift, rows_per_image=2), fixed._with_baselines(attr.DeepLift),
                          rows_per_input=lambda options: 2, batched=True),  # inputs and baselines in one forward
    "lime": _seeded(attr.Lime, n_samples=200),
    "kernel_shap": _seeded(attr.KernelShap, n_samples=200),
    "feature_ablation": Explainer(per_input._plain(attr.FeatureAblation), fixed._perturbation(attr.FeatureAblation),
                                  "rows", batched=True),
    "shapley_value_sampling": _seeded(attr.ShapleyValueSampling, n_samples=25),
    "occlusion": Explainer(per_input._occlusion, takes="images"),
    "gradcam": Explainer(per_input._gradcam, takes="images"),
    "rise": Explainer(per_input.rise, takes="images", draws="seed"),
}  # fmt: skip


def input_kind(x: torch.Tensor) -> str:
    """``"rows"`` (N, d), ``"images"`` (N, C, H, W) or ``"any"`` (other shapes)."""
    return next((kind for kind, dims in INPUT_DIMS.items() if x.dim() == dims), "any")


def explainer_names(model: nn.Module, x: torch.Tensor | None = None) -> list[str]:
    """The registry names ``explain`` accepts for ``model`` and inputs like ``x`` (None: images
    for a model with an ``nn.Conv2d`` and no fixed class, else rows)."""
    images = fixed_target(model) is None and any(isinstance(m, nn.Conv2d) for m in model.modules())
    kind = ("images" if images else "rows") if x is None else input_kind(x)
    return sorted(name for name, spec in EXPLAINERS.items() if spec.takes in ("any", kind))


def explain(model: nn.Module, x: torch.Tensor, method: str, target=None, seed: int = 0, index=None,
            max_batch: int | None = None, **options) -> torch.Tensor:  # fmt: skip
    """Attributions of ``model``'s explained output for inputs ``x``, shaped like ``x``
    ((M, N, d) for a population; the module docstring says which output). Random draws come
    from ``seed`` and the inputs' indices in their split ``index`` (None: 0 … N − 1): per
    input (``seeds.image_seeds``), or per call for a model with a fixed class
    (``seeds.call_seed``). ``max_batch``: rows per forward pass of ``run`` (``resolve_max_batch``)."""
    spec = EXPLAINERS.get(method)
    if spec is None:
        raise InputError(f"unknown explainer {method!r}; expected one of {sorted(EXPLAINERS)}")
    if not isinstance(x, torch.Tensor) or x.dim() < 2 or spec.takes not in ("any", input_kind(x)):
        raise InputError(f"explainer {method!r} takes {TAKES[spec.takes]}; got inputs of shape "
                         f"{tuple(getattr(x, 'shape', ()))}")  # fmt: skip
    check_seed(seed)
    input_index(index, len(x))
    if fixed_target(model) is None:
        return per_input.explain_classifier(model, x, spec.run, _draws(spec, seed, index, len(x)), target, max_batch,
                                            **options)  # fmt: skip
    targets = default_targets(model, x, target)
    if spec.fixed is None:
        return _run_of_explained_output(model, x, spec, targets, seed, index, max_batch, output_kind(model), **options)
    return fixed.explain_fixed(model, x, method, spec, targets, seed=call_seed(seed, index), **options)


def _draws(spec: Explainer, seed: int, index, n: int) -> dict:
    """The random draws a spec's ``run`` takes: a seed per input, one seed, or none."""
    return {"per_input": {"seeds": image_seeds(seed, index, n)}, "seed": {"seed": seed}}.get(spec.draws, {})


def _run_of_explained_output(model: nn.Module, x: torch.Tensor, spec: Explainer, targets: torch.Tensor, seed: int,
                             index, max_batch: int | None, output: str, **options) -> torch.Tensor:  # fmt: skip
    """A spec without a ``fixed`` implementation (a user's ``Explainer(run)``, README "Extending") on a
    model with a default class: its ``run`` of the model's explained output (``output``, logits or
    probabilities of every class: ``tabular_explainers.ExplainedOutput``) for ``targets`` (N,); a
    population (``PopulationMLP``, a ``ModulePopulation`` of rows) member by member, (M, N, d)."""
    if isinstance(model, Population):
        return torch.stack([_run_of_explained_output(model.member(i), x, spec, targets, seed, index, max_batch, output,
                                                     **options) for i in range(model.size)])  # fmt: skip
    return per_input.explain_classifier(fixed.ExplainedOutput(model, None, output), x, spec.run,
                                        _draws(spec, seed, index, len(x)), targets, max_batch, **options)  # fmt: skip


__all__ = ["EXPLAINERS", "Explainer", "explain", "explainer_names", "input_kind"]
