"""The gradient explainers, one definition each for every model (``evaluators.maps.EXPLAINERS``):
Saliency, Input × Gradient, Guided Backprop, DeepLift, DeepSHAP, Integrated Gradients, the
noise tunnels (SmoothGrad, SmoothGrad², VarGrad) over any of them, Expected Gradients
(``gradient_shap``) and GradCAM.

Each is ``run(model, x, target, max_batch, **draws, **options)`` (``maps.registry``): ``model``
maps inputs (N, ...) to class scores (N, K) and every method explains one class per input,
``target`` (N,); maps keep the input's shape. Methods, options and defaults: docs/explainers.md.
"""

from __future__ import annotations

import numpy as np
import torch
from captum import attr
from torch import nn

from evaluators.maps.batches import (
    check_sampling, chunked, chunks, gradient, inputs_per_chunk, normal, per_input_chunk, per_input_options, sampled,
)  # fmt: skip
from evaluators.maps.hooks import hookable
from evaluators.maps.registry import EXPLAINERS, option
from foundation.errors import InputError

NOISE_TUNNEL_BASES = ("saliency", "integrated_gradients", "input_x_gradient", "guided_backprop", "deeplift")
HOOKED = ("deeplift", "guided_backprop")  # explained on ``hooks.hookable``
CAPTUM = {"integrated_gradients": attr.IntegratedGradients, "input_x_gradient": attr.InputXGradient,
          "guided_backprop": attr.GuidedBackprop, "deeplift": attr.DeepLift}  # fmt: skip


def _captum(name: str, model: nn.Module, x: torch.Tensor, who: str) -> attr.Attribution:
    """Captum's method ``name`` on ``model`` (on ``hooks.hookable(model)`` where it acts through hooks)."""
    return CAPTUM[name](hookable(model, x, who) if name in HOOKED else model)


@EXPLAINERS.register("saliency", modalities=("rows", "images"), linear=True, members="batch")
def saliency(model, x, target, max_batch, abs: bool = False):
    """Saliency (Simonyan et al.): the input gradient of the target's score, its absolute value
    with ``abs=True`` (Captum's ``Saliency``, one backward pass per chunk: ``batches.gradient``)."""
    grads = torch.cat([gradient(model, x[s], target[s]) for s in chunks(len(x), max_batch)])
    return grads.abs() if abs else grads


@EXPLAINERS.register("input_x_gradient", linear=True, members="batch")
def input_x_gradient(model, x, target, max_batch, **options):
    """Input × Gradient (Shrikumar et al.), Captum's ``InputXGradient``."""
    method = attr.InputXGradient(model)
    return chunked(lambda xs, ts, **o: method.attribute(xs, target=ts, **o), x, target, max_batch, options)


@EXPLAINERS.register("guided_backprop", members="batch", hooks=True)
def guided_backprop(model, x, target, max_batch, **options):
    """Guided Backpropagation (Springenberg et al.), Captum's ``GuidedBackprop`` on ``hookable(model)``."""
    method = _captum("guided_backprop", model, x, "explainer 'guided_backprop'")
    return chunked(lambda xs, ts, **o: method.attribute(xs, target=ts, **o), x, target, max_batch, options)


@EXPLAINERS.register("deeplift", rows_per_input=lambda options: 2, members="batch", hooks=True)
def deeplift(model, x, target, max_batch, **options):
    """DeepLIFT's rescale rule (Shrikumar et al.), Captum's ``DeepLift`` on ``hookable(model)``,
    ``baselines`` zeros unless given (one shared reference or one per input); inputs and
    references go through one forward pass (2 rows per input)."""
    method = _captum("deeplift", model, x, "explainer 'deeplift'")
    return chunked(lambda xs, ts, **o: method.attribute(xs, target=ts, **o), x, target,
                   inputs_per_chunk(max_batch, 2), options)  # fmt: skip


@EXPLAINERS.register("deepshap", modalities=("rows",), needs=("baselines",), linear=True, members="batch",
                     hooks=True, rows_per_input=lambda o: 2 * len(o["baselines"]),
                     interleave=lambda o: len(o["baselines"]))  # fmt: skip
def deepshap(model, x, target, max_batch, baselines: torch.Tensor | None = None, **options):
    """DeepSHAP (Lundberg & Lee), Captum's ``DeepLiftShap`` on ``hookable(model)``: DeepLIFT
    against every row of the background sample ``baselines`` (B, ...), required, averaged;
    each input's B (input, reference) pairs go through one forward pass (2·B rows)."""
    if not isinstance(baselines, torch.Tensor) or baselines.shape[1:] != x.shape[1:]:
        raise InputError("explainer 'deepshap' needs option baselines: a background sample of inputs (B, "
                         f"{', '.join(map(str, x.shape[1:]))})")  # fmt: skip
    method = attr.DeepLiftShap(hookable(model, x, "explainer 'deepshap'"))
    return per_input_chunk(lambda xs, ts: method.attribute(xs, baselines=baselines.to(x), target=ts, **options),
                           x, target, inputs_per_chunk(max_batch, 2 * len(baselines)))  # fmt: skip


@EXPLAINERS.register("integrated_gradients", linear=True, members="batch", rows_per_input=option("n_steps", 50),
                     defaults={"n_steps": 50})  # fmt: skip
def integrated_gradients(model, x, target, max_batch, n_steps: int = 50, **options):
    """Integrated Gradients (Sundararajan et al.), Captum's ``IntegratedGradients`` with
    ``n_steps`` steps (Gauss-Legendre), ``baselines`` zeros unless given; Captum's
    ``internal_batch_size`` keeps a pass within ``max_batch`` rows."""
    options.setdefault("internal_batch_size", max_batch)
    ig = attr.IntegratedGradients(model)
    return chunked(lambda xs, ts, **o: ig.attribute(xs, target=ts, n_steps=n_steps, **o),
                   x, target, inputs_per_chunk(max_batch, n_steps), options)  # fmt: skip


def _base(name: str, model: nn.Module, x: torch.Tensor):
    """The noise tunnels' base method as ``attribute(xs, ts, **options)``."""
    if name not in NOISE_TUNNEL_BASES:
        raise InputError(f"option base={name!r}; expected one of {list(NOISE_TUNNEL_BASES)}")
    if name == "saliency":
        return lambda xs, ts, abs=False: gradient(model, xs, ts).abs() if abs else gradient(model, xs, ts)
    method = _captum(name, model, x, f"option base={name!r}")
    return lambda xs, ts, **options: method.attribute(xs, target=ts, **options)


def _noise_tunnel(nt_type: str):
    def run(model, x, target, max_batch, seeds, base: str = "saliency", nt_samples: int = 50, stdevs: float = 0.15,
            **options):  # fmt: skip
        stdevs = check_sampling("nt_samples", nt_samples, stdevs)
        if base == "integrated_gradients":
            options.setdefault("internal_batch_size", max_batch)
        rows = max(1, max_batch // 2) if base == "deeplift" else max_batch  # DeepLift: inputs and baselines
        method = _base(base, model, x)
        whole, per_input = per_input_options(options, x)

        def draw(seed):
            return (normal((nt_samples, *x.shape[1:]), stdevs, seed, x.device),)

        def attribute(xs, ts, **rows_options):
            return method(xs, ts, **whole, **rows_options)

        return sampled(x, target, rows, seeds, nt_samples, draw, attribute, nt_type, per_input)

    run.__doc__ = (f"{NOISE_TUNNEL_DOCS[nt_type]} of ``base`` (default Saliency; {', '.join(NOISE_TUNNEL_BASES[1:])}) "
                   "over ``nt_samples`` inputs x + ε, ε ~ N(0, stdevs²) in the input's units (Smilkov et al.'s σ, "
                   "0.15; Ley et al. use 0.1), each input's noise from its own seed (``batches.sampled``).")
    return run


NOISE_TUNNEL_DOCS = {"smoothgrad": "SmoothGrad (Smilkov et al.): the mean",
                     "smoothgrad_sq": "SmoothGrad² (Hooker et al.): the mean square",
                     "vargrad": "VarGrad (Adebayo et al.): the variance"}  # fmt: skip


def _noise_rows(options: dict) -> int:
    """A noise tunnel's rows per input: its samples, twice over a DeepLift base (inputs and references)."""
    return options.get("nt_samples", 50) * (2 if options.get("base") == "deeplift" else 1)


for _nt in NOISE_TUNNEL_DOCS:
    EXPLAINERS.register(_nt, draws="per_input", definition=2, rows_per_input=_noise_rows,
                        interleave=option("nt_samples", 50), members="batch", linear=_nt == "smoothgrad",
                        defaults={"base": "saliency", "nt_samples": 50, "stdevs": 0.15},
                        )(_noise_tunnel(_nt))  # fmt: skip


@EXPLAINERS.register("gradient_shap", needs=("baselines",), draws="per_input", definition=2, linear=True,
                     members="batch", rows_per_input=option("n_samples", 50), interleave=option("n_samples", 50),
                     defaults={"n_samples": 50, "stdevs": 0.0})  # fmt: skip
def gradient_shap(model, x, target, max_batch, seeds, baselines: torch.Tensor | None = None, n_samples: int = 50,
                  stdevs: float = 0.0, multiply_by_inputs: bool = True) -> torch.Tensor:  # fmt: skip
    """Expected Gradients (Erion et al.) as Captum's ``GradientShap`` computes it (NoiseTunnel
    over InputBaselineXGradient with references drawn from ``baselines`` (B, ...), required),
    written out so that input i's draws come from its own seed s_i: reference indices
    ``RandomState(s_i).choice(B, n)``, then noise from a torch generator seeded s_i, then α =
    ``RandomState(s_i).uniform(0, 1, n)`` (Captum's order, from NumPy's and torch's global
    generators, so a Captum call on input i alone after ``np.random.seed(s_i);
    torch.manual_seed(s_i)`` gives the same map on a CPU). Per sample: the gradient at
    α(x + ε) + (1 − α)b, times (x + ε − b) (``multiply_by_inputs``)."""
    if not isinstance(baselines, torch.Tensor) or baselines.dim() != x.dim() or baselines.shape[1:] != x.shape[1:]:
        raise InputError(
            "explainer 'gradient_shap' needs option baselines: a tensor of training inputs (B, "
            f"{', '.join(map(str, x.shape[1:]))}) to draw references from (Expected Gradients); got "
            f"{type(baselines).__name__ if not isinstance(baselines, torch.Tensor) else tuple(baselines.shape)}"
        )
    stdevs = check_sampling("n_samples", n_samples, stdevs)
    baselines = baselines.to(x.device, x.dtype)

    def draw(seed):
        numpy_generator = np.random.RandomState(seed)
        references = baselines[torch.from_numpy(numpy_generator.choice(len(baselines), n_samples))]
        noise = normal((n_samples, *x.shape[1:]), stdevs, seed, x.device)
        alpha = torch.tensor(numpy_generator.uniform(0.0, 1.0, n_samples), device=x.device, dtype=x.dtype)
        return noise, references, alpha

    def attribute(noisy, references, alpha, ts):
        alpha = alpha.view(-1, *[1] * (noisy.dim() - 1))
        grads = gradient(model, alpha * noisy + (1.0 - alpha) * references, ts)
        return (noisy - references) * grads if multiply_by_inputs else grads

    return sampled(x, target, max_batch, seeds, n_samples, draw, attribute, "smoothgrad", {})


def last_conv_block(model: nn.Module) -> nn.Module:
    """The module GradCAM explains by default: among ``model``'s children, the last that
    contains an ``nn.Conv2d`` (a ResNet's last stage, ``small_cnn``'s second convolution);
    where it is the only such child (a wrapper such as ``ImageClassifier.net``, a VGG's
    ``features``) the search goes on inside it, down to a ``Conv2d`` at most."""
    module = model
    while not isinstance(module, nn.Conv2d):
        convs = [c for c in module.children() if any(isinstance(m, nn.Conv2d) for m in c.modules())]
        if not convs:
            if module is model:
                raise InputError("explainer 'gradcam': the model has no nn.Conv2d; pass option layer=<module>")
            return module
        module = convs[-1]
        if len(convs) > 1:
            return module
    return module


@EXPLAINERS.register("gradcam", modalities=("images",), members="each")
def gradcam(model, x, target, max_batch, layer: nn.Module | None = None, interpolate_mode: str = "bilinear",
            **options):  # fmt: skip
    """Grad-CAM (Selvaraju et al.), Captum's ``LayerGradCam`` (``relu_attributions=True``) on
    ``layer`` (default :func:`last_conv_block`), upsampled to (H, W) and repeated over the C channels."""
    options.setdefault("relu_attributions", True)
    cam = attr.LayerGradCam(model, layer if layer is not None else last_conv_block(model))

    def run(xs, ts):
        maps = cam.attribute(xs, target=ts, **options)
        if maps.dim() != 4:
            raise InputError(f"explainer 'gradcam': the layer's output has shape {tuple(maps.shape)}; "
                             "expected (N, channels, h, w): pass option layer=<a convolutional module>")
        return attr.LayerAttribution.interpolate(maps, tuple(xs.shape[2:]), interpolate_mode)

    maps = per_input_chunk(run, x, target, max_batch)
    return maps.expand(-1, x.shape[1], -1, -1).contiguous()


__all__ = ["NOISE_TUNNEL_BASES", "last_conv_block"]
