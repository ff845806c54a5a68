"""The perturbation explainers, one definition each for every model (``evaluators.maps.EXPLAINERS``):
Feature Ablation, LIME, KernelSHAP, Shapley value sampling (rows), Occlusion and RISE (images).

Each is ``run(model, x, target, max_batch, **draws, **options)`` (``maps.registry``), ``model``
mapping inputs (N, ...) to class scores (N, K), one class per input, ``target`` (N,).
LIME and KernelSHAP explain each input in a Captum call of its own within
``seeds.seeded_generators`` of its seed; Shapley value sampling draws input i's permutations
from a generator seeded with its own seed and evaluates every input's coalitions in one pass per
step (:func:`shapley_value_sampling`). Methods, options and defaults: docs/explainers.md.
"""

from __future__ import annotations

import math

import torch
from captum import attr
from torch.nn import functional as F

from evaluators.maps.batches import chunked, chunks, per_input_chunk
from evaluators.maps.registry import EXPLAINERS
from foundation.errors import InputError
from foundation.seeds import seeded_generators


@EXPLAINERS.register("feature_ablation", modalities=("rows",), members="batch")
def feature_ablation(model, x, target, max_batch, **options):
    """Feature ablation, Captum's ``FeatureAblation``: each feature in turn set to ``baselines``
    (zeros unless given), the change of the target's score."""
    method = attr.FeatureAblation(model)
    return chunked(lambda xs, ts, **o: method.attribute(xs, target=ts, **o), x, target, max_batch, options)


def _seeded_per_input(cls, **defaults):
    """A Captum method drawing from the global generators, each input in a call of its own
    within :func:`seeded_generators` of its seed."""

    def run(model, x, target, max_batch, seeds, **options):
        method = cls(model)
        out = []
        for i, seed in enumerate(seeds):
            with seeded_generators(seed, x.device):
                out.append(method.attribute(x[i : i + 1], target=target[i : i + 1], **{**defaults, **options}))
        return torch.cat(out)

    run.__doc__ = (f"Captum's ``{cls.__name__}`` (``n_samples={defaults['n_samples']}``), input by input, each from "
                   "its own seed.")
    return run


for _name, _cls in (("lime", attr.Lime), ("kernel_shap", attr.KernelShap)):
    EXPLAINERS.register(_name, modalities=("rows",), draws="per_input", definition=2, members="each",
                        defaults={"n_samples": 200})(_seeded_per_input(_cls, n_samples=200))  # fmt: skip


@EXPLAINERS.register("shapley_value_sampling", modalities=("rows",), draws="per_input", definition=2,
                     members="batch", rows_per_input=lambda options: 1, defaults={"n_samples": 25})  # fmt: skip
def shapley_value_sampling(model, x, target, max_batch, seeds, n_samples: int = 25, baselines=0.0):
    """Shapley value sampling (Castro et al.), as Captum's ``ShapleyValueSampling`` computes it
    for one input after ``torch.manual_seed(s_i)``: ``n_samples`` permutations π of the d
    features, input i's from ``torch.randperm(d, generator=Generator().manual_seed(s_i))``; along
    each, the features of π are switched from ``baselines`` (zeros unless given: a number, one
    reference (1, d) or one per input (N, d)) to the input one at a time, and each feature gets
    the change of the target's score; the mean over the permutations. Every input's j-th
    coalition goes through one forward pass (without gradients)."""
    if isinstance(n_samples, bool) or not isinstance(n_samples, int) or n_samples < 1:
        raise InputError(f"option n_samples={n_samples!r}; expected a positive integer (permutations per input)")
    n, d = x.shape
    reference = torch.as_tensor(baselines, dtype=x.dtype, device=x.device).expand(n, d)
    permutations = torch.stack([torch.stack([torch.randperm(d, generator=generator) for _ in range(n_samples)])
                                for generator in (torch.Generator().manual_seed(s) for s in seeds)]).to(x.device)
    total = torch.zeros_like(x)
    rows = torch.arange(n, device=x.device)
    with torch.no_grad():
        for part in chunks(n, max_batch):
            xs, ts, ref, idx = x[part], target[part, None], reference[part], rows[: part.stop - part.start]
            first = model(ref).gather(1, ts)[:, 0]
            for k in range(n_samples):
                current, previous = ref.clone(), first
                for j in range(d):
                    feature = permutations[part, k, j]
                    current[idx, feature] = xs[idx, feature]
                    score = model(current).gather(1, ts)[:, 0]
                    total[part][idx, feature] += score - previous
                    previous = score
    return total / n_samples


@EXPLAINERS.register("occlusion", modalities=("images",), members="each")
def occlusion(model, x, target, max_batch, sliding_window_shapes=None, strides=None, **options):
    """Occlusion (Zeiler & Fergus), Captum's ``Occlusion``: windows ``sliding_window_shapes``
    (default (C, 8, 8), capped at H, W) moved by ``strides`` (default half the window), set to 0."""
    c, h, w = x.shape[1:]
    if sliding_window_shapes is None:
        sliding_window_shapes = (c, min(8, h), min(8, w))
    if strides is None:
        strides = (c, *(max(1, k // 2) for k in sliding_window_shapes[1:]))
    options.setdefault("perturbations_per_eval", max(1, max_batch // min(max_batch, len(x))))
    occ = attr.Occlusion(model)
    return per_input_chunk(
        lambda xs, ts: occ.attribute(xs, sliding_window_shapes=tuple(sliding_window_shapes), strides=tuple(strides),
                                     target=ts, **options),
        x, target, max_batch,
    )  # fmt: skip


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


@EXPLAINERS.register("rise", modalities=("images",), draws="seed", members="each",
                     defaults={"n_masks": 4000, "s": 8, "p": 0.5})
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
        for im in chunks(n, max(1, min(n, max_batch))):
            xs, ts = x[im], target[im]
            per_chunk = max(1, max_batch // len(xs))
            for mk in chunks(n_masks, per_chunk):
                masks = upsample_masks(grids[mk], shifts[mk], height, width)  # (m, 1, H, W)
                logits = model((xs[:, None] * masks[None]).flatten(0, 1)).view(len(xs), len(masks), -1)
                scores = logits.softmax(-1) if probabilities else logits
                score = scores.gather(2, ts[:, None, None].expand(-1, len(masks), 1))[..., 0]  # (images, m)
                out[im] += torch.einsum("nm,mhw->nhw", score, masks[:, 0])
    return (out / (n_masks * p))[:, None].expand(-1, c, -1, -1).contiguous()


__all__ = ["rise_masks", "upsample_masks"]
