"""Explainers of any classifier over Captum, one class per input: the registry's ``run``
(``evaluators.maps.EXPLAINERS``), called through :func:`explain_classifier`.

``model`` maps inputs (N, ...) to logits (N, K): any ``nn.Module`` (a network from
``create_image_model``, an ``ImageClassifier``, a torchvision or timm model, an
``nn.Sequential`` on rows (N, d)). Every method explains one class per input, ``target``:
by default the predicted class (``lightning_modules.interface.default_targets``, computed
once before attribution), else an int (one class for all inputs) or a LongTensor of N
labels. Maps keep the input's shape; ``reduce_map(maps, how)`` reduces images' (N, C, H,
W) maps to (N, H, W).

Methods, options, random draws (each input's own seed) and the ``max_batch`` memory bound
(``MAX_BATCH`` rows, ``PIXELS_PER_PASS`` pixels per pass): docs/explainers.md.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable

import numpy as np
import torch
from captum import attr
from torch import nn
from torch.nn import functional as F

from evaluators.maps.hooks import hookable
from foundation.batching import resolve_max_batch
from foundation.devices import model_device
from foundation.errors import InputError
from foundation.seeds import seeded_generators
from lightning_modules.interface import default_targets

NOISE_TUNNEL_BASES = ("saliency", "integrated_gradients", "input_x_gradient", "guided_backprop", "deeplift")
REDUCTIONS = ("sum", "abs_sum", "max_abs")
HOOKED = {attr.DeepLift: "deeplift", attr.GuidedBackprop: "guided_backprop"}  # explained on ``hooks.hookable``


def _chunks(n: int, size: int):
    for start in range(0, n, size):
        yield slice(start, min(start + size, n))


def _images_per_chunk(max_batch: int, rows_per_image: int) -> int:
    return max(1, max_batch // max(1, rows_per_image))


def _per_image_chunk(run: Callable, x: torch.Tensor, target: torch.Tensor, images: int) -> torch.Tensor:
    return torch.cat([run(x[s], target[s]) for s in _chunks(len(x), images)])


def _per_image_options(options: dict, x: torch.Tensor) -> tuple[dict, dict]:
    """``options`` split into those that go whole and a ``baselines`` tensor with one
    reference per image, (N, C, H, W), which goes with its images; any other (one shared
    reference (1, C, H, W), a scalar) goes whole."""
    baselines = options.get("baselines")
    if isinstance(baselines, torch.Tensor) and baselines.dim() == x.dim() and len(baselines) == len(x) > 1:
        return {k: v for k, v in options.items() if k != "baselines"}, {"baselines": baselines.to(x.device)}
    return options, {}


def _chunked_baselines(options: dict, x: torch.Tensor) -> Callable[[slice], dict]:
    """``options`` for one chunk of images (:func:`_per_image_options`)."""
    whole, per_image = _per_image_options(options, x)
    return lambda s: {**whole, **{k: v[s] for k, v in per_image.items()}}


def _chunked(run: Callable, x: torch.Tensor, target: torch.Tensor, images: int, options: dict) -> torch.Tensor:
    """``run(xs, ts, **chunk_options)`` over chunks of ``images`` images."""
    part = _chunked_baselines(options, x)
    return torch.cat([run(x[s], target[s], **part(s)) for s in _chunks(len(x), images)])


def _plain(cls, rows_per_image: int = 1, **defaults) -> Callable:
    """A Captum method whose forward passes see ``rows_per_image`` rows per image."""

    def run(model, x, target, max_batch, **options):
        method = cls(hookable(model, x, f"explainer {HOOKED[cls]!r}") if cls in HOOKED else model)
        return _chunked(lambda xs, ts, **o: method.attribute(xs, target=ts, **o),
                        x, target, _images_per_chunk(max_batch, rows_per_image), {**defaults, **options})  # fmt: skip

    return run


def _seeded_per_input(cls, **defaults) -> Callable:
    """A Captum method drawing from the global generators, each input in a call of its own
    within :func:`seeded_generators` of its seed."""

    def run(model, x, target, max_batch, seeds, **options):
        method = cls(model)
        out = []
        for i, seed in enumerate(seeds):
            with seeded_generators(seed, x.device):
                out.append(method.attribute(x[i : i + 1], target=target[i : i + 1], **{**defaults, **options}))
        return torch.cat(out)

    return run


def _deepshap(model, x, target, max_batch, baselines: torch.Tensor | None = None, **options):
    """Captum's DeepLiftShap over the background sample ``baselines`` (B, ...), required."""
    if not isinstance(baselines, torch.Tensor) or baselines.shape[1:] != x.shape[1:]:
        raise InputError("explainer 'deepshap' needs option baselines: a background sample of inputs (B, "
                         f"{', '.join(map(str, x.shape[1:]))})")  # fmt: skip
    method = attr.DeepLiftShap(hookable(model, x, "explainer 'deepshap'"))
    return _per_image_chunk(lambda xs, ts: method.attribute(xs, baselines=baselines.to(x), target=ts, **options),
                            x, target, _images_per_chunk(max_batch, 2 * len(baselines)))  # fmt: skip


def _integrated_gradients(model, x, target, max_batch, n_steps: int = 50, **options):
    options.setdefault("internal_batch_size", max_batch)
    ig = attr.IntegratedGradients(model)
    return _chunked(lambda xs, ts, **o: ig.attribute(xs, target=ts, n_steps=n_steps, **o),
                    x, target, _images_per_chunk(max_batch, n_steps), options)  # fmt: skip


def _base_method(name: str, model: nn.Module, x: torch.Tensor) -> attr.Attribution:
    if name not in NOISE_TUNNEL_BASES:
        raise InputError(f"option base={name!r}; expected one of {list(NOISE_TUNNEL_BASES)}")
    model = hookable(model, x, f"option base={name!r}") if name in HOOKED.values() else model
    return {"saliency": attr.Saliency, "integrated_gradients": attr.IntegratedGradients,
            "input_x_gradient": attr.InputXGradient, "guided_backprop": attr.GuidedBackprop,
            "deeplift": attr.DeepLift}[name](model)  # fmt: skip


def _normal(shape: tuple, stdevs: float, seed: int, device: torch.device) -> torch.Tensor:
    """N(0, stdevs²) noise of ``shape``, drawn as Captum's NoiseTunnel draws it
    (``torch.normal(0, tensor(stdevs).repeat(shape))``) from a generator on ``device`` seeded with ``seed``."""
    generator = torch.Generator(device=device).manual_seed(seed)
    return torch.normal(0, torch.tensor(stdevs, device=device).repeat(shape), generator=generator)


def _check_sampling(name: str, samples, stdevs) -> float:
    """``stdevs`` as a float, after checking it and the sample count ``name=samples``."""
    if isinstance(samples, bool) or not isinstance(samples, numbers.Integral) or samples < 1:
        raise InputError(f"option {name}={samples!r}; expected a positive integer (samples per image)")
    if isinstance(stdevs, bool) or not isinstance(stdevs, numbers.Real) or not stdevs >= 0 or math.isinf(stdevs):
        raise InputError(f"option stdevs={stdevs!r}; expected a non-negative number (the noise's std)")
    return float(stdevs)


def _sampled(x, target, max_batch, seeds, n, draw, attribute, nt_type: str, per_image: dict) -> torch.Tensor:
    """Captum's NoiseTunnel written out so that each image's draws depend only on its own seed.

    Image i's n samples are ``draw(x_i, seeds[i])``: a tuple of per-sample tensors (n, ...),
    the noisy inputs first; ``per_image`` tensors (one row per image, e.g. per-image
    baselines) are repeated for its n samples. ``attribute(*sample_rows, targets,
    **rows_of_per_image)`` explains at most ``max_batch`` sample rows at a time; then per
    image the mean over its samples (``smoothgrad``), the mean square (``smoothgrad_sq``) or
    mean square − square mean (``vargrad``), summed and scaled by 1/n as Captum does."""
    out = []
    for s in _chunks(len(x), _images_per_chunk(max_batch, n)):
        samples = [torch.cat(parts) for parts in zip(*(draw(x[i], seeds[i]) for i in range(s.start, s.stop)))]
        rows_target = target[s].repeat_interleave(n)
        extra = {k: v[s].repeat_interleave(n, dim=0) for k, v in per_image.items()}
        a = torch.cat([attribute(*(t[p] for t in samples), rows_target[p], **{k: v[p] for k, v in extra.items()})
                       for p in _chunks(len(rows_target), max_batch)])  # fmt: skip
        a = a.view(s.stop - s.start, n, *x.shape[1:])
        mean = a.sum(1) * (1 / n)
        if nt_type == "smoothgrad":
            out.append(mean)
            continue
        mean_sq = a.pow(2).sum(1) * (1 / n)
        out.append(mean_sq if nt_type == "smoothgrad_sq" else mean_sq - mean * mean)
    return torch.cat(out)


def _noise_tunnel(nt_type: str) -> Callable:
    def run(model, x, target, max_batch, seeds, base: str = "saliency", nt_samples: int = 50, stdevs: float = 0.15,
            **options):  # fmt: skip
        stdevs = _check_sampling("nt_samples", nt_samples, stdevs)
        if base == "saliency":
            options.setdefault("abs", False)
        if base == "integrated_gradients":
            options.setdefault("internal_batch_size", max_batch)
        rows = max(1, max_batch // 2) if base == "deeplift" else max_batch  # DeepLift: inputs and baselines
        method = _base_method(base, model, x)
        whole, per_image = _per_image_options(options, x)

        def draw(xi, seed):
            return (xi[None] + _normal((nt_samples, *xi.shape), stdevs, seed, xi.device),)

        def attribute(xs, ts, **rows_options):
            return method.attribute(xs, target=ts, **whole, **rows_options)

        return _sampled(x, target, rows, seeds, nt_samples, draw, attribute, nt_type, per_image)

    return run


def _gradient_shap(model, x, target, max_batch, seeds, baselines: torch.Tensor | None = None, n_samples: int = 50,
                   stdevs: float = 0.0, multiply_by_inputs: bool = True) -> torch.Tensor:  # fmt: skip
    """Expected Gradients as Captum's GradientShap computes it (NoiseTunnel over
    InputBaselineXGradient with baselines drawn from the distribution), written out so that
    image i's draws come from its own seed s_i: baseline indices ``RandomState(s_i).choice(B,
    n)``, then noise from a torch generator seeded s_i, then α = ``RandomState(s_i).uniform(0, 1,
    n)`` (Captum's order, from NumPy's and torch's global generators, so a Captum call on image
    i alone after ``np.random.seed(s_i); torch.manual_seed(s_i)`` gives the same map on a CPU).
    Per sample: the gradient at α(x + ε) + (1 − α)b, times (x + ε − b) (``multiply_by_inputs``)."""
    if not isinstance(baselines, torch.Tensor) or baselines.dim() != x.dim() or baselines.shape[1:] != x.shape[1:]:
        raise InputError(
            "explainer 'gradient_shap' needs option baselines: a tensor of training inputs (B, "
            f"{', '.join(map(str, x.shape[1:]))}) to draw references from (Expected Gradients); got "
            f"{type(baselines).__name__ if not isinstance(baselines, torch.Tensor) else tuple(baselines.shape)}"
        )
    stdevs = _check_sampling("n_samples", n_samples, stdevs)
    baselines = baselines.to(x.device, x.dtype)
    saliency = attr.Saliency(model)

    def draw(xi, seed):
        numpy_generator = np.random.RandomState(seed)
        references = baselines[torch.from_numpy(numpy_generator.choice(len(baselines), n_samples))]
        noisy = xi[None] + _normal((n_samples, *xi.shape), stdevs, seed, xi.device)
        alpha = torch.tensor(numpy_generator.uniform(0.0, 1.0, n_samples), device=xi.device, dtype=xi.dtype)
        return noisy, references, alpha

    def attribute(noisy, references, alpha, ts):
        alpha = alpha.view(-1, *[1] * (noisy.dim() - 1))
        grads = saliency.attribute(alpha * noisy + (1.0 - alpha) * references, target=ts, abs=False)
        return (noisy - references) * grads if multiply_by_inputs else grads

    return _sampled(x, target, max_batch, seeds, n_samples, draw, attribute, "smoothgrad", {})


def _occlusion(model, x, target, max_batch, sliding_window_shapes=None, strides=None, **options):
    c, h, w = x.shape[1:]
    if sliding_window_shapes is None:
        sliding_window_shapes = (c, min(8, h), min(8, w))
    if strides is None:
        strides = (c, *(max(1, k // 2) for k in sliding_window_shapes[1:]))
    images = _images_per_chunk(max_batch, 1)
    options.setdefault("perturbations_per_eval", max(1, max_batch // min(images, len(x))))
    occ = attr.Occlusion(model)
    return _per_image_chunk(
        lambda xs, ts: occ.attribute(xs, sliding_window_shapes=tuple(sliding_window_shapes), strides=tuple(strides),
                                     target=ts, **options),
        x, target, images,
    )  # fmt: skip


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


def _gradcam(model, x, target, max_batch, layer: nn.Module | None = None, interpolate_mode: str = "bilinear",
             **options):  # fmt: skip
    options.setdefault("relu_attributions", True)
    cam = attr.LayerGradCam(model, layer if layer is not None else last_conv_block(model))

    def run(xs, ts):
        maps = cam.attribute(xs, target=ts, **options)
        if maps.dim() != 4:
            raise InputError(f"explainer 'gradcam': the layer's output has shape {tuple(maps.shape)}; "
                             "expected (N, channels, h, w): pass option layer=<a convolutional module>")
        return attr.LayerAttribution.interpolate(maps, tuple(xs.shape[2:]), interpolate_mode)

    maps = _per_image_chunk(run, x, target, _images_per_chunk(max_batch, 1))
    return maps.expand(-1, x.shape[1], -1, -1).contiguous()


def rise_masks(n_masks: int, s: int, p: float, height: int, width: int,
               generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """The random parts of RISE's masks, drawn on the CPU: grids (n_masks, s, s) of 0/1,
    each cell 1 with probability p, and shifts (n_masks, 2) in [0, cell height) x [0, cell
    width), in this order from ``generator`` (the global one if None)."""
    cell_h, cell_w = math.ceil(height / s), math.ceil(width / s)
    grids = (torch.rand(n_masks, s, s, generator=generator) < p).float()
    dy = torch.randint(0, cell_h, (n_masks,), generator=generator)
    dx = torch.randint(0, cell_w, (n_masks,), generator=generator)
    return grids, torch.stack([dy, dx], dim=1)


def upsample_masks(grids: torch.Tensor, shifts: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """Masks (n, 1, height, width): each s x s grid bilinearly upsampled to (s + 1) cells of
    ceil(H/s) x ceil(W/s) pixels and cropped at its shift, as Petsiuk et al.'s code does (it
    uses skimage's resize with reflect padding; ``F.interpolate(align_corners=False)``
    replicates the edge instead, which differs only within half a cell of the border)."""
    s = grids.shape[-1]
    cell_h, cell_w = math.ceil(height / s), math.ceil(width / s)
    up = F.interpolate(grids[:, None], size=((s + 1) * cell_h, (s + 1) * cell_w), mode="bilinear",
                       align_corners=False)  # fmt: skip
    rows = shifts[:, 0, None] + torch.arange(height, device=grids.device)  # (n, H)
    cols = shifts[:, 1, None] + torch.arange(width, device=grids.device)  # (n, W)
    index = torch.arange(len(grids), device=grids.device)[:, None, None]
    return up[:, 0][index, rows[:, :, None], cols[:, None, :]][:, None]


def rise(model, x, target, max_batch, n_masks: int = 4000, s: int = 8, p: float = 0.5, seed: int = 0,
         probabilities: bool = True) -> torch.Tensor:  # fmt: skip
    """RISE (Petsiuk et al. 2018): saliency = Σ_i f_c(x ⊙ M_i) M_i / (n_masks · p), with
    f_c the softmax probability of the target class (the logit if ``probabilities=False``)
    and M_i the masks of :func:`rise_masks` / :func:`upsample_masks` (one channel, applied to
    all C). The grids and shifts are drawn up front, from ``torch.Generator().manual_seed(seed)``:
    every image sees the same masks; they are upsampled and evaluated
    ``max_batch // images`` at a time for chunks of at most ``max_batch`` images, without
    gradients. Returns (N, C, H, W): the one-channel map repeated over C."""
    n, c, height, width = x.shape
    grids, shifts = rise_masks(n_masks, s, p, height, width, torch.Generator().manual_seed(seed))
    grids, shifts = grids.to(x.device, x.dtype), shifts.to(x.device)
    out = torch.zeros(n, height, width, dtype=x.dtype, device=x.device)
    with torch.no_grad():
        for im in _chunks(n, max(1, min(n, max_batch))):
            xs, ts = x[im], target[im]
            per_chunk = max(1, max_batch // len(xs))
            for mk in _chunks(n_masks, per_chunk):
                masks = upsample_masks(grids[mk], shifts[mk], height, width)  # (m, 1, H, W)
                logits = model((xs[:, None] * masks[None]).flatten(0, 1)).view(len(xs), len(masks), -1)
                scores = logits.softmax(-1) if probabilities else logits
                score = scores.gather(2, ts[:, None, None].expand(-1, len(masks), 1))[..., 0]  # (images, m)
                out[im] += torch.einsum("nm,mhw->nhw", score, masks[:, 0])
    return (out / (n_masks * p))[:, None].expand(-1, c, -1, -1).contiguous()


def explain_classifier(model: nn.Module, x: torch.Tensor, run: Callable, draws: dict, target=None,
                       max_batch: int | None = None, **options) -> torch.Tensor:  # fmt: skip
    """``run(model, x, target, max_batch, **draws, **options)`` (a registry ``run``), the model
    in eval mode (restored afterwards) on its own device, where ``x`` and the maps go, the
    target per input resolved by ``interface.default_targets``, ``max_batch`` by :func:`resolve_max_batch`."""
    was_training = model.training
    model.eval()
    # Captum's DeepLift undoes max-pooling with max_unpool2d, which has no deterministic
    # kernel: under torch.use_deterministic_algorithms(True) (a Trainer with
    # deterministic=True leaves it on) such ops warn during the explanation instead of failing.
    strict = torch.are_deterministic_algorithms_enabled() and not torch.is_deterministic_algorithms_warn_only_enabled()
    try:
        if strict:
            torch.use_deterministic_algorithms(True, warn_only=True)
        x = x.detach().to(model_device(model, x))
        max_batch = resolve_max_batch(max_batch, x)
        return run(model, x, default_targets(model, x, target, max_batch), max_batch, **draws, **options)
    finally:
        model.train(was_training)
        if strict:
            torch.use_deterministic_algorithms(True)


def reduce_map(maps: torch.Tensor, how: str = "abs_sum") -> torch.Tensor:
    """(N, C, H, W) maps to (N, H, W) over channels: ``sum``, ``abs_sum`` (sum of
    absolute values) or ``max_abs`` (largest absolute value)."""
    if how not in REDUCTIONS:
        raise InputError(f"option how={how!r}; expected one of {list(REDUCTIONS)}")
    if maps.dim() != 4:
        raise InputError(f"maps of shape {tuple(maps.shape)}; expected (N, C, H, W)")
    if how == "sum":
        return maps.sum(1)
    return maps.abs().sum(1) if how == "abs_sum" else maps.abs().amax(1)
