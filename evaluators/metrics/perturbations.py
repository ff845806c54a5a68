"""The random perturbations that Decker et al. (2024) fit their aggregation weights on and
that their metrics score maps with: seeded, batched, on the input's device.

Two kinds, each drawn ``n_samples`` times per input:

* **Uniform noise** (Average- and Max-Sensitivity, Γ_robust; Decker et al. App. C.1):
  x + ε, ε ~ U[−r, r] independently per element (the L∞ ball of radius r; r = 0.1 as
  Decker et al. and their code, which adds ``uniform_(-r, r)`` noise to the normalised
  input). ``uniform_noise``.
* **Random subsets of groups of units** (Infidelity, Γ_faith; App. C.1): the units
  (pixels of an image, features of a tabular row) are partitioned into K groups; a
  sample removes ⌊share · K⌋ groups (at least one) drawn uniformly without replacement
  (share = 0.2 as Decker et al.: "randomly select an image area of 20 %"), i.e. the
  binary perturbation I ∈ {0, 1}^d of Yeh et al. is 1 on the removed units, and the
  perturbed input is h(x, x_b, I) = x_b where I = 1, x elsewhere. ``subset_choices``.

  - Images: the groups are SLIC superpixels (Achanta et al. 2012; scikit-image's
    ``slic``) of each image, ``superpixels``: n_segments = 50, compactness = 10, sigma = 1,
    start_label = 0, as the reference code's ``get_segments`` (``thomdeck/aggopt``). SLIC
    returns about, not exactly, n_segments superpixels; each image is first min-max scaled
    to [0, 1] over all its values. All C channels of a pixel move together. The replacement
    x_b is a Gaussian-blurred copy of the image, ``gaussian_blur`` with σ = 10 (where this
    departs from the reference code, and why: docs/fidelity_metrics.md).
  - Images, ``units="pixels"``: every pixel is its own group (K = H W, ``pixel_groups``),
    the random pixel subsets of Bhatt et al.'s faithfulness correlation and Quantus.
  - Tabular rows: every feature is its own group (K = d) and the replacement is a
    fixed row, the training set's feature means (as Ley et al.'s baseline).

**Seeds.** Every draw comes from a CPU ``torch.Generator`` of its own per input, seeded
from (seed, stream, kind, index) through NumPy's ``SeedSequence`` (``sample_generator``):
``index`` is the input's position in the call (plus ``offset``), ``kind`` is ``"noise"`` or
``"subsets"`` and ``stream`` is ``"evaluation"`` (the metrics) or ``"fitting"`` (the
weights of ``evaluators.aggregators.optimised_aggregators``). Distinct tuples give
independent streams, so fitting and evaluation samples of one input and seed are
independent draws, and an input's samples do not depend on the other inputs, on
chunking, or on the device (drawn on the CPU, then moved).
"""

from __future__ import annotations

import math
import numbers
from typing import NamedTuple

import numpy as np
import torch
from skimage.segmentation import slic
from torchvision.transforms.functional import gaussian_blur as _torchvision_blur

from foundation.errors import InputError
from foundation.finite import check_finite

STREAMS = {"evaluation": 0, "fitting": 1}
KINDS = {"noise": 0, "subsets": 1}
RADIUS, SHARE, BLUR_SIGMA = 0.1, 0.2, 10.0  # Decker et al. App. C.1 and their code
N_SEGMENTS, COMPACTNESS, SLIC_SIGMA = 50, 10.0, 1.0  # the reference's get_segments
TRUNCATE = 4.0  # Gaussian kernels reach 4 σ, as scipy.ndimage's default


def check_count(option: str, value, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise InputError(f"option {option}={value!r}; expected an integer >= {minimum}")
    return int(value)


def check_real(option: str, value, low: float, high: float = math.inf, low_open: bool = True) -> float:
    """A finite real in (low, high] (or [low, high] with ``low_open=False``)."""
    ok = (isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
          and (value > low if low_open else value >= low) and value <= high)  # fmt: skip
    if not ok:
        interval = f"{'(' if low_open else '['}{low}, {high}{']' if math.isfinite(high) else ')'}"
        raise InputError(f"option {option}={value!r}; expected a number in {interval}")
    return float(value)


def sample_generator(seed: int, stream: str, kind: str, index: int) -> torch.Generator:
    """The CPU generator of input ``index``'s samples of ``kind`` in ``stream`` (see the module's docstring)."""
    if stream not in STREAMS:
        raise InputError(f"option stream={stream!r}; expected one of {list(STREAMS)}")
    seed = check_count("seed", seed, 0)
    high, low = np.random.SeedSequence([seed, STREAMS[stream], KINDS[kind], index]).generate_state(2)
    return torch.Generator().manual_seed((int(high) << 32) | int(low))


def uniform_noise(x: torch.Tensor, n_samples: int, radius: float = RADIUS, seed: int = 0,
                  stream: str = "evaluation", offset: int = 0) -> torch.Tensor:  # fmt: skip
    """(N, n_samples, *x.shape[1:]): x_i + ε_{i,s}, ε uniform in [−radius, radius] per element,
    in x's dtype on x's device; input i's noise from ``sample_generator(seed, stream,
    "noise", offset + i)``."""
    n_samples, radius = check_count("n_samples", n_samples), check_real("radius", radius, 0)
    noise = torch.stack([
        torch.rand((n_samples, *x.shape[1:]), generator=sample_generator(seed, stream, "noise", offset + i),
                   dtype=x.dtype)
        for i in range(len(x))
    ])  # fmt: skip
    return x.unsqueeze(1) + (2 * noise - 1).to(x.device) * radius


def gaussian_blur(images: torch.Tensor, sigma: float) -> torch.Tensor:
    """``images`` (..., H, W) blurred over H and W by a Gaussian of standard deviation ``sigma``
    (pixels): torchvision's ``gaussian_blur`` with reflect padding and a kernel reaching
    ⌊4σ + ½⌋ pixels to each side (scipy's ``truncate=4``), capped at H − 1 and W − 1, the
    most that reflect padding allows (on 32 × 32 images σ = 10 is truncated at 3.1σ)."""
    sigma = check_real("blur sigma", sigma, 0)
    height, width = images.shape[-2:]
    radius = int(TRUNCATE * sigma + 0.5)
    kernel = [2 * min(radius, width - 1) + 1, 2 * min(radius, height - 1) + 1]
    return _torchvision_blur(images, kernel, [sigma, sigma])


def tensor_baseline(x: torch.Tensor, baseline: torch.Tensor) -> torch.Tensor:
    """The replacement values that option ``baseline``, a tensor of ``x``'s shape or of one input's,
    gives for the inputs ``x`` (N, ...): on ``x``'s device and dtype, expanded to ``x``'s shape;
    another shape, or a NaN or ±inf value, is an ``InputError``."""
    if baseline.shape not in (x.shape, x.shape[1:]):
        raise InputError(f"option baseline: a tensor of shape {tuple(baseline.shape)}; expected "
                         f"{tuple(x.shape)} or one input's {tuple(x.shape[1:])}")  # fmt: skip
    baseline = baseline.to(x.device, x.dtype).expand_as(x)
    check_finite(baseline, "option baseline", "input")
    return baseline


def superpixels(images: torch.Tensor, n_segments: int = N_SEGMENTS, compactness: float = COMPACTNESS) -> torch.Tensor:
    """(N, H, W) SLIC superpixel labels 0 … K_i − 1 of images (N, C, H, W) (see the module's
    docstring), on the images' device; computed on the CPU with NumPy, image by image."""
    n_segments = check_count("n_segments", n_segments)
    compactness = check_real("compactness", compactness, 0)
    labels = []
    for image in images.detach().to("cpu", torch.float64):
        low, high = image.min(), image.max()
        scaled = ((image - low) / (high - low) if high > low else torch.zeros_like(image)).permute(1, 2, 0).numpy()
        single = scaled.shape[-1] == 1
        segments = slic(scaled[..., 0] if single else scaled, n_segments=n_segments, compactness=compactness,
                        sigma=SLIC_SIGMA, start_label=0, channel_axis=None if single else -1)  # fmt: skip
        labels.append(np.unique(segments, return_inverse=True)[1].reshape(segments.shape))
    return torch.from_numpy(np.stack(labels)).to(images.device)


def pixel_groups(images: torch.Tensor) -> torch.Tensor:
    """(N, H, W): every pixel of an image (N, C, H, W) is its own group (its row-major
    index), the units of Bhatt et al.'s and Quantus's random subsets."""
    height, width = images.shape[2:]
    return torch.arange(height * width, device=images.device).view(height, width).expand(len(images), -1, -1)


def feature_groups(rows: torch.Tensor) -> torch.Tensor:
    """(N, d): every feature of a tabular row is its own group."""
    return torch.arange(rows.shape[1], device=rows.device).expand(len(rows), -1)


def subset_choices(groups: torch.Tensor, n_samples: int, share: float = SHARE, seed: int = 0,
                   stream: str = "evaluation", offset: int = 0) -> torch.Tensor:  # fmt: skip
    """(N, n_samples, K) bool, K = the most groups of any input: sample s of input i removes
    the groups where it is True, ⌊share · K_i⌋ of input i's K_i groups (at least one),
    uniform without replacement (the first of a uniformly random order: ``torch.rand`` from
    ``sample_generator(seed, stream, "subsets", offset + i)``, argsorted). ``groups``
    (N, *S) labels 0 … K_i − 1 per input (``superpixels``, ``feature_groups``)."""
    n_samples, share = check_count("n_samples", n_samples), check_real("share", share, 0, 1)
    counts = groups.flatten(1).amax(1).tolist()
    width = int(max(counts)) + 1
    chosen = torch.zeros((len(groups), n_samples, width), dtype=torch.bool)
    for i, top in enumerate(counts):
        k = int(top) + 1
        order = torch.rand((n_samples, k), generator=sample_generator(seed, stream, "subsets", offset + i)).argsort(1)
        chosen[i].scatter_(1, order[:, : max(1, int(share * k))], True)
    return chosen.to(groups.device)


def unit_masks(groups: torch.Tensor, chosen: torch.Tensor) -> torch.Tensor:
    """(R, *S) bool, True on the removed units: ``groups`` (R, *S) and ``chosen`` (R, K), one
    sample per row."""
    return chosen.gather(1, groups.flatten(1)).view(groups.shape)


class SubsetSamples(NamedTuple):
    """Random-subset perturbations of N inputs and the model's response to them.

    groups: (N, *S) long, each unit's group (superpixel, feature) 0 … K_i − 1.
    chosen: (N, n, K) bool, the groups each sample removes.
    deltas: (N, n), f(x) − f(h(x, x_b, I)) of the explained output f.
    """

    groups: torch.Tensor
    chosen: torch.Tensor
    deltas: torch.Tensor

    def group_sums(self, maps: torch.Tensor) -> torch.Tensor:
        """(N, K, ...) sum of ``maps`` (N, *S, ...) over each group's units."""
        flat = maps.flatten(1, self.groups.dim() - 1)
        index = self.groups.flatten(1).view(*self.groups.shape[:1], -1, *(1,) * (flat.dim() - 2)).expand_as(flat)
        sums = torch.zeros((len(flat), self.chosen.shape[-1], *flat.shape[2:]), dtype=flat.dtype, device=flat.device)
        return sums.scatter_add_(1, index, flat)

    def attribution_sums(self, maps: torch.Tensor) -> torch.Tensor:
        """(N, n, ...) Iᵀφ for every sample: ``maps`` (N, *S, ...) summed over the removed units."""
        sums = self.group_sums(maps)
        chosen = self.chosen.to(sums.dtype)
        return torch.einsum("nsk,nk...->ns...", chosen, sums)
